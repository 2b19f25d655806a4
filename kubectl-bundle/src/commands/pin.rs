//! The container images a bundle's manifests name, their rewriting (to digests by
//! `push --pin-images`, to another registry by `relocate`), and the images lock that records
//! it in the bundle image's manifest annotations.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The manifest annotation (on every image manifest, and on the index) holding the lock.
pub const LOCK_ANNOTATION: &str = "dev.gantry.images.lock";

/// Arrays whose items with a string `image` are containers.
const CONTAINER_ARRAYS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// Where a container names an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageUse {
    pub file: String,
    /// `Kind/name`, or `Kind/namespace/name`.
    pub object: String,
    pub container: String,
    pub image: String,
}

/// The images lock: one entry per container naming an image.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ImagesLock {
    pub images: Vec<LockedImage>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LockedImage {
    pub file: String,
    pub object: String,
    pub container: String,
    /// The reference the manifests named before any rewriting.
    pub original: String,
    /// What the bundle's manifests name now: `registry/repository@sha256:...`.
    pub pinned: String,
    /// After `relocate`: what `pinned` was before the copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relocated_from: Option<String>,
}

impl ImagesLock {
    pub fn to_json(&self) -> anyhow::Result<String> {
        serde_json::to_string(self).context("writing the images lock")
    }

    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        serde_json::from_str(text).context("reading the images lock")
    }

    /// The table printed after `push --pin-images` and `relocate`.
    pub fn rows(&self) -> Vec<Vec<String>> {
        let mut rows = vec![
            ["FILE", "OBJECT", "CONTAINER", "ORIGINAL", "", "PINNED"]
                .map(String::from)
                .to_vec(),
        ];
        for image in &self.images {
            rows.push(vec![
                image.file.clone(),
                image.object.clone(),
                image.container.clone(),
                image.original.clone(),
                "→".into(),
                image.pinned.clone(),
            ]);
        }
        rows
    }
}

/// One piece of a manifest file: a YAML document's text, or a `---` line between documents.
struct Piece {
    text: String,
    document: bool,
}

fn is_separator(line: &str) -> bool {
    let line = line.trim_end_matches(['\n', '\r']);
    line == "---" || line.starts_with("--- ") || line.starts_with("---\t")
}

/// Splits a YAML file at its `---` lines.
fn pieces(text: &str) -> Vec<Piece> {
    let mut out = vec![Piece {
        text: String::new(),
        document: true,
    }];
    for line in text.split_inclusive('\n') {
        if is_separator(line) {
            out.push(Piece {
                text: line.to_string(),
                document: false,
            });
            out.push(Piece {
                text: String::new(),
                document: true,
            });
        } else if let Some(last) = out.last_mut() {
            last.text.push_str(line);
        }
    }
    out
}

fn is_manifest(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with(".yaml") || lower.ends_with(".yml") || lower.ends_with(".json")
}

fn is_json(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".json")
}

/// A manifest file's text in units that parse on their own: each document, or the whole file
/// when splitting at `---` lines does not give documents that parse.
struct Unit {
    text: String,
    /// Separator text that follows the unit.
    after: String,
    documents: Vec<Value>,
}

fn units(name: &str, text: &str) -> anyhow::Result<Vec<Unit>> {
    let whole = |text: &str| -> anyhow::Result<Vec<Unit>> {
        let documents: Vec<Value> = if is_json(name) {
            vec![serde_json::from_str(text).with_context(|| format!("reading {name}"))?]
        } else {
            serde_saphyr::from_multiple(text).with_context(|| format!("reading {name}"))?
        };
        Ok(vec![Unit {
            text: text.to_string(),
            after: String::new(),
            documents,
        }])
    };
    if is_json(name) {
        return whole(text);
    }
    let mut out: Vec<Unit> = Vec::new();
    for piece in pieces(text) {
        if !piece.document {
            match out.last_mut() {
                Some(last) => last.after.push_str(&piece.text),
                None => out.push(Unit {
                    text: String::new(),
                    after: piece.text,
                    documents: Vec::new(),
                }),
            }
            continue;
        }
        let documents: Vec<Value> = match serde_saphyr::from_multiple(&piece.text) {
            Ok(documents) => documents,
            Err(_) => return whole(text),
        };
        out.push(Unit {
            text: piece.text,
            after: String::new(),
            documents,
        });
    }
    Ok(out)
}

