//! Gantry's own container images, as `scripts/images` builds them: static binaries in
//! `target/static` (of the dev profile, much quicker to build than the release one), one image
//! per binary from the repository's `Dockerfile` with buildah (no Docker daemon), each checked by
//! unpacking it, then pushed to a registry.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use crate::error::{HarnessError, IoContext};

/// Prefixes of the variables cargo sets for the crate it runs.
const CARGO_SETS: [&str; 8] = [
    "CARGO_PKG_",
    "CARGO_MANIFEST_",
    "CARGO_CRATE_",
    "CARGO_BIN_",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_RUSTC_CURRENT_DIR",
    "CARGO_CFG_",
];

/// `bash`, without what cargo sets for this test binary (CARGO_PKG_NAME, CARGO_MANIFEST_DIR,
/// ...): those would reach the build scripts that watch them (ring's does) when a script runs
/// cargo, and every build from a test would then differ from one run by hand, and rebuild most
/// dependencies.
pub fn script_command() -> Command {
    let mut command = Command::new("bash");
    for (name, _) in std::env::vars_os() {
        let set_by_cargo = name.to_str().is_some_and(|name| {
            CARGO_SETS.iter().any(|prefix| name.starts_with(prefix)) || name == "OUT_DIR"
        });
        if set_by_cargo {
            command.env_remove(name);
        }
    }
    command
}

/// The pushed images, pinned by digest (`host:port/gantry-provisioner@sha256:...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GantryImages {
    pub provisioner: String,
    pub storage: String,
    /// A copy of `manifests/` with a `kustomization.yaml` whose `images` point at these images
    /// (removed when the test binary exits): `kubectl apply -k` it.
    pub kustomization: PathBuf,
}

/// Builds both images (the binaries only if cargo finds them stale), pushes them to the
/// plain-HTTP registry `registry` (`host:port`) and writes a kustomization of `manifests/` for
/// them. Runs once per test binary and registry.
pub fn gantry_images(registry: &str) -> Result<GantryImages, HarnessError> {
    static PUSHED: Mutex<Vec<(String, GantryImages)>> = Mutex::new(Vec::new());
    let mut pushed = PUSHED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, images)) = pushed.iter().find(|(r, _)| r == registry) {
        return Ok(images.clone());
    }
    let kustomization = tempfile::Builder::new()
        .prefix("gantry-install-")
        .tempdir()
        .context(|| "creating a directory for the kustomization".into())?
        .keep();
    crate::process::remove_at_exit(&kustomization)?;
    let script = crate::workspace_root().join("scripts/images");
    let output = script_command()
        .arg(&script)
        // Unoptimised binaries: much quicker to build than release ones, and fast enough for tests.
        .args(["--profile", "dev"])
        .args(["--push", registry, "--plain-http", "--kustomize"])
        .arg(&kustomization)
        .env(
            "CARGO",
            std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
        )
        .output()
        .context(|| format!("running {}", script.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(HarnessError::Other(format!(
            "{} --push {registry} failed ({}):\n{stdout}\n{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    let reference = |binary: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(binary)?.strip_prefix(' '))
            .map(str::to_string)
            .ok_or_else(|| {
                HarnessError::Other(format!(
                    "{} printed no image for {binary}:\n{stdout}",
                    script.display()
                ))
            })
    };
    let images = GantryImages {
        provisioner: reference("gantry-provisioner")?,
        storage: reference("gantry-storage")?,
        kustomization,
    };
    pushed.push((registry.to_string(), images.clone()));
    Ok(images)
}
