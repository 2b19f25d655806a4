//! Platforms (`os/arch[/variant]`) and their selection from an image index, variant-aware.

use std::fmt;
use std::str::FromStr;

use oci_client::manifest::ImageIndexEntry;

use super::error::ImageError;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    pub fn new(os: &str, architecture: &str, variant: Option<&str>) -> Self {
        Platform {
            os: os.to_string(),
            architecture: architecture.to_string(),
            variant: variant.filter(|v| !v.is_empty()).map(str::to_string),
        }
    }

    /// The platform this program runs on, in OCI (Go) names.
    pub fn current() -> Self {
        let (architecture, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "x86" => ("386", None),
            "aarch64" => ("arm64", None),
            "arm" => ("arm", Some("v7")),
            "powerpc64" => ("ppc64", None),
            "s390x" => ("s390x", None),
            "riscv64" => ("riscv64", None),
            "loongarch64" => ("loong64", None),
            other => (other, None),
        };
        // Little-endian ppc64 is the common one; Rust names both "powerpc64".
        let architecture = if architecture == "ppc64" && cfg!(target_endian = "little") {
            "ppc64le"
        } else {
            architecture
        };
        Platform::new(std::env::consts::OS, architecture, variant)
    }

    /// The variant with the architecture's default filled in, for comparisons.
    fn normalized_variant(&self) -> Option<&str> {
        match (self.architecture.as_str(), self.variant.as_deref()) {
            (_, Some(v)) => Some(v),
            ("arm64", None) => Some("v8"),
            ("arm", None) => Some("v7"),
            ("amd64", None) => Some("v1"),
            _ => None,
        }
    }

    /// Whether an index entry for `candidate` serves a request for `self`: same OS and
    /// architecture, and the same variant once defaults are applied (`arm64` is `arm64/v8`,
    /// `arm` is `arm/v7`, `amd64` is `amd64/v1`).
    pub fn matches(&self, candidate: &Platform) -> bool {
        self.os == candidate.os
            && self.architecture == candidate.architecture
            && self.normalized_variant() == candidate.normalized_variant()
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(variant) = &self.variant {
            write!(f, "/{variant}")?;
        }
        Ok(())
    }
}

impl FromStr for Platform {
    type Err = ImageError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        let valid = |p: &&str| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        };
        if !(2..=3).contains(&parts.len()) || !parts.iter().all(valid) {
            return Err(ImageError::Config(format!(
                "invalid platform {s:?}: expected os/arch[/variant], e.g. linux/arm64/v8"
            )));
        }
        Ok(Platform::new(parts[0], parts[1], parts.get(2).copied()))
    }
}

impl serde::Serialize for Platform {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

fn entry_platform(entry: &ImageIndexEntry) -> Option<Platform> {
    entry.platform.as_ref().map(|p| {
        Platform::new(
            &p.os.to_string(),
            &p.architecture.to_string(),
            p.variant.as_deref(),
        )
    })
}

/// Picks the entry of an index that serves `wanted`: the first one whose variant is the
/// one asked for exactly, else the first that matches once defaults are applied. Entries
/// without a platform (attestations and the like) are never chosen.
pub fn select<'a>(
    entries: &'a [ImageIndexEntry],
    wanted: &Platform,
    reference: &str,
) -> Result<(&'a ImageIndexEntry, Platform), ImageError> {
    let candidates: Vec<(&ImageIndexEntry, Platform)> = entries
        .iter()
        .filter_map(|e| entry_platform(e).map(|p| (e, p)))
        .collect();
    let exact = candidates.iter().find(|(_, p)| {
        p.os == wanted.os && p.architecture == wanted.architecture && p.variant == wanted.variant
    });
    let chosen = exact.or_else(|| candidates.iter().find(|(_, p)| wanted.matches(p)));
    match chosen {
        Some((entry, platform)) => Ok((entry, platform.clone())),
        None => {
            let mut available: Vec<String> = candidates
                .iter()
                .map(|(_, p)| p.to_string())
                .filter(|p| p != "unknown/unknown")
                .collect();
            available.dedup();
            Err(ImageError::PlatformNotFound {
                reference: reference.to_string(),
                wanted: wanted.to_string(),
                available,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(digest: &str, platform: Option<&str>) -> ImageIndexEntry {
        let mut value = serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": 1,
        });
        if let Some(p) = platform {
            let parts: Vec<&str> = p.split('/').collect();
            let mut platform = serde_json::json!({"os": parts[0], "architecture": parts[1]});
            if let Some(v) = parts.get(2) {
                platform["variant"] = (*v).into();
            }
            value["platform"] = platform;
        }
        serde_json::from_value(value).unwrap()
    }

    fn index() -> Vec<ImageIndexEntry> {
        vec![
            entry("sha256:amd64", Some("linux/amd64")),
            entry("sha256:armv6", Some("linux/arm/v6")),
            entry("sha256:armv7", Some("linux/arm/v7")),
            entry("sha256:arm64", Some("linux/arm64/v8")),
            entry("sha256:att", Some("unknown/unknown")),
            entry("sha256:none", None),
        ]
    }

    fn pick(wanted: &str) -> Result<String, ImageError> {
        let entries = index();
        let wanted: Platform = wanted.parse().unwrap();
        select(&entries, &wanted, "repo:tag").map(|(e, _)| e.digest.clone())
    }

    #[test]
    fn parse_and_display() {
        let p: Platform = "linux/arm64/v8".parse().unwrap();
        assert_eq!(p, Platform::new("linux", "arm64", Some("v8")));
        assert_eq!(p.to_string(), "linux/arm64/v8");
        assert_eq!(
            "linux/amd64".parse::<Platform>().unwrap().to_string(),
            "linux/amd64"
        );
        for bad in ["linux", "linux/", "/amd64", "a/b/c/d", "linux/am d64"] {
            assert!(bad.parse::<Platform>().is_err(), "{bad}");
        }
    }

    #[test]
    fn variants_are_honoured() {
        assert_eq!(pick("linux/arm/v6").unwrap(), "sha256:armv6");
        assert_eq!(pick("linux/arm/v7").unwrap(), "sha256:armv7");
        // arm without a variant means v7, arm64 without a variant means v8.
        assert_eq!(pick("linux/arm").unwrap(), "sha256:armv7");
        assert_eq!(pick("linux/arm64").unwrap(), "sha256:arm64");
        assert_eq!(pick("linux/arm64/v8").unwrap(), "sha256:arm64");
        assert_eq!(pick("linux/amd64").unwrap(), "sha256:amd64");
    }

    #[test]
    fn absent_platforms_list_what_the_index_has() {
        match pick("linux/s390x") {
            Err(ImageError::PlatformNotFound {
                wanted, available, ..
            }) => {
                assert_eq!(wanted, "linux/s390x");
                assert_eq!(
                    available,
                    vec![
                        "linux/amd64",
                        "linux/arm/v6",
                        "linux/arm/v7",
                        "linux/arm64/v8"
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(pick("linux/amd64/v3").is_err());
        assert!(pick("windows/amd64").is_err());
    }

    #[test]
    fn the_current_platform_is_known() {
        let p = Platform::current();
        assert_eq!(p.os, std::env::consts::OS);
        assert!(!p.architecture.is_empty());
        if cfg!(target_arch = "x86_64") {
            assert_eq!(p.to_string(), "linux/amd64");
        }
    }
}
