//! Classification of tar entry paths: what a path means for the `manifests/` tree.

use super::error::ImageError;

/// The directory of the bundle inside the image.
pub const MANIFESTS_DIR: &str = "manifests";

/// The directory of an OLM `registry+v1` bundle's metadata (`metadata/annotations.yaml`):
/// its files are kept beside `manifests/` for the provisioner that reads them.
pub const METADATA_DIR: &str = "metadata";

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_WHITEOUT: &str = ".wh..wh..opq";

/// What an entry path designates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathClass {
    /// Outside `manifests/`: skipped.
    Outside,
    /// `manifests` itself.
    ManifestsDir,
    /// A file directly in `manifests/`.
    File(String),
    /// `.wh.<name>` in `manifests/`: removes `name` from lower layers.
    Whiteout(String),
    /// `.wh..wh..opq` in `manifests/`: removes every file of lower layers.
    Opaque,
    /// `.wh.manifests` or `.wh..wh..opq` at the root: removes the whole directory.
    RemoveAll,
    /// A regular file directly in `metadata/` (whiteouts there name nothing kept).
    Metadata(String),
}

/// Normalises and classifies a tar entry path. `..` components and absolute paths are
/// rejected wherever they are; anything nested below `manifests/` is rejected too. An entry
/// for the image root itself (`/`, `.`, `./`, as umoci and other tools write) names nothing
/// and is skipped.
pub fn classify(raw: &[u8]) -> Result<PathClass, ImageError> {
    let shown = String::from_utf8_lossy(raw).into_owned();
    let invalid = |reason: &str| ImageError::InvalidEntry {
        path: shown.clone(),
        reason: reason.to_string(),
    };
    let components: Vec<&[u8]> = raw
        .split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect();
    let Some((first, rest)) = components.split_first() else {
        // "/", "." or "./": the image root.
        return Ok(PathClass::Outside);
    };
    if raw.first() == Some(&b'/') {
        return Err(invalid("absolute path"));
    }
    if components.iter().any(|c| *c == b"..") {
        return Err(invalid("path contains a '..' component"));
    }
    if rest.is_empty() {
        return Ok(match *first {
            b"manifests" => PathClass::ManifestsDir,
            b".wh.manifests" | b".wh..wh..opq" => PathClass::RemoveAll,
            _ => PathClass::Outside,
        });
    }
    if *first == METADATA_DIR.as_bytes() && rest.len() == 1 && !raw.ends_with(b"/") {
        return Ok(match std::str::from_utf8(rest[0]) {
            Ok(name)
                if !name.starts_with(WHITEOUT_PREFIX) && !name.chars().any(char::is_control) =>
            {
                PathClass::Metadata(name.to_string())
            }
            _ => PathClass::Outside,
        });
    }
    if *first != MANIFESTS_DIR.as_bytes() {
        return Ok(PathClass::Outside);
    }
    if rest.len() > 1 || raw.ends_with(b"/") {
        return Err(invalid(
            "sub-directories are not allowed in manifests/ (files must be directly in it)",
        ));
    }
    let name = std::str::from_utf8(rest[0]).map_err(|_| invalid("file name is not UTF-8"))?;
    if name.chars().any(|c| c.is_control() || c == '\\') {
        return Err(invalid(
            "file name contains a control character or a backslash",
        ));
    }
    if name == OPAQUE_WHITEOUT {
        return Ok(PathClass::Opaque);
    }
    if let Some(target) = name.strip_prefix(WHITEOUT_PREFIX) {
        if target.is_empty() {
            return Err(invalid("whiteout without a target"));
        }
        if target == "." || target == ".." {
            return Err(invalid("whiteout of '.' or '..'"));
        }
        return Ok(PathClass::Whiteout(target.to_string()));
    }
    Ok(PathClass::File(name.to_string()))
}

