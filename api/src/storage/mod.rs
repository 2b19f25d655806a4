//! The storage server's wire protocol, shared by the server (`gantry-storage`) and its client
//! ([`client`], feature `client`: the provisioner's and the unpack program's): request paths, the
//! names they carry and the JSON bodies.
//!
//! Tarballs live at `/bundles/{bundle}/{sha256-hex}.tar.gz`; `GET /bundles/{bundle}` lists
//! them. Only names that are valid as they appear on the wire are accepted: a valid bundle
//! name or digest never needs percent-encoding, so any `%`, `/`, `..` or other unexpected
//! byte makes a path invalid before the server makes any file system call.

#[cfg(feature = "client")]
pub mod client;

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Length limit of a Kubernetes object name (DNS-1123 subdomain).
pub const MAX_BUNDLE_NAME_LEN: usize = 253;
/// Length of a sha256 digest in hexadecimal.
pub const DIGEST_HEX_LEN: usize = 64;
/// Suffix of every stored tarball.
pub const TARBALL_SUFFIX: &str = ".tar.gz";
/// Path prefix of the bundle API.
pub const BUNDLES_PREFIX: &str = "/bundles/";

#[derive(Debug, Error, PartialEq, Eq)]
pub enum NameError {
    #[error("bundle name is empty")]
    EmptyBundle,
    #[error("bundle name is {0} bytes long; the limit is {MAX_BUNDLE_NAME_LEN}")]
    BundleTooLong(usize),
    #[error(
        "bundle name {0:?} is not a valid Kubernetes name (lowercase letters, digits, '-' and '.', \
         each dot-separated part starting and ending with a letter or digit)"
    )]
    InvalidBundle(String),
    #[error("digest {0:?} is not {DIGEST_HEX_LEN} lowercase hexadecimal digits")]
    InvalidDigest(String),
    #[error("file name {0:?} is not <sha256-hex>{TARBALL_SUFFIX}")]
    InvalidFileName(String),
    #[error(
        "path {0:?} is not /bundles/<bundle> or /bundles/<bundle>/<sha256-hex>{TARBALL_SUFFIX}"
    )]
    InvalidPath(String),
}

