//! Gantry's own binaries as processes: the storage server and the provisioner.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::error::{HarnessError, IoContext};
use crate::process::{Lifetime, free_port, spawn_daemon, state_dir, wait_for_port};

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Set (by `scripts/test`, after `cargo build --workspace --bins`) when the binaries are known
/// to be current: tests then run them without asking cargo.
pub const BINARIES_BUILT_ENV: &str = "GANTRY_BINARIES_BUILT";

/// The path of a binary of this workspace, built (once per test binary) if needed, so a test
/// never runs a stale binary.
pub fn binary(package: &str, name: &str) -> PathBuf {
    if std::env::var_os(BINARIES_BUILT_ENV).is_some() {
        return target_dir().join(name);
    }
    static BUILT: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    let dir = target_dir();
    if !built.iter().any(|b| b == name) {
        let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .current_dir(crate::workspace_root())
            .args(["build", "--quiet", "-p", package, "--bin", name])
            .status()
            .unwrap_or_else(|e| panic!("running cargo build for {name}: {e}"));
        assert!(
            status.success(),
            "cargo build -p {package} --bin {name} failed"
        );
        built.push(name.to_string());
    }
    dir.join(name)
}

/// `target/debug` (or wherever this binary was built): test binaries live in its `deps/`,
/// other binaries in it directly.
fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let dir = exe.parent()?;
            Some(if dir.file_name().is_some_and(|n| n == "deps") {
                dir.parent()?.to_path_buf()
            } else {
                dir.to_path_buf()
            })
        })
        .unwrap_or_else(|| crate::workspace_root().join("target/debug"))
}

/// A running `gantry-storage`. Dropping it kills the process.
pub struct StorageServer {
    url: String,
    root: PathBuf,
    /// `None` when detached: the process outlives this value.
    process: Option<Child>,
}

/// How to start a storage server.
#[derive(Clone, Debug, Default)]
pub struct StorageOptions {
    /// Check bearer tokens against this kubeconfig's API server; without it, `--insecure-no-auth`.
    pub kubeconfig: Option<PathBuf>,
    /// Further flags (`--token-audience=...`).
    pub args: Vec<String>,
}

impl StorageServer {
    pub fn start(options: StorageOptions) -> Self {
        Self::start_with(options, &Lifetime::TestBinary)
            .unwrap_or_else(|e| panic!("starting gantry-storage: {e}"))
    }

