//! Rewriting a bundle directory's container images, in place where the text allows it.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use super::{is_json, is_manifest, units, visit_containers};

/// What rewriting did to a directory.
#[derive(Debug, Default)]
pub struct Rewritten {
    /// Files whose changed documents were written anew by a YAML (or JSON) writer, because
    /// their image values could not be replaced in place.
    pub reserialised: Vec<String>,
    /// Files changed.
    pub changed: Vec<String>,
}

/// Writes the manifests of `from` into `to/manifests` with every container image found in
/// `map` replaced by its value. Everything else in a file is kept byte for byte where the
/// image values can be replaced in place (`image: VALUE`, quoted or not, in block or flow
/// style, or JSON); a document where they cannot is written anew.
pub fn rewrite_dir(
    from: &Path,
    to: &Path,
    map: &BTreeMap<String, String>,
) -> anyhow::Result<Rewritten> {
    let target = to.join("manifests");
    std::fs::create_dir_all(&target).with_context(|| format!("creating {}", target.display()))?;
    let mut done = Rewritten::default();
    let source = from.join("manifests");
    for entry in
        std::fs::read_dir(&source).with_context(|| format!("reading {}", source.display()))?
    {
        let entry = entry.with_context(|| format!("reading {}", source.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let destination = target.join(&name);
        if !is_manifest(&name) {
            std::fs::copy(entry.path(), &destination)
                .with_context(|| format!("writing {}", destination.display()))?;
            continue;
        }
        let text = std::fs::read_to_string(entry.path())
            .with_context(|| format!("reading {}", entry.path().display()))?;
        let (new, reserialised) = rewrite_file(&name, &text, map)?;
        if new != text {
            done.changed.push(name.clone());
        }
        if reserialised {
            done.reserialised.push(name.clone());
        }
        std::fs::write(&destination, new)
            .with_context(|| format!("writing {}", destination.display()))?;
    }
    done.changed.sort();
    done.reserialised.sort();
    Ok(done)
}

/// A file's text with its container images replaced; whether a document had to be written
/// anew.
fn rewrite_file(
    name: &str,
    text: &str,
    map: &BTreeMap<String, String>,
) -> anyhow::Result<(String, bool)> {
    let mut out = String::new();
    let mut reserialised = false;
    for unit in units(name, text)? {
        // The images the unit's containers name that change, by the key holding them, with how
        // often each occurs.
        let mut wanted: Wanted = BTreeMap::new();
        let mut documents = unit.documents.clone();
        for document in &mut documents {
            visit_containers(document, &mut |_, key, image| {
                if let Some(new) = map.get(image.as_str())
                    && new != image
                {
                    *wanted.entry((key, image.clone())).or_default() += 1;
                    *image = new.clone();
                }
            });
        }
        if wanted.is_empty() {
            out.push_str(&unit.text);
        } else {
            let (replaced, counts) = replace_in_place(&unit.text, map, &wanted);
            if counts == wanted {
                out.push_str(&replaced);
            } else {
                reserialised = true;
                out.push_str(&serialise(name, &documents)?);
            }
        }
        out.push_str(&unit.after);
    }
    Ok((out, reserialised))
}

fn serialise(name: &str, documents: &[Value]) -> anyhow::Result<String> {
    if is_json(name) {
        let mut text = serde_json::to_string_pretty(&documents[0])
            .with_context(|| format!("writing {name}"))?;
        text.push('\n');
        return Ok(text);
    }
    let mut parts = Vec::new();
    for document in documents {
        parts.push(serde_saphyr::to_string(document).with_context(|| format!("writing {name}"))?);
    }
    Ok(parts.join("---\n"))
}

/// Replaces the scalar values of `image` keys that are keys of `wanted` with their `map`
/// value, keeping their quoting; returns the text and how often each was replaced.
/// Keys whose values may be image references: a container's `image`, and the `value` of an
/// environment variable naming one (`RELATED_IMAGE_*`).
const IMAGE_KEYS: [&str; 2] = ["image", "value"];

/// The next of [`IMAGE_KEYS`] in `text`: its offset and the key.
fn next_key(text: &str) -> Option<(usize, &'static str)> {
    IMAGE_KEYS
        .iter()
        .filter_map(|key| text.find(key).map(|at| (at, *key)))
        .min()
}

/// How often each image reference that changes occurs, by the key holding it (`image`, or an
/// environment variable's `value`).
type Wanted = BTreeMap<(&'static str, String), usize>;

fn replace_in_place(
    text: &str,
    map: &BTreeMap<String, String>,
    wanted: &Wanted,
) -> (String, Wanted) {
    let mut out = String::with_capacity(text.len());
    let mut counts: Wanted = BTreeMap::new();
    let bytes = text.as_bytes();
    let mut copied = 0;
    let mut at = 0;
    while let Some((found, key)) = next_key(&text[at..]) {
        let start = at + found;
        at = start + key.len();
        // The key: `image`, `"image"` or `'image'` (or `value`, of an environment variable),
        // after a line start, a space, `{` or `,`.
        let (key_start, mut i) = match start.checked_sub(1).map(|p| bytes[p]) {
            Some(q @ (b'"' | b'\'')) if bytes.get(at) == Some(&q) => (start - 1, at + 1),
            _ => (start, at),
        };
        let before_ok = key_start == 0
            || matches!(
                bytes[key_start - 1],
                b' ' | b'\t' | b'\n' | b'\r' | b'{' | b','
            );
        if !before_ok {
            continue;
        }
        while i < bytes.len() && matches!(bytes[i], b' ' | b'\t') {
            i += 1;
        }
        if bytes.get(i) != Some(&b':') {
            continue;
        }
        i += 1;
        let spaces = i;
        while i < bytes.len() && matches!(bytes[i], b' ' | b'\t') {
            i += 1;
        }
        let value_start = i;
        let (value, value_end, quote) = match bytes.get(i) {
            Some(q @ (b'"' | b'\'')) => match text[i + 1..].find(*q as char) {
                Some(len) => (&text[i + 1..i + 1 + len], i + 2 + len, Some(*q as char)),
                None => continue,
            },
            _ => {
                if i == spaces && key_start == start {
                    // `image:value` is not a key in block style.
                    continue;
                }
                let end = text[i..]
                    .find(['\n', '\r', ' ', '\t', ',', '}', ']'])
                    .map_or(text.len(), |len| i + len);
                (&text[i..end], end, None)
            }
        };
        let wanted_key = (key, value.to_string());
        let Some(new) = map.get(value).filter(|_| wanted.contains_key(&wanted_key)) else {
            continue;
        };
        *counts.entry(wanted_key).or_default() += 1;
        out.push_str(&text[copied..value_start]);
        match quote {
            Some(q) => {
                out.push(q);
                out.push_str(new);
                out.push(q);
            }
            None => out.push_str(new),
        }
        copied = value_end;
        at = value_end;
    }
    out.push_str(&text[copied..]);
    (out, counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::pin::image_uses;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    const DEPLOYMENT: &str = "# upstream\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web # the app\nspec:\n  template:\n    spec:\n      initContainers:\n      - name: init\n        image: \"r/init:v1\"\n      containers:\n      - name: web\n        image: r/web:v1   # pinned later\n        env: [{name: image, value: r/web:v1}]\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {image: r/web:v1}\n";

    #[test]
    fn images_are_replaced_in_place_and_nothing_else_changes() {
        let m = map(&[
            ("r/web:v1", "r/web@sha256:1"),
            ("r/init:v1", "r/init@sha256:2"),
        ]);
        let (out, reserialised) = rewrite_file("a.yaml", DEPLOYMENT, &m).unwrap();
        assert!(!reserialised);
        let expected = DEPLOYMENT
            .replace("image: \"r/init:v1\"", "image: \"r/init@sha256:2\"")
            .replace("image: r/web:v1   #", "image: r/web@sha256:1   #");
        assert_eq!(out, expected);
    }

    #[test]
    fn uses_name_file_object_and_container() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("manifests")).unwrap();
        std::fs::write(dir.path().join("manifests/a.yaml"), DEPLOYMENT).unwrap();
        std::fs::write(
            dir.path().join("manifests/b.json"),
            r#"{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"c","namespace":"n"},"spec":{"jobTemplate":{"spec":{"template":{"spec":{"containers":[{"name":"job","image":"r/job:v2"}]}}}}}}"#,
        )
        .unwrap();
        // A typed list, in any group, gives its items.
        std::fs::write(
            dir.path().join("manifests/c.yaml"),
            "apiVersion: apps/v1\nkind: DeploymentList\nitems:\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: api}\n  spec: {template: {spec: {containers: [{name: api, image: r/api:v3}]}}}\n",
        )
        .unwrap();
        let uses = image_uses(dir.path()).unwrap();
        let mut short: Vec<_> = uses
            .iter()
            .map(|u| format!("{} {} {} {}", u.file, u.object, u.container, u.image))
            .collect();
        // Within an object, in the order of its keys, which depends on serde_json's
        // `preserve_order` (another crate of the workspace turns it on): compared sorted.
        short.sort();
        assert_eq!(
            short,
            [
                "a.yaml Deployment/web init r/init:v1",
                "a.yaml Deployment/web web r/web:v1",
                "b.json CronJob/n/c job r/job:v2",
                "c.yaml Deployment/api api r/api:v3",
            ]
        );
        let out = tempfile::tempdir().unwrap();
        let done = rewrite_dir(
            dir.path(),
            out.path(),
            &map(&[("r/job:v2", "r/job@sha256:3")]),
        )
        .unwrap();
        assert_eq!(done.changed, ["b.json"]);
        let json = std::fs::read_to_string(out.path().join("manifests/b.json")).unwrap();
        assert!(json.contains(r#""image":"r/job@sha256:3""#), "{json}");
    }

    /// An OLM `registry+v1` bundle: the containers of the CSV's deployments and the images it
    /// lists as related are all pinned and relocated.
    #[test]
    fn a_cluster_service_versions_deployments_and_related_images_are_uses() {
        let csv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
            "../rules/testdata/registry-v1/argocd-operator.v0.6.0/bundle/manifests/argocd-operator.v0.6.0.clusterserviceversion.yaml",
        );
        let mut text = std::fs::read_to_string(csv).unwrap();
        let related = "  relatedImages:\n  - name: argocd\n    image: quay.io/argoproj/argocd:v2.7.6\n  - image: quay.io/redis:7\n";
        let at = text.find("\nspec:\n").unwrap() + "\nspec:\n".len();
        text.insert_str(at, related);
        // The manager learns the image it starts from a variable, by the operator SDK's
        // convention; another variable's value is not an image reference.
        let env = "                - name: RELATED_IMAGE_ARGOCD\n                  value: quay.io/argoproj/argocd:v2.7.6\n                - name: ARGOCD_CLUSTER_CONFIG_NAMESPACES\n                  value: quay.io/argoproj/argocd:v2.7.6\n";
        let manager = text
            .find("                - name: WATCH_NAMESPACE\n")
            .unwrap();
        text.insert_str(manager, env);
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("manifests")).unwrap();
        std::fs::write(dir.path().join("manifests/csv.yaml"), &text).unwrap();
        let mut short: Vec<_> = image_uses(dir.path())
            .unwrap()
            .iter()
            .map(|u| format!("{} {} {}", u.object, u.container, u.image))
            .collect();
        short.sort();
        let object = "ClusterServiceVersion/placeholder/argocd-operator.v0.6.0";
        assert_eq!(
            short,
            [
                format!("{object} kube-rbac-proxy gcr.io/kubebuilder/kube-rbac-proxy:v0.8.0"),
                format!(
                    "{object} manager quay.io/argoprojlabs/argocd-operator@sha256:99aeec24cc406d06d18822347d9ac3ed053a702d8419191e4e681075fed7b9bb"
                ),
                format!("{object} manager/env/RELATED_IMAGE_ARGOCD quay.io/argoproj/argocd:v2.7.6"),
                format!("{object} relatedImages/argocd quay.io/argoproj/argocd:v2.7.6"),
                format!("{object} relatedImages[1] quay.io/redis:7"),
            ]
        );
        let m = map(&[
            ("quay.io/argoproj/argocd:v2.7.6", "r.local/argocd@sha256:1"),
            (
                "gcr.io/kubebuilder/kube-rbac-proxy:v0.8.0",
                "r.local/proxy@sha256:2",
            ),
        ]);
        let (out, reserialised) = rewrite_file("csv.yaml", &text, &m).unwrap();
        // The other variable holds the same text: the document is written anew, so that only
        // the image references change.
        assert!(reserialised);
        let documents: Vec<Value> = serde_saphyr::from_multiple(&out).unwrap();
        let deployment = &documents[0]["spec"]["install"]["spec"]["deployments"][0];
        let manager = deployment["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "manager")
            .unwrap();
        assert_eq!(manager["env"][0]["value"], "r.local/argocd@sha256:1");
        assert_eq!(manager["env"][1]["value"], "quay.io/argoproj/argocd:v2.7.6");
        assert_eq!(
            documents[0]["spec"]["relatedImages"][0]["image"],
            "r.local/argocd@sha256:1"
        );
        // Without the other variable, in place: nothing else of the file changes.
        let text = text.replace(
            "                - name: ARGOCD_CLUSTER_CONFIG_NAMESPACES\n                  value: quay.io/argoproj/argocd:v2.7.6\n",
            "",
        );
        let (out, reserialised) = rewrite_file("csv.yaml", &text, &m).unwrap();
        assert!(!reserialised, "replaced in place");
        let expected = text
            .replace(
                "image: quay.io/argoproj/argocd:v2.7.6",
                "image: r.local/argocd@sha256:1",
            )
            .replace(
                "value: quay.io/argoproj/argocd:v2.7.6",
                "value: r.local/argocd@sha256:1",
            )
            .replace(
                "image: gcr.io/kubebuilder/kube-rbac-proxy:v0.8.0",
                "image: r.local/proxy@sha256:2",
            );
        assert_eq!(out, expected);
    }

    #[test]
    fn a_document_that_cannot_be_replaced_in_place_is_written_anew() {
        // An anchor: the value appears once in the text, twice among the containers.
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: a, image: &i r/a:v1}\n  - {name: b, image: *i}\n";
        let (out, reserialised) =
            rewrite_file("p.yaml", text, &map(&[("r/a:v1", "r/a@sha256:1")])).unwrap();
        assert!(reserialised);
        let back: Value = serde_saphyr::from_str(&out).unwrap();
        assert_eq!(back["spec"]["containers"][1]["image"], "r/a@sha256:1");
    }
}