/// Shortens untrusted input quoted in error messages.
fn shorten(s: &str) -> String {
    const MAX: usize = 80;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// A bundle name: a DNS-1123 subdomain, as Kubernetes requires for `Bundle` objects.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BundleName(String);

impl BundleName {
    pub fn parse(s: &str) -> Result<Self, NameError> {
        if s.is_empty() {
            return Err(NameError::EmptyBundle);
        }
        if s.len() > MAX_BUNDLE_NAME_LEN {
            return Err(NameError::BundleTooLong(s.len()));
        }
        // Every dot-separated label is non-empty, so "." and ".." can never pass.
        let valid = s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        });
        if !valid {
            return Err(NameError::InvalidBundle(shorten(s)));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BundleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A sha256 digest in lowercase hexadecimal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    pub fn parse(s: &str) -> Result<Self, NameError> {
        let valid = s.len() == DIGEST_HEX_LEN
            && s.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
        if !valid {
            return Err(NameError::InvalidDigest(shorten(s)));
        }
        Ok(Self(s.to_owned()))
    }

    /// Parses a stored file name, `<hex>.tar.gz`.
    pub fn from_file_name(name: &str) -> Result<Self, NameError> {
        let hex = name
            .strip_suffix(TARBALL_SUFFIX)
            .ok_or_else(|| NameError::InvalidFileName(shorten(name)))?;
        Self::parse(hex).map_err(|_| NameError::InvalidFileName(shorten(name)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The tarball's file name, `<hex>.tar.gz` (the last path segment and the name on disk).
    pub fn file_name(&self) -> String {
        format!("{}{TARBALL_SUFFIX}", self.0)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a request path under `/bundles/` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `/bundles/{bundle}`
    Bundle(BundleName),
    /// `/bundles/{bundle}/{digest}.tar.gz`
    Tarball(BundleName, Digest),
}

impl Target {
    /// Parses the raw (still percent-encoded) path of a request.
    pub fn parse(path: &str) -> Result<Self, NameError> {
        let rest = path
            .strip_prefix(BUNDLES_PREFIX)
            .ok_or_else(|| NameError::InvalidPath(shorten(path)))?;
        let mut parts = rest.split('/');
        let bundle = parts.next().unwrap_or_default();
        let file = parts.next();
        if parts.next().is_some() {
            return Err(NameError::InvalidPath(shorten(path)));
        }
        let bundle = BundleName::parse(bundle)?;
        match file {
            None => Ok(Self::Bundle(bundle)),
            Some(file) => Ok(Self::Tarball(bundle, Digest::from_file_name(file)?)),
        }
    }

    /// Validates a bundle name and a hex digest as a tarball's target.
    pub fn tarball(bundle: &str, hex: &str) -> Result<Self, NameError> {
        Ok(Self::Tarball(
            BundleName::parse(bundle)?,
            Digest::parse(hex)?,
        ))
    }

    /// Validates a bundle name as the target of a listing or a bundle deletion.
    pub fn bundle_of(bundle: &str) -> Result<Self, NameError> {
        Ok(Self::Bundle(BundleName::parse(bundle)?))
    }

    pub fn bundle(&self) -> &BundleName {
        match self {
            Self::Bundle(b) | Self::Tarball(b, _) => b,
        }
    }

    /// The request path; [`Target::parse`] reads it back.
    pub fn path(&self) -> String {
        match self {
            Self::Bundle(bundle) => bundle_path(bundle.as_str()),
            Self::Tarball(bundle, digest) => tarball_path(bundle.as_str(), digest.as_str()),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path())
    }
}

/// `/bundles/{bundle}`, for a name already known to be valid (use [`Target`] to validate).
pub fn bundle_path(bundle: &str) -> String {
    format!("{BUNDLES_PREFIX}{bundle}")
}

/// `/bundles/{bundle}/{hex}.tar.gz`, for names already known to be valid (use [`Target`] to
/// validate).
pub fn tarball_path(bundle: &str, hex: &str) -> String {
    format!("{BUNDLES_PREFIX}{bundle}/{hex}{TARBALL_SUFFIX}")
}

/// One stored tarball, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredTarball {
    /// sha256 in hexadecimal.
    pub digest: String,
    pub size: u64,
}

/// The body of `GET /bundles/{bundle}`: the bundle's tarballs, sorted by digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub bundle: String,
    pub tarballs: Vec<StoredTarball>,
}

/// The body of a successful `PUT /bundles/{bundle}/{digest}.tar.gz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutResponse {
    pub digest: String,
    pub size: u64,
    /// False when the tarball was already stored.
    pub created: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn bundle_names() {
        for ok in ["a", "my-bundle", "a.b.c", "x1", "1x", "a-b.c-d"] {
            assert_eq!(BundleName::parse(ok).unwrap().as_str(), ok);
        }
        for bad in [
            ".", "..", "a..b", ".a", "a.", "-a", "a-", "A", "a_b", "a/b", "%2e%2e", "a%2fb", "a b",
            "é", "a\0", "a.-b",
        ] {
            assert!(BundleName::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(BundleName::parse(""), Err(NameError::EmptyBundle));
        let long = "a".repeat(254);
        assert_eq!(BundleName::parse(&long), Err(NameError::BundleTooLong(254)));
        assert!(BundleName::parse(&"a".repeat(253)).is_ok());
    }

    #[test]
    fn digests() {
        assert!(Digest::parse(HEX).is_ok());
        assert!(Digest::parse(&HEX.to_uppercase()).is_err());
        assert!(Digest::parse(&HEX[1..]).is_err());
        assert!(Digest::parse(&format!("{HEX}0")).is_err());
        assert!(Digest::parse(&HEX.replace('a', "g")).is_err());
        assert_eq!(
            Digest::from_file_name(&format!("{HEX}.tar.gz"))
                .unwrap()
                .as_str(),
            HEX
        );
        assert!(Digest::from_file_name(HEX).is_err());
        assert!(Digest::from_file_name(&format!("{HEX}.tar")).is_err());
        assert!(Digest::from_file_name(&format!(".{HEX}.tar.gz")).is_err());
    }

    #[test]
    fn paths() {
        let b = BundleName::parse("demo").unwrap();
        let d = Digest::parse(HEX).unwrap();
        assert_eq!(
            Target::parse("/bundles/demo"),
            Ok(Target::Bundle(b.clone()))
        );
        assert_eq!(
            Target::parse(&format!("/bundles/demo/{HEX}.tar.gz")),
            Ok(Target::Tarball(b, d))
        );
        for bad in [
            "/bundles",
            "/bundles/",
            "/bundles//",
            "/bundles/demo/",
            "/bundles/../etc/passwd",
            "/bundles/%2e%2e/x",
            "/bundles/demo%2f..%2f..%2fetc",
            "/bundles//etc/passwd",
            "/bundles/demo/../../x.tar.gz",
            &format!("/bundles/demo/{HEX}.tar.gz/x"),
            &format!("/bundles/demo/%2e%2e/{HEX}.tar.gz"),
            "/etc/passwd",
            "//bundles/demo",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn built_paths_parse_back() {
        for bundle in ["a", "demo", "a-b.c-d", &"x".repeat(MAX_BUNDLE_NAME_LEN)] {
            let listing = Target::bundle_of(bundle).unwrap();
            assert_eq!(listing.path(), format!("/bundles/{bundle}"));
            assert_eq!(Target::parse(&listing.path()), Ok(listing.clone()));
            assert_eq!(listing.to_string(), listing.path());

            let tarball = Target::tarball(bundle, HEX).unwrap();
            assert_eq!(tarball.path(), format!("/bundles/{bundle}/{HEX}.tar.gz"));
            assert_eq!(tarball.path(), tarball_path(bundle, HEX));
            assert_eq!(Target::parse(&tarball.path()), Ok(tarball.clone()));
            assert_eq!(tarball.bundle().as_str(), bundle);
        }
        assert!(Target::tarball("Demo", HEX).is_err());
        assert!(Target::tarball("demo", &HEX[1..]).is_err());
        assert!(Target::bundle_of("../x").is_err());
    }

    #[test]
    fn bodies_round_trip() {
        let listing = Listing {
            bundle: "demo".into(),
            tarballs: vec![StoredTarball {
                digest: HEX.into(),
                size: 11,
            }],
        };
        let json = serde_json::to_string(&listing).unwrap();
        assert_eq!(
            json,
            format!(r#"{{"bundle":"demo","tarballs":[{{"digest":"{HEX}","size":11}}]}}"#)
        );
        assert_eq!(serde_json::from_str::<Listing>(&json).unwrap(), listing);
        let put = PutResponse {
            digest: HEX.into(),
            size: 11,
            created: true,
        };
        let json = serde_json::to_string(&put).unwrap();
        assert_eq!(
            json,
            format!(r#"{{"digest":"{HEX}","size":11,"created":true}}"#)
        );
        assert_eq!(serde_json::from_str::<PutResponse>(&json).unwrap(), put);
    }

    #[test]
    fn long_input_is_shortened_in_messages() {
        let long = "X".repeat(10_000);
        let msg = BundleName::parse(&long[..200]).unwrap_err().to_string();
        assert!(msg.len() < 300, "{msg}");
        let msg = Digest::parse(&long).unwrap_err().to_string();
        assert!(msg.len() < 300, "{msg}");
    }
}
