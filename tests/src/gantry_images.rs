//! Gantry's own container images, as `scripts/images` builds them: static release binaries in
//! `target/static`, one image per binary from the repository's `Dockerfile` with buildah (no
//! Docker daemon), each checked by unpacking it, then pushed to a registry.

use std::process::Command;
use std::sync::Mutex;

use crate::error::{HarnessError, IoContext};

/// The pushed images, pinned by digest (`host:port/gantry/provisioner@sha256:...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GantryImages {
    pub provisioner: String,
    pub storage: String,
}

impl GantryImages {
    /// The `images:` entries of a kustomization that points the shipped manifests
    /// (`gantry/provisioner`, `gantry/storage-server`) at these images.
    pub fn kustomize_images(&self) -> Result<String, HarnessError> {
        let mut entries = String::from("images:\n");
        for (name, pinned) in [
            ("gantry/provisioner", &self.provisioner),
            ("gantry/storage-server", &self.storage),
        ] {
            let (new_name, digest) = pinned
                .split_once('@')
                .ok_or_else(|| HarnessError::Other(format!("{pinned} is not pinned by digest")))?;
            entries.push_str(&format!(
                "- name: {name}\n  newName: {new_name}\n  digest: {digest}\n"
            ));
        }
        Ok(entries)
    }
}

/// Builds both images (the binaries only if cargo finds them stale) and pushes them to the
/// plain-HTTP registry `registry` (`host:port`). Runs once per test binary and registry.
pub fn gantry_images(registry: &str) -> Result<GantryImages, HarnessError> {
    static PUSHED: Mutex<Vec<(String, GantryImages)>> = Mutex::new(Vec::new());
    let mut pushed = PUSHED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, images)) = pushed.iter().find(|(r, _)| r == registry) {
        return Ok(images.clone());
    }
    let script = crate::workspace_root().join("scripts/images");
    let output = Command::new("bash")
        .arg(&script)
        .args(["--push", registry, "--plain-http"])
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
    };
    pushed.push((registry.to_string(), images.clone()));
    Ok(images)
}
