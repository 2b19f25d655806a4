//! The real `cosign` CLI (built from its Go module by `tools/cosign/build.sh`): key pairs and
//! signatures pushed to a plain-HTTP loopback registry, without any Sigstore service.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::bundles::run_ok;
use crate::control_plane::built_tools;

/// Names a directory holding a `cosign` binary (skips the build).
pub const COSIGN_DIR_ENV: &str = "GANTRY_COSIGN_DIR";

/// The `cosign` binary: from `GANTRY_COSIGN_DIR`, else built (once, then cached) by
/// `tools/cosign/build.sh`. Fails the test, naming both, when neither gives one.
pub fn cosign_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        built_tools(COSIGN_DIR_ENV, "tools/cosign/build.sh", &[], &["cosign"])
            .unwrap_or_else(|e| panic!("the cosign CLI is needed: {e}"))
            .join("cosign")
    })
}

/// How a signature is stored next to the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignatureFormat {
    /// cosign's default: a Sigstore bundle attached as an OCI referrer of the digest.
    Bundle,
    /// cosign 2's: a `sha256-<hex>.sig` signature image (`--new-bundle-format=false`).
    SignatureImage,
}

/// A cosign key pair (`cosign generate-key-pair`, empty password) in a directory of its own.
pub struct CosignKey {
    dir: tempfile::TempDir,
}

impl CosignKey {
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        run_ok(
            cosign(dir.path())
                .arg("generate-key-pair")
                .current_dir(dir.path()),
        );
        CosignKey { dir }
    }

    /// `cosign.pub`, PEM.
    pub fn public_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("cosign.pub")).expect("reading cosign.pub")
    }

    /// Signs `image` (`registry/repository@sha256:...`, on a plain-HTTP registry) and pushes
    /// the signature next to it, with no transparency log.
    pub fn sign(&self, image: &str, format: SignatureFormat) {
        let mut command = cosign(self.dir.path());
        command
            .arg("sign")
            .arg("--key")
            .arg(self.dir.path().join("cosign.key"))
            .args([
                "--yes",
                "--allow-http-registry",
                "--use-signing-config=false",
                "--tlog-upload=false",
            ]);
        if format == SignatureFormat::SignatureImage {
            command.arg("--new-bundle-format=false");
        }
        run_ok(command.arg(image));
    }
}

/// A cosign command that asks nothing and reaches no Sigstore service: empty key password, its
/// own home for caches.
fn cosign(home: &Path) -> Command {
    let mut command = Command::new(cosign_binary());
    command
        .env("COSIGN_PASSWORD", "")
        .env("HOME", home)
        .env("TUF_ROOT", home.join("tuf"))
        .env("SIGSTORE_NO_CACHE", "true")
        .stdin(std::process::Stdio::null());
    command
}