    /// Starts a storage server that lives as long as `lifetime` says.
    pub fn start_with(options: StorageOptions, lifetime: &Lifetime) -> Result<Self, HarnessError> {
        let dir = state_dir(lifetime, "storage")?;
        let root = dir.join("root");
        std::fs::create_dir_all(&root).context(|| format!("creating {}", root.display()))?;
        let port = free_port()?;
        let mut command = Command::new(binary("gantry-storage", "gantry-storage"));
        command
            .arg("--root")
            .arg(&root)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"));
        match &options.kubeconfig {
            Some(kubeconfig) => {
                command.arg("--kubeconfig").arg(kubeconfig);
            }
            None => {
                command.arg("--insecure-no-auth");
            }
        }
        command.args(&options.args);
        let log = dir.join("storage.log");
        let mut process = spawn_daemon(lifetime, command, &log)?;
        wait_for_port("gantry-storage", port, &mut process, &log, START_TIMEOUT)?;
        Ok(Self {
            url: format!("http://127.0.0.1:{port}"),
            root,
            process: attached(lifetime, process),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The directory the server stores tarballs in.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for StorageServer {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }
}

/// Keeps the handle of a process that ends with this value; lets a detached one go.
fn attached(lifetime: &Lifetime, process: Child) -> Option<Child> {
    match lifetime {
        Lifetime::TestBinary => Some(process),
        Lifetime::Detached(_) => None,
    }
}

/// The value of `--identity` among a provisioner's flags (`--identity X` or `--identity=X`).
pub fn identity_flag<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Option<String> {
    let args: Vec<&str> = args.iter().filter_map(|a| a.as_ref().to_str()).collect();
    args.iter().enumerate().find_map(|(i, arg)| {
        if *arg == "--identity" {
            args.get(i + 1).map(|v| v.to_string())
        } else {
            arg.strip_prefix("--identity=").map(str::to_string)
        }
    })
}

/// A running `gantry-provisioner`. Dropping it kills the process.
pub struct Provisioner {
    /// `None` when detached: the process outlives this value.
    process: Option<Child>,
    pid: u32,
    metrics_url: String,
    log: PathBuf,
}

/// How to start a provisioner.
#[derive(Clone, Debug)]
pub struct ProvisionerOptions {
    pub kubeconfig: PathBuf,
    pub storage_url: String,
    pub storage_token: Option<String>,
    /// Namespace of pull secrets and the Lease.
    pub namespace: String,
    /// Further flags (`--resolve-interval=1s`, ...).
    pub args: Vec<String>,
}

impl Provisioner {
    pub fn start(options: ProvisionerOptions) -> Self {
        Self::start_with(options, &Lifetime::TestBinary)
            .unwrap_or_else(|e| panic!("starting gantry-provisioner: {e}"))
    }

    /// Starts one provisioner per identity from `options`; with more than one, each runs with
    /// `--sharding` and its `--identity`, and they share the bundles.
    pub fn start_replicas(
        options: &ProvisionerOptions,
        identities: &[String],
        lifetime: &Lifetime,
    ) -> Result<Vec<Self>, HarnessError> {
        identities
            .iter()
            .map(|identity| {
                let mut options = options.clone();
                if identities.len() > 1 {
                    options
                        .args
                        .extend(["--sharding".to_string(), format!("--identity={identity}")]);
                }
                Self::start_with(options, lifetime)
            })
            .collect()
    }

    /// Starts a provisioner that lives as long as `lifetime` says.
    pub fn start_with(
        options: ProvisionerOptions,
        lifetime: &Lifetime,
    ) -> Result<Self, HarnessError> {
        // Replicas of one environment (`--identity`) each get a scratch directory and a log of
        // their own.
        let dir = state_dir(
            lifetime,
            &identity_flag(&options.args)
                .map_or("provisioner".to_string(), |id| format!("provisioner-{id}")),
        )?;
        let port = free_port()?;
        let mut command = Command::new(binary("gantry-provisioner", "gantry-provisioner"));
        command
            .arg("--kubeconfig")
            .arg(&options.kubeconfig)
            .arg("--storage-url")
            .arg(&options.storage_url)
            .arg("--namespace")
            .arg(&options.namespace)
            .arg("--metrics-address")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--scratch-dir")
            .arg(&dir)
            .args(&options.args)
            .env_remove("KUBECONFIG")
            .env(
                "RUST_LOG",
                std::env::var("GANTRY_PROVISIONER_LOG")
                    .unwrap_or_else(|_| "info,gantry_provisioner=debug".into()),
            );
        if let Some(token) = &options.storage_token {
            command.env("GANTRY_STORAGE_TOKEN", token);
        }
        let log = dir.join("provisioner.log");
        let mut process = spawn_daemon(lifetime, command, &log)?;
        wait_for_port(
            "gantry-provisioner",
            port,
            &mut process,
            &log,
            START_TIMEOUT,
        )?;
        Ok(Self {
            pid: process.id(),
            process: attached(lifetime, process),
            metrics_url: format!("http://127.0.0.1:{port}"),
            log,
        })
    }

    /// Its log (stderr and stdout).
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// `http://127.0.0.1:PORT` serving /metrics, /healthz and /readyz.
    pub fn metrics_url(&self) -> &str {
        &self.metrics_url
    }

    /// The value of the metric `name` (one without labels) on /metrics; `None` when the
    /// provisioner does not answer or does not export it.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        let text = reqwest::get(format!("{}/metrics", self.metrics_url))
            .await
            .and_then(|r| r.error_for_status())
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .and_then(|value| value.trim().parse().ok())
    }

    /// The metric `name`, which the provisioner must export (a test's counter).
    pub async fn counter(&self, name: &str) -> f64 {
        self.metric(name)
            .await
            .unwrap_or_else(|| panic!("no metric {name} at {}/metrics", self.metrics_url))
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Stops the process at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }
}

impl Drop for Provisioner {
    fn drop(&mut self) {
        self.kill();
    }
}
