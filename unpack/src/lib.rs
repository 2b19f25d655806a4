//! The unpack program of `pullMode: Node` (`gantry-unpack`), run inside the bundle image by an
//! unpack Pod: `/manifests` through the same validation and limits as a direct pull, the
//! canonical tarball to the storage server, and a report (`gantry_api::unpack`) as the Pod's
//! termination message.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use gantry_api::storage::client::StorageClient;
use gantry_api::unpack::{EXIT_FAILED, EXIT_INVALID_BUNDLE, UnpackReport};
use gantry_image::{EffectiveLimits, ImageError, LimitKind, Platform, canonical_from_root};

/// Why the program failed.
#[derive(Debug, thiserror::Error)]
pub enum UnpackFailure {
    /// The content breaks the bundle format or a limit: the text a direct pull reports after
    /// `invalid bundle <image>: `.
    #[error("{0}")]
    InvalidBundle(ImageError),
    /// Anything else (storage, scratch space).
    #[error("{0}")]
    Other(String),
}

impl UnpackFailure {
    /// The program's exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            UnpackFailure::InvalidBundle(_) => EXIT_INVALID_BUNDLE,
            UnpackFailure::Other(_) => EXIT_FAILED,
        }
    }
}

/// Validates `root/manifests` and writes the canonical tarball into `scratch`, classifying
/// errors as a direct pull does.
pub fn prepare(
    root: &Path,
    scratch: &Path,
    limits: &EffectiveLimits,
) -> Result<(PathBuf, UnpackReport), UnpackFailure> {
    let out = scratch.join("canonical.tar.gz");
    let (digest, objects) = canonical_from_root(root, &out, limits).map_err(|e| {
        if e.is_content_problem() {
            UnpackFailure::InvalidBundle(e)
        } else {
            UnpackFailure::Other(e.to_string())
        }
    })?;
    // The runtime pulled the layers, so their compressed size is not known here; the
    // canonical tarball is the compressed content that is stored and read back under
    // `maxCompressedBytes`, so it is held to that limit before it is stored.
    let size = std::fs::metadata(&out)
        .map_err(|e| UnpackFailure::Other(format!("reading {}: {e}", out.display())))?
        .len();
    if size > limits.max_compressed_bytes {
        return Err(UnpackFailure::InvalidBundle(ImageError::LimitExceeded {
            limit: LimitKind::CompressedBytes,
            value: limits.max_compressed_bytes,
            culprit: format!("the canonical tarball of manifests/ ({size} bytes)"),
        }));
    }
    Ok((
        out,
        UnpackReport {
            content_digest: digest.digest.clone(),
            platform: Platform::current().to_string(),
            objects: objects.len(),
        },
    ))
}

/// The whole run: prepare, then upload as `bundle`.
pub async fn unpack(
    root: &Path,
    scratch: &Path,
    limits: &EffectiveLimits,
    bundle: &str,
    storage: &StorageClient,
) -> Result<UnpackReport, UnpackFailure> {
    let (root, scratch_dir, limits_copy) = (root.to_path_buf(), scratch.to_path_buf(), *limits);
    let (path, report) =
        tokio::task::spawn_blocking(move || prepare(&root, &scratch_dir, &limits_copy))
            .await
            .map_err(|e| UnpackFailure::Other(format!("validating the bundle: {e}")))??;
    let hex = report.content_digest.trim_start_matches("sha256:");
    storage
        .upload(bundle, hex, &path)
        .await
        .map_err(|e| UnpackFailure::Other(e.to_string()))?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("manifests")).unwrap();
        for (name, content) in files {
            std::fs::write(dir.path().join("manifests").join(name), content).unwrap();
        }
        dir
    }

    #[test]
    fn a_valid_directory_gives_its_canonical_tarball() {
        let dir = root(&[(
            "cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: team\n",
        )]);
        let scratch = tempfile::tempdir().unwrap();
        let (path, report) =
            prepare(dir.path(), scratch.path(), &EffectiveLimits::default()).unwrap();
        assert_eq!(report.objects, 1);
        assert_eq!(report.platform, Platform::current().to_string());
        let bytes = std::fs::read(path).unwrap();
        let objects = gantry_image::read_canonical(
            &bytes[..],
            Some(&report.content_digest),
            &EffectiveLimits::default(),
        )
        .unwrap();
        assert_eq!(objects.len(), 1);
    }

    #[test]
    fn content_errors_carry_the_direct_pull_text() {
        let dir = root(&[("bad.yaml", "apiVersion: v1\nkind: ConfigMap\n")]);
        let scratch = tempfile::tempdir().unwrap();
        let failure = prepare(dir.path(), scratch.path(), &EffectiveLimits::default())
            .expect_err("a ConfigMap without a name is refused");
        assert_eq!(failure.exit_code(), EXIT_INVALID_BUNDLE);
        // What the controller shows: the same Display as Error::InvalidBundle of a pull.
        let UnpackFailure::InvalidBundle(source) = failure else {
            panic!("not a content error")
        };
        let direct = gantry_image::BundleFiles::from_dir(dir.path(), &EffectiveLimits::default())
            .and_then(|files| gantry_image::validate_files(&files, &EffectiveLimits::default()))
            .expect_err("the same content fails validation");
        assert_eq!(source.to_string(), direct.to_string());
    }

    #[test]
    fn limits_are_the_class_limits() {
        let dir = root(&[
            (
                "a.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
            ),
            (
                "b.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n",
            ),
        ]);
        let scratch = tempfile::tempdir().unwrap();
        let limits = EffectiveLimits {
            max_objects: 1,
            ..EffectiveLimits::default()
        };
        let failure = prepare(dir.path(), scratch.path(), &limits).unwrap_err();
        assert!(failure.to_string().contains("maxObjects"), "{failure}");
    }

    #[test]
    fn the_stored_tarball_is_held_to_max_compressed_bytes() {
        let dir = root(&[(
            "a.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
        )]);
        let scratch = tempfile::tempdir().unwrap();
        let limits = EffectiveLimits {
            max_compressed_bytes: 64,
            ..EffectiveLimits::default()
        };
        let failure = prepare(dir.path(), scratch.path(), &limits).unwrap_err();
        assert_eq!(failure.exit_code(), EXIT_INVALID_BUNDLE);
        let text = failure.to_string();
        assert!(
            text.contains("maxCompressedBytes (64)") && text.contains("canonical tarball"),
            "{text}"
        );
    }
}