/// Whether a file name has one of the extensions a bundle may hold.
pub fn has_manifest_extension(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [".yaml", ".yml", ".json"]
        .iter()
        .any(|ext| lower.len() > ext.len() && lower.ends_with(ext))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(path: &str) -> PathClass {
        classify(path.as_bytes()).unwrap()
    }

    fn rejected(path: &str) -> String {
        match classify(path.as_bytes()) {
            Err(ImageError::InvalidEntry { path: p, reason }) => {
                assert_eq!(p, path);
                reason
            }
            other => panic!("{path}: expected rejection, got {other:?}"),
        }
    }

    #[test]
    fn files_directly_in_metadata_are_kept_apart() {
        assert_eq!(
            class("metadata/annotations.yaml"),
            PathClass::Metadata("annotations.yaml".into())
        );
        assert_eq!(
            class("./metadata/annotations.yaml"),
            PathClass::Metadata("annotations.yaml".into())
        );
        assert_eq!(class("metadata/"), PathClass::Outside);
        assert_eq!(class("metadata/a/b.yaml"), PathClass::Outside);
        assert_eq!(class("metadata/.wh.annotations.yaml"), PathClass::Outside);
        assert!(classify(b"metadata/../x").is_err());
    }

    #[test]
    fn files_directly_in_manifests() {
        assert_eq!(class("manifests/a.yaml"), PathClass::File("a.yaml".into()));
        assert_eq!(
            class("./manifests/a.yaml"),
            PathClass::File("a.yaml".into())
        );
        assert_eq!(class("manifests//b.yml"), PathClass::File("b.yml".into()));
        assert_eq!(
            class("manifests/./c.json"),
            PathClass::File("c.json".into())
        );
    }

    #[test]
    fn the_directory_itself() {
        assert_eq!(class("manifests"), PathClass::ManifestsDir);
        assert_eq!(class("manifests/"), PathClass::ManifestsDir);
        assert_eq!(class("./manifests/"), PathClass::ManifestsDir);
    }

    #[test]
    fn entries_outside_are_skipped() {
        assert_eq!(class("etc/passwd"), PathClass::Outside);
        assert_eq!(class("manifestsx/a.yaml"), PathClass::Outside);
        assert_eq!(class("."), PathClass::Outside);
        assert_eq!(class("./"), PathClass::Outside);
        // The root directory entry of umoci and other tools names nothing.
        assert_eq!(class("/"), PathClass::Outside);
        assert_eq!(class("//"), PathClass::Outside);
        assert_eq!(class("/."), PathClass::Outside);
        assert_eq!(class("other/manifests/a.yaml"), PathClass::Outside);
    }

    #[test]
    fn whiteouts() {
        assert_eq!(
            class("manifests/.wh.a.yaml"),
            PathClass::Whiteout("a.yaml".into())
        );
        assert_eq!(class("manifests/.wh..wh..opq"), PathClass::Opaque);
        assert_eq!(class(".wh.manifests"), PathClass::RemoveAll);
        assert_eq!(class("./.wh..wh..opq"), PathClass::RemoveAll);
        assert_eq!(class("etc/.wh.passwd"), PathClass::Outside);
    }

    #[test]
    fn dot_dot_and_absolute_paths_are_rejected_anywhere() {
        assert!(rejected("manifests/../etc/passwd").contains(".."));
        assert!(rejected("../manifests/a.yaml").contains(".."));
        assert!(rejected("etc/../../x").contains(".."));
        assert!(rejected("/manifests/a.yaml").contains("absolute"));
        assert!(rejected("/etc/passwd").contains("absolute"));
        assert!(rejected("/etc/x").contains("absolute"));
        assert!(rejected("/./manifests/a.yaml").contains("absolute"));
        assert!(rejected("/..").contains("absolute"));
    }

    #[test]
    fn sub_directories_are_rejected() {
        assert!(rejected("manifests/sub/a.yaml").contains("sub-directories"));
        assert!(rejected("manifests/sub/").contains("sub-directories"));
        assert!(rejected("manifests/sub/.wh..wh..opq").contains("sub-directories"));
    }

    #[test]
    fn odd_names_are_rejected() {
        assert!(rejected("manifests/a\nb.yaml").contains("control"));
        assert!(rejected("manifests/a\\b.yaml").contains("backslash"));
        let raw = b"manifests/\xff.yaml";
        assert!(matches!(
            classify(raw),
            Err(ImageError::InvalidEntry { reason, .. }) if reason.contains("UTF-8")
        ));
    }

    #[test]
    fn extensions() {
        assert!(has_manifest_extension("a.yaml"));
        assert!(has_manifest_extension("a.YML"));
        assert!(has_manifest_extension("a.json"));
        assert!(!has_manifest_extension(".yaml"));
        assert!(!has_manifest_extension("README.md"));
        assert!(!has_manifest_extension("a.yaml.bak"));
    }
}
