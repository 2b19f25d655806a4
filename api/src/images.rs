//! `Bundle.spec.images`: container images rewritten at plan time, as Kustomize's `images:`
//! does. The provisioner applies the rewritten objects, and `kubectl bundle diff` shows them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One rewrite: every container image named `name` (the reference without its tag or digest,
/// exactly as the manifests write it) gets a new name, tag or digest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageOverride {
    /// The image to rewrite, as the manifests name it without tag or digest
    /// (`quay.io/prometheus-operator/prometheus-operator`).
    #[schemars(length(min = 1, max = 1024))]
    pub name: String,
    /// A new name (registry and repository) for it; the tag or digest stays unless set below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub new_name: Option<String>,
    /// A new tag, replacing the tag or digest the manifests name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"))]
    pub new_tag: Option<String>,
    /// A digest, replacing the tag or digest the manifests name (it wins over `newTag`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub digest: Option<String>,
}

/// The name of an image reference: without its tag (a `:` after the last `/`) and digest.
pub fn image_name(reference: &str) -> &str {
    let without_digest = reference.split_once('@').map_or(reference, |(n, _)| n);
    match without_digest.rfind(':') {
        Some(colon) if !without_digest[colon..].contains('/') => &without_digest[..colon],
        _ => without_digest,
    }
}

impl ImageOverride {
    /// `reference` rewritten, if this override names it.
    pub fn rewrite(&self, reference: &str) -> Option<String> {
        let name = image_name(reference);
        if name != self.name {
            return None;
        }
        let suffix = &reference[name.len()..];
        let new_name = self.new_name.as_deref().unwrap_or(name);
        Some(match (&self.digest, &self.new_tag) {
            (Some(digest), _) => format!("{new_name}@{digest}"),
            (None, Some(tag)) => format!("{new_name}:{tag}"),
            (None, None) => format!("{new_name}{suffix}"),
        })
    }
}

/// The fields holding container lists, wherever they are in an object: Pod specs, the Pod
/// templates of every workload kind, a CronJob's job template, and custom resources that embed
/// containers.
const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// One image rewritten in an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RewrittenImage {
    /// The JSON pointer of the `image` field.
    pub path: String,
    pub from: String,
    pub to: String,
}

/// Rewrites every container image of `object` that an override names (the first that names
/// it wins); returns what changed.
pub fn rewrite_images(object: &mut Value, overrides: &[ImageOverride]) -> Vec<RewrittenImage> {
    let mut rewritten = Vec::new();
    if !overrides.is_empty() {
        walk(object, &mut String::new(), overrides, &mut rewritten);
    }
    rewritten
}

fn walk(
    value: &mut Value,
    path: &mut String,
    overrides: &[ImageOverride],
    rewritten: &mut Vec<RewrittenImage>,
) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                if CONTAINER_LISTS.contains(&key.as_str())
                    && let Value::Array(containers) = child
                {
                    for (i, container) in containers.iter_mut().enumerate() {
                        let Some(image) = container.get_mut("image") else {
                            continue;
                        };
                        let Some(reference) = image.as_str() else {
                            continue;
                        };
                        if let Some(to) = overrides.iter().find_map(|o| o.rewrite(reference)) {
                            rewritten.push(RewrittenImage {
                                path: format!("{path}/{i}/image"),
                                from: reference.to_string(),
                                to: to.clone(),
                            });
                            *image = Value::String(to);
                        }
                    }
                }
                walk(child, path, overrides, rewritten);
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                walk(item, path, overrides, rewritten);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn over(
        name: &str,
        new_name: Option<&str>,
        tag: Option<&str>,
        digest: Option<&str>,
    ) -> ImageOverride {
        ImageOverride {
            name: name.into(),
            new_name: new_name.map(Into::into),
            new_tag: tag.map(Into::into),
            digest: digest.map(Into::into),
        }
    }

    #[test]
    fn names_are_references_without_tag_or_digest() {
        assert_eq!(image_name("nginx"), "nginx");
        assert_eq!(image_name("nginx:1.27"), "nginx");
        assert_eq!(
            image_name("localhost:5000/team/app:v1"),
            "localhost:5000/team/app"
        );
        assert_eq!(
            image_name("localhost:5000/team/app"),
            "localhost:5000/team/app"
        );
        assert_eq!(image_name("quay.io/a/b:v1@sha256:00"), "quay.io/a/b");
        assert_eq!(image_name("quay.io/a/b@sha256:00"), "quay.io/a/b");
    }

    #[test]
    fn an_override_sets_name_tag_or_digest() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let o = over("quay.io/op", Some("127.0.0.1:5000/op"), None, None);
        assert_eq!(
            o.rewrite("quay.io/op:v1").as_deref(),
            Some("127.0.0.1:5000/op:v1")
        );
        assert_eq!(
            o.rewrite("quay.io/op").as_deref(),
            Some("127.0.0.1:5000/op")
        );
        assert_eq!(o.rewrite("quay.io/other:v1"), None);
        assert_eq!(
            o.rewrite("quay.io/op-two:v1"),
            None,
            "a whole name, not a prefix"
        );
        let o = over("quay.io/op", None, Some("v2"), None);
        assert_eq!(
            o.rewrite("quay.io/op@sha256:00").as_deref(),
            Some("quay.io/op:v2")
        );
        let o = over("quay.io/op", None, Some("v2"), Some(&digest));
        assert_eq!(
            o.rewrite("quay.io/op:v1"),
            Some(format!("quay.io/op@{digest}")),
            "the digest wins"
        );
    }

    #[test]
    fn every_container_list_anywhere_is_rewritten() {
        let mut cronjob = json!({
            "kind": "CronJob",
            "spec": { "jobTemplate": { "spec": { "template": { "spec": {
                "initContainers": [{ "name": "init", "image": "busybox:1" }],
                "containers": [
                    { "name": "main", "image": "app:v1" },
                    { "name": "side", "image": "other:v1" },
                ],
            }}}}},
        });
        let overrides = [
            over("app", Some("r.local/app"), None, None),
            over("busybox", None, Some("2"), None),
        ];
        let changed = rewrite_images(&mut cronjob, &overrides);
        let at = "/spec/jobTemplate/spec/template/spec";
        assert_eq!(
            cronjob.pointer(&format!("{at}/containers/0/image")),
            Some(&json!("r.local/app:v1"))
        );
        assert_eq!(
            cronjob.pointer(&format!("{at}/containers/1/image")),
            Some(&json!("other:v1"))
        );
        assert_eq!(
            cronjob.pointer(&format!("{at}/initContainers/0/image")),
            Some(&json!("busybox:2"))
        );
        assert_eq!(changed.len(), 2);
        assert!(
            changed
                .iter()
                .any(|c| c.path == format!("{at}/containers/0/image")
                    && c.from == "app:v1"
                    && c.to == "r.local/app:v1")
        );
        // Nothing named: nothing changes, not even outside containers.
        let mut config = json!({ "data": { "image": "app:v1" } });
        assert!(rewrite_images(&mut config, &overrides).is_empty());
        assert_eq!(config, json!({ "data": { "image": "app:v1" } }));
    }
}
