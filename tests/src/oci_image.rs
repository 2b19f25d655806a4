//! Container images built here from a root filesystem directory: packed into an OCI layout with
//! `umoci` and pushed with `skopeo` to a plain-HTTP registry. Nothing comes from outside the
//! machine: the node's sandbox ("pause") image is a static binary compiled here, and the
//! `busybox` image for test workloads is Debian's `busybox-static`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{HarnessError, IoContext};
use crate::process::require_program;

/// The image configuration of a root filesystem packed by [`push_rootfs`].
#[derive(Clone, Debug, Default)]
pub struct ImageConfig {
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd` (the arguments of the entrypoint, or the command when there is none).
    pub cmd: Vec<String>,
    /// `User`, e.g. `65532:65532`.
    pub user: Option<String>,
    /// `Env`, each `NAME=value`.
    pub env: Vec<String>,
    /// `WorkingDir`.
    pub working_dir: Option<String>,
}

/// Packs the directory `rootfs` (as the image's `/`, owners and modes as they are on disk)
/// into a single-layer linux/amd64 OCI image with `config`, and pushes it over plain HTTP to
/// `registry` (`HOST:PORT`) as `repository:tag`. Returns the pushed reference,
/// `HOST:PORT/repository:tag`.
///
/// Needs `umoci` and `skopeo` (Debian packages of those names). `work` is a directory for the
/// intermediate OCI layout; it is left in place for the caller to remove.
pub fn push_rootfs(
    rootfs: &Path,
    config: &ImageConfig,
    registry: &str,
    repository_and_tag: &str,
    work: &Path,
) -> Result<String, HarnessError> {
    require_program("umoci", "umoci")?;
    require_program("skopeo", "skopeo")?;
    let layout = work.join(format!(
        "layout-{}",
        repository_and_tag.replace(['/', ':'], "-")
    ));
    if layout.exists() {
        std::fs::remove_dir_all(&layout).context(|| format!("removing {}", layout.display()))?;
    }
    let image = format!("{}:image", layout.display());
    run(Command::new("umoci")
        .arg("init")
        .arg("--layout")
        .arg(&layout))?;
    run(Command::new("umoci").args(["new", "--image", &image]))?;
    // umoci insert puts the directory's content at / as a new layer.
    run(Command::new("umoci")
        .args(["insert", "--no-history", "--image", &image])
        .arg(rootfs)
        .arg("/"))?;
    let mut configure = Command::new("umoci");
    configure.args([
        "config",
        "--no-history",
        "--image",
        &image,
        "--os",
        "linux",
        "--architecture",
        "amd64",
    ]);
    for entry in &config.entrypoint {
        configure.arg(format!("--config.entrypoint={entry}"));
    }
    for arg in &config.cmd {
        configure.arg(format!("--config.cmd={arg}"));
    }
    if let Some(user) = &config.user {
        configure.arg(format!("--config.user={user}"));
    }
    for variable in &config.env {
        configure.arg(format!("--config.env={variable}"));
    }
    if let Some(dir) = &config.working_dir {
        configure.arg(format!("--config.workingdir={dir}"));
    }
    run(&mut configure)?;
    let reference = format!("{registry}/{repository_and_tag}");
    run(Command::new("skopeo")
        .args(["copy", "--quiet", "--dest-tls-verify=false"])
        .arg(format!("oci:{image}"))
        .arg(format!("docker://{reference}")))?;
    Ok(reference)
}

/// A C program that does what a pod sandbox's process must: stay alive, reap the zombies of
/// the pod's shared PID namespace, and exit on SIGTERM or SIGINT.
const PAUSE_C: &str = r#"#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signal) { (void)signal; _exit(0); }
static void reap(int signal) { (void)signal; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
  struct sigaction action = {0};
  action.sa_handler = stop;
  sigaction(SIGTERM, &action, 0);
  sigaction(SIGINT, &action, 0);
  action.sa_handler = reap;
  action.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &action, 0);
  for (;;) pause();
}
"#;

/// Builds the sandbox image in `work` (a static `/pause` compiled with `gcc -static`) and
/// pushes it to `registry` as `gantry/pause:v1`. Returns the reference.
pub(crate) fn push_pause_image(registry: &str, work: &Path) -> Result<String, HarnessError> {
    require_program("gcc", "gcc")?;
    let rootfs = fresh_dir(&work.join("pause-rootfs"))?;
    let source = work.join("pause.c");
    std::fs::write(&source, PAUSE_C).context(|| format!("writing {}", source.display()))?;
    run(Command::new("gcc")
        .args(["-static", "-Os", "-s", "-o"])
        .arg(rootfs.join("pause"))
        .arg(&source))?;
    let config = ImageConfig {
        entrypoint: vec!["/pause".into()],
        user: Some("65535:65535".into()),
        ..ImageConfig::default()
    };
    push_rootfs(&rootfs, &config, registry, "gantry/pause:v1", work)
}

/// Builds a `busybox` image in `work` from Debian's `busybox-static` (`/bin/busybox` and a
/// symbolic link per applet: `sh`, `httpd`, `wget`, `nslookup`, `sleep`, ...) and pushes it to
/// `registry` as `gantry/busybox:v1`. Returns the reference.
pub(crate) fn push_busybox_image(registry: &str, work: &Path) -> Result<String, HarnessError> {
    let busybox = Path::new("/bin/busybox");
    if !busybox.is_file() {
        return Err(HarnessError::Other(
            "/bin/busybox is missing; install the Debian package `busybox-static` (`.ci/run` does)"
                .into(),
        ));
    }
    let rootfs = fresh_dir(&work.join("busybox-rootfs"))?;
    for dir in ["bin", "tmp", "etc", "www"] {
        let path = rootfs.join(dir);
        std::fs::create_dir_all(&path).context(|| format!("creating {}", path.display()))?;
    }
    std::fs::copy(busybox, rootfs.join("bin/busybox"))
        .context(|| format!("copying {}", busybox.display()))?;
    let applets = run(Command::new(busybox).arg("--list"))?;
    for applet in applets.lines().map(str::trim).filter(|a| !a.is_empty()) {
        if applet == "busybox" || applet.contains('/') {
            continue;
        }
        let link = rootfs.join("bin").join(applet);
        std::os::unix::fs::symlink("busybox", &link)
            .context(|| format!("linking {}", link.display()))?;
    }
    let passwd = rootfs.join("etc/passwd");
    std::fs::write(
        &passwd,
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )
    .context(|| format!("writing {}", passwd.display()))?;
    let config = ImageConfig {
        cmd: vec!["sh".into()],
        env: vec!["PATH=/bin".into()],
        ..ImageConfig::default()
    };
    push_rootfs(&rootfs, &config, registry, "gantry/busybox:v1", work)
}

fn fresh_dir(dir: &Path) -> Result<PathBuf, HarnessError> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
    Ok(dir.to_path_buf())
}

/// Runs `command` to completion; its standard output, or an error with its standard error.
pub(crate) fn run(command: &mut Command) -> Result<String, HarnessError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let output = command.output().context(|| format!("running {program}"))?;
    if !output.status.success() {
        let args: Vec<String> = command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        return Err(HarnessError::Other(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