/// The objects of a document: a list's items (by the rule bundles are read with), else the
/// document.
fn objects_of(document: &Value) -> Vec<&Value> {
    if gantry_image::is_list(document)
        && let Some(items) = document.get("items").and_then(Value::as_array)
    {
        return items.iter().collect();
    }
    vec![document]
}

fn object_name(object: &Value) -> String {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("?").to_string();
    let kind = text(object.get("kind"));
    let metadata = object.get("metadata");
    let name = text(metadata.and_then(|m| m.get("name")));
    match metadata
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
    {
        Some(namespace) => format!("{kind}/{namespace}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// Calls `visit` with (container name, image) for every container anywhere in `value`.
fn visit_containers(value: &mut Value, visit: &mut dyn FnMut(&str, &mut String)) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if CONTAINER_ARRAYS.contains(&key.as_str())
                    && let Value::Array(items) = child
                {
                    for (i, item) in items.iter_mut().enumerate() {
                        let name = item
                            .get("name")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                            .unwrap_or_else(|| format!("{key}[{i}]"));
                        if let Some(Value::String(image)) = item.get_mut("image") {
                            visit(&name, image);
                        }
                    }
                }
                visit_containers(child, visit);
            }
        }
        Value::Array(items) => {
            for item in items {
                visit_containers(item, visit);
            }
        }
        _ => {}
    }
}

/// The manifest files of `dir/manifests`, sorted by name, with their text.
fn manifest_files(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let manifests = dir.join("manifests");
    let mut files = Vec::new();
    for entry in
        std::fs::read_dir(&manifests).with_context(|| format!("reading {}", manifests.display()))?
    {
        let entry = entry.with_context(|| format!("reading {}", manifests.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_manifest(&name) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path())
            .with_context(|| format!("reading {}", entry.path().display()))?;
        files.push((name, text));
    }
    files.sort();
    Ok(files)
}

/// Every container image the manifests of bundle directory `dir` name, in file order.
pub fn image_uses(dir: &Path) -> anyhow::Result<Vec<ImageUse>> {
    let mut uses = Vec::new();
    for (name, text) in manifest_files(dir)? {
        for unit in units(&name, &text)? {
            for document in &unit.documents {
                for object in objects_of(document) {
                    let label = object_name(object);
                    let mut object = object.clone();
                    visit_containers(&mut object, &mut |container, image| {
                        uses.push(ImageUse {
                            file: name.clone(),
                            object: label.clone(),
                            container: container.to_string(),
                            image: image.clone(),
                        });
                    });
                }
            }
        }
    }
    Ok(uses)
}

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
        // The images the unit's containers name that change, with how often each occurs.
        let mut wanted: BTreeMap<String, usize> = BTreeMap::new();
        let mut documents = unit.documents.clone();
        for document in &mut documents {
            visit_containers(document, &mut |_, image| {
                if let Some(new) = map.get(image.as_str())
                    && new != image
                {
                    *wanted.entry(image.clone()).or_default() += 1;
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
fn replace_in_place(
    text: &str,
    map: &BTreeMap<String, String>,
    wanted: &BTreeMap<String, usize>,
) -> (String, BTreeMap<String, usize>) {
    let mut out = String::with_capacity(text.len());
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let bytes = text.as_bytes();
    let mut copied = 0;
    let mut at = 0;
    while let Some(found) = text[at..].find("image") {
        let start = at + found;
        at = start + "image".len();
        // The key: `image`, `"image"` or `'image'`, after a line start, a space, `{` or `,`.
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
        let Some(new) = map.get(value).filter(|_| wanted.contains_key(value)) else {
            continue;
        };
        *counts.entry(value.to_string()).or_default() += 1;
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
