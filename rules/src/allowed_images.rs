//! `spec.allowedImages` of a class: which registries and repositories its bundles may name.
//!
//! An entry is a registry (`host[:port]`) or a repository prefix (`host[:port]/path`). The
//! bundle's image reference is normalised first (Docker Hub names gain `docker.io/` and
//! `library/`, host names compare without case); an entry matches when the registry is the
//! same and, for a prefix, the repository is the prefix or continues it after a `/`:
//! `registry.test/team` allows `registry.test/team/app` and `registry.test/team`, never
//! `registry.test/team-b/app`. Checked before any request is made.

use gantry_api::{Bundle, ProvisionerClass};
use gantry_image::parse_reference;
use kube_core::ResourceExt;

/// One entry of `allowedImages`, normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedImage {
    /// Lower-case `host[:port]`.
    registry: String,
    /// Repository prefix, without leading or trailing `/`; empty: the whole registry.
    prefix: String,
}

impl AllowedImage {
    /// Parses an entry; the error says what is wrong with it.
    pub fn parse(entry: &str) -> Result<Self, String> {
        let trimmed = entry.trim().trim_end_matches('/');
        if trimmed.is_empty() {
            return Err("an entry is empty".into());
        }
        if trimmed.contains(['@', ' ']) || trimmed.contains("://") {
            return Err(format!(
                "{entry:?}: expected host[:port] or host[:port]/repository-prefix, without scheme, tag or digest"
            ));
        }
        let (host, prefix) = trimmed.split_once('/').unwrap_or((trimmed, ""));
        let looks_like_host = host.contains(['.', ':']) || host == "localhost";
        if !looks_like_host {
            return Err(format!(
                "{entry:?}: must start with a registry host (with a dot or a port, or localhost), e.g. docker.io/{trimmed}"
            ));
        }
        if prefix
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains(':'))
        {
            return Err(format!("{entry:?}: a prefix names no tag"));
        }
        let mut registry = host.to_ascii_lowercase();
        if registry == "index.docker.io" {
            registry = "docker.io".into();
        }
        Ok(Self {
            registry,
            prefix: prefix.to_string(),
        })
    }

    /// Whether the image in `registry` (lower-case) and `repository` is allowed by this entry.
    fn matches(&self, registry: &str, repository: &str) -> bool {
        registry == self.registry
            && (self.prefix.is_empty()
                || repository == self.prefix
                || repository
                    .strip_prefix(&self.prefix)
                    .is_some_and(|rest| rest.starts_with('/')))
    }
}

/// Checks every entry of `allowed`; the first invalid one is named.
pub fn validate(allowed: &[String]) -> Result<(), String> {
    for entry in allowed {
        AllowedImage::parse(entry).map_err(|e| format!("spec.allowedImages: {e}"))?;
    }
    Ok(())
}

/// Whether `image` is allowed by `allowed` (empty: every image is).
pub fn is_allowed(image: &str, allowed: &[String]) -> Result<bool, String> {
    if allowed.is_empty() {
        return Ok(true);
    }
    let reference = parse_reference(image).map_err(|e| e.to_string())?;
    let registry = reference.registry().to_ascii_lowercase();
    let repository = reference.repository();
    let mut any = false;
    for entry in allowed {
        any |= AllowedImage::parse(entry)?.matches(&registry, repository);
    }
    Ok(any)
}

/// A bundle's image its class does not allow.
#[derive(Debug, thiserror::Error)]
#[error("{image} is not allowed by ProvisionerClass {class}: its allowedImages are {}", .allowed.join(", "))]
pub struct ImageNotAllowed {
    pub image: String,
    pub class: String,
    pub allowed: Vec<String>,
}

/// Refuses a bundle whose image its class does not allow (nothing is fetched before).
pub fn check(bundle: &Bundle, class: &ProvisionerClass) -> Result<(), ImageNotAllowed> {
    let allowed = &class.spec.allowed_images;
    let refuse = || ImageNotAllowed {
        image: bundle.spec.image.clone(),
        class: class.name_any(),
        allowed: allowed.clone(),
    };
    match is_allowed(&bundle.spec.image, allowed) {
        Ok(true) => Ok(()),
        Ok(false) => Err(refuse()),
        // An unparsable reference is not allowed either; the pull would report the same.
        Err(_) => Err(refuse()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(image: &str, entries: &[&str]) -> bool {
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        is_allowed(image, &entries).unwrap()
    }

    #[test]
    fn an_empty_list_allows_everything() {
        assert!(allowed("anything.test/x:v1", &[]));
    }

    #[test]
    fn a_registry_allows_all_of_its_repositories_and_only_them() {
        let entries = ["registry.example:5000"];
        assert!(allowed("registry.example:5000/team/app:v1", &entries));
        assert!(allowed(
            &format!("registry.example:5000/app@sha256:{}", "a".repeat(64)),
            &entries
        ));
        assert!(
            !allowed("registry.example/team/app:v1", &entries),
            "another port"
        );
        assert!(!allowed("registry.example:50000/app:v1", &entries));
        assert!(!allowed("evil.test/registry.example/app", &entries));
    }

    #[test]
    fn a_prefix_matches_whole_path_segments() {
        let entries = ["registry.example:5000/team/"];
        assert!(allowed("registry.example:5000/team/app:v1", &entries));
        assert!(allowed("registry.example:5000/team/sub/app:v1", &entries));
        assert!(allowed("registry.example:5000/team:v1", &entries));
        assert!(!allowed("registry.example:5000/team-b/app:v1", &entries));
        assert!(!allowed("registry.example:5000/teamx:v1", &entries));
        assert!(!allowed(
            "registry.example:5000/other/team/app:v1",
            &entries
        ));
    }

    #[test]
    fn references_and_entries_are_normalised() {
        assert!(allowed("nginx:1.25", &["docker.io/library/nginx"]));
        assert!(allowed("nginx", &["index.docker.io/library"]));
        assert!(allowed("team/app:v1", &["docker.io/team"]));
        assert!(!allowed("nginx", &["docker.io/team"]));
        assert!(allowed("Registry.Example/app:v1", &["registry.example"]));
        assert!(allowed(
            "registry.example/app:v1",
            &["REGISTRY.example/app"]
        ));
        assert!(allowed("localhost:5000/app", &["localhost:5000"]));
    }

    #[test]
    fn several_entries_allow_their_union() {
        let entries = ["a.test/team", "b.test"];
        assert!(allowed("a.test/team/x", &entries));
        assert!(allowed("b.test/y/z", &entries));
        assert!(!allowed("a.test/other/x", &entries));
    }

    #[test]
    fn malformed_entries_are_named() {
        for entry in [
            "",
            "nginx",
            "team/app",
            "https://registry.test/x",
            "registry.test/app@sha256:00",
            "registry.test/app:v1",
        ] {
            let error = validate(&[entry.to_string()]).unwrap_err();
            assert!(error.contains("allowedImages"), "{entry}: {error}");
        }
        assert!(validate(&["registry.test:5000/team/".into(), "docker.io".into()]).is_ok());
    }
}
