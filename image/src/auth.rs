//! Registry credentials from docker config files: `~/.docker/config.json` and the
//! `.dockerconfigjson` key of `kubernetes.io/dockerconfigjson` secrets share the `auths` map.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use oci_client::secrets::RegistryAuth;

use super::error::ImageError;

/// A user name and password for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Credentials by registry host, as found in one or more docker config files. Later files
/// added with [`DockerConfig::merge`] do not override earlier ones.
#[derive(Debug, Clone, Default)]
pub struct DockerConfig {
    auths: BTreeMap<String, Credential>,
}

#[derive(serde::Deserialize)]
struct RawConfig {
    #[serde(default)]
    auths: BTreeMap<String, RawAuth>,
}

#[derive(serde::Deserialize)]
struct RawAuth {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// The host (and port) a docker config key or an image's registry designates, lower-cased,
/// with the scheme and path dropped and Docker Hub's aliases folded into `docker.io`.
pub fn normalize_registry(key: &str) -> String {
    let key = key.trim();
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".to_string()
        }
        _ => host,
    }
}

impl DockerConfig {
    /// Parses a docker config (`{"auths": {...}}`); `source` names it in errors.
    pub fn from_json(json: &[u8], source: &str) -> Result<Self, ImageError> {
        let invalid = |reason: String| ImageError::DockerConfig {
            source_name: source.to_string(),
            reason,
        };
        let raw: RawConfig =
            serde_json::from_slice(json).map_err(|e| invalid(format!("not valid JSON: {e}")))?;
        let mut auths = BTreeMap::new();
        for (key, entry) in raw.auths {
            let credential = match (&entry.username, &entry.password, &entry.auth) {
                (Some(username), Some(password), _) if !username.is_empty() => Credential {
                    username: username.clone(),
                    password: password.clone(),
                },
                (_, _, Some(auth)) if !auth.is_empty() => {
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .map_err(|e| invalid(format!("auths[{key:?}].auth is not base64: {e}")))?;
                    let decoded = String::from_utf8(decoded)
                        .map_err(|_| invalid(format!("auths[{key:?}].auth is not UTF-8")))?;
                    let (username, password) = decoded.split_once(':').ok_or_else(|| {
                        invalid(format!("auths[{key:?}].auth is not \"user:password\""))
                    })?;
                    Credential {
                        username: username.to_string(),
                        password: password.to_string(),
                    }
                }
                // Entries with only an identity token or nothing usable are skipped.
                _ => continue,
            };
            auths.entry(normalize_registry(&key)).or_insert(credential);
        }
        Ok(DockerConfig { auths })
    }

    /// Reads a docker config file.
    pub fn from_file(path: &Path) -> Result<Self, ImageError> {
        let json = std::fs::read(path)
            .map_err(|e| ImageError::from_io(format!("reading {}", path.display()), e))?;
        Self::from_json(&json, &path.display().to_string())
    }

    /// The user's docker config: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`;
    /// empty when there is none.
    pub fn from_default_location() -> Result<Self, ImageError> {
        let path = std::env::var_os("DOCKER_CONFIG")
            .map(|dir| PathBuf::from(dir).join("config.json"))
            .or_else(|| {
                std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker/config.json"))
            });
        match path {
            Some(path) if path.exists() => Self::from_file(&path),
            _ => Ok(DockerConfig::default()),
        }
    }

    /// Adds the entries of `other` for registries this config does not know yet.
    pub fn merge(&mut self, other: DockerConfig) {
        for (host, credential) in other.auths {
            self.auths.entry(host).or_insert(credential);
        }
    }

    /// Adds one credential (overriding an existing one for the same registry).
    pub fn insert(&mut self, registry: &str, credential: Credential) {
        self.auths.insert(normalize_registry(registry), credential);
    }

    /// The credential for a registry host (`host[:port]`), if any.
    pub fn lookup(&self, registry: &str) -> Option<&Credential> {
        self.auths.get(&normalize_registry(registry))
    }

    /// What to present to `registry`: its credential, else anonymous access.
    pub fn registry_auth(&self, registry: &str) -> RegistryAuth {
        match self.lookup(registry) {
            Some(c) => RegistryAuth::Basic(c.username.clone(), c.password.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.auths.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn auth_and_username_password_forms() {
        let json = format!(
            r#"{{"auths": {{
                "127.0.0.1:5000": {{"auth": "{}"}},
                "https://registry.example.com/v2/": {{"username": "u", "password": "p:q"}},
                "token.example.com": {{"identitytoken": "x"}}
            }}}}"#,
            b64("alice:s3cr:et")
        );
        let config = DockerConfig::from_json(json.as_bytes(), "test").unwrap();
        let c = config.lookup("127.0.0.1:5000").unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("alice", "s3cr:et")
        );
        let c = config.lookup("REGISTRY.example.com").unwrap();
        assert_eq!((c.username.as_str(), c.password.as_str()), ("u", "p:q"));
        assert!(config.lookup("token.example.com").is_none());
        assert!(config.lookup("127.0.0.1:5001").is_none());
        assert!(config.lookup("127.0.0.1").is_none());
        assert!(matches!(
            config.registry_auth("elsewhere:1"),
            RegistryAuth::Anonymous
        ));
        assert!(format!("{c:?}").contains("redacted"));
        assert!(!format!("{c:?}").contains("p:q"));
    }

    #[test]
    fn docker_hub_aliases_match_each_other() {
        for key in [
            "https://index.docker.io/v1/",
            "docker.io",
            "index.docker.io",
            "registry-1.docker.io",
        ] {
            let json = format!(r#"{{"auths": {{"{key}": {{"auth": "{}"}}}}}}"#, b64("a:b"));
            let config = DockerConfig::from_json(json.as_bytes(), "t").unwrap();
            for registry in ["docker.io", "index.docker.io", "registry-1.docker.io"] {
                assert!(config.lookup(registry).is_some(), "{key} for {registry}");
            }
        }
    }

    #[test]
    fn invalid_configs_are_named() {
        for (json, needle) in [
            ("not json", "not valid JSON"),
            (r#"{"auths": {"r": {"auth": "%%%"}}}"#, "not base64"),
            (r#"{"auths": {"r": {"auth": "YWJj"}}}"#, "user:password"),
        ] {
            match DockerConfig::from_json(json.as_bytes(), "secret ns/pull") {
                Err(ImageError::DockerConfig {
                    source_name,
                    reason,
                }) => {
                    assert_eq!(source_name, "secret ns/pull");
                    assert!(reason.contains(needle), "{reason}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(DockerConfig::from_json(b"{}", "t").unwrap().is_empty());
    }

    #[test]
    fn merge_keeps_the_first_credential() {
        let mut first = DockerConfig::default();
        first.insert(
            "r:1",
            Credential {
                username: "a".into(),
                password: "1".into(),
            },
        );
        let mut second = DockerConfig::default();
        second.insert(
            "r:1",
            Credential {
                username: "b".into(),
                password: "2".into(),
            },
        );
        second.insert(
            "s:1",
            Credential {
                username: "c".into(),
                password: "3".into(),
            },
        );
        first.merge(second);
        assert_eq!(first.lookup("r:1").unwrap().username, "a");
        assert_eq!(first.lookup("s:1").unwrap().username, "c");
    }
}
