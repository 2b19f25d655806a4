//! A bundle's `manifests/` read from a file system that already holds it (the root file system
//! of a container running the bundle image, as the node's runtime unpacked it): the same
//! validation and limits as a pull, and the same canonical tarball.

use std::path::Path;

use super::canonical::{CanonicalDigest, write_canonical_file_objects};
use super::error::ImageError;
use super::error::LimitKind;
use super::layer::BundleFiles;
use super::limits::EffectiveLimits;
use super::objects::{BundleObject, validate_files};

/// Reads `root/manifests`, validates its files as a pull validates the files of the final
/// layer tree, and writes the canonical tarball to `out`.
///
/// `maxUncompressedBytes` counts the files' bytes (the runtime already applied the layers);
/// `maxCompressedBytes` is the runtime's to bear.
pub fn canonical_from_root(
    root: &Path,
    out: &Path,
    limits: &EffectiveLimits,
) -> Result<(CanonicalDigest, Vec<BundleObject>), ImageError> {
    let files = BundleFiles::from_dir(root, limits)?;
    if files.total_bytes() > limits.max_uncompressed_bytes {
        return Err(limits.exceeded(LimitKind::UncompressedBytes, "manifests/"));
    }
    validate_files(&files, limits)?;
    write_canonical_file_objects(&files, out, limits)
}

/// A bundle directory holding `files` in `manifests/`.
#[cfg(test)]
pub(crate) fn bundle_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("manifests")).unwrap();
    for (name, content) in files {
        std::fs::write(dir.path().join("manifests").join(name), content).unwrap();
    }
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG_MAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n";

    #[test]
    fn the_tarball_is_the_one_a_pull_writes() {
        let dir = bundle_dir(&[("a.yaml", CONFIG_MAP)]);
        let out = dir.path().join("out.tar.gz");
        let limits = EffectiveLimits::default();
        let (digest, objects) = canonical_from_root(dir.path(), &out, &limits).unwrap();
        assert_eq!(objects.len(), 1);
        let files = BundleFiles::from_dir(dir.path(), &limits).unwrap();
        let mut again = Vec::new();
        let expected = crate::write_canonical(&files, &mut again).unwrap();
        assert_eq!(digest.digest, expected.digest);
        assert_eq!(std::fs::read(&out).unwrap(), again);
    }

    #[test]
    fn content_errors_are_the_pull_errors() {
        let limits = EffectiveLimits::default();
        let dir = bundle_dir(&[("a.yaml", "kind: [")]);
        let error = canonical_from_root(dir.path(), &dir.path().join("o"), &limits).unwrap_err();
        assert!(matches!(error, ImageError::InvalidYaml { .. }), "{error}");

        let empty = tempfile::tempdir().unwrap();
        let error = canonical_from_root(empty.path(), &empty.path().join("o"), &limits);
        assert!(matches!(error, Err(ImageError::MissingManifests)));

        let dir = bundle_dir(&[("a.yaml", CONFIG_MAP)]);
        let small = EffectiveLimits {
            max_uncompressed_bytes: 10,
            ..limits
        };
        let error = canonical_from_root(dir.path(), &dir.path().join("o"), &small).unwrap_err();
        assert!(
            matches!(
                error,
                ImageError::LimitExceeded {
                    limit: LimitKind::UncompressedBytes,
                    ..
                }
            ),
            "{error}"
        );
    }
}
