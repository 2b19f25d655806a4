//! The container images a bundle's manifests name, their rewriting (to digests by
//! `push --pin-images`, to another registry by `relocate`), and the images lock that records
//! it in the bundle image's manifest annotations.

pub(super) mod rewrite;

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::output::header;

/// The manifest annotation (on every image manifest, and on the index) holding the lock.
pub const LOCK_ANNOTATION: &str = "dev.gantry.images.lock";

/// The prefix of the environment variables through which an operator learns the images it
/// starts (the operator SDK's convention, and OLM's for `spec.relatedImages`).
const RELATED_IMAGE_PREFIX: &str = "RELATED_IMAGE_";

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
        let mut rows = vec![header(&[
            "FILE",
            "OBJECT",
            "CONTAINER",
            "ORIGINAL",
            "",
            "PINNED",
        ])];
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

/// Calls `visit` with (container name, image) for every container anywhere in `value`; with
/// (`CONTAINER/env/NAME`, image) for a container's environment variables named
/// `RELATED_IMAGE_*`; and with (`relatedImages/NAME`, image) for the images an OLM
/// ClusterServiceVersion lists as related (`spec.relatedImages`). An operator starts the
/// related images itself, from those variables by the operator SDK's convention, so they are
/// pinned and relocated with the containers'. The second argument is the key holding the
/// image: `image`, or `value` for a variable.
fn visit_containers(value: &mut Value, visit: &mut dyn FnMut(&str, &'static str, &mut String)) {
    match value {
        Value::Object(map) => {
            let csv = map.get("kind").and_then(Value::as_str) == Some("ClusterServiceVersion");
            for (key, child) in map.iter_mut() {
                if csv
                    && key == "spec"
                    && let Some(Value::Array(items)) = child.get_mut("relatedImages")
                {
                    for (i, item) in items.iter_mut().enumerate() {
                        let name = match item.get("name").and_then(Value::as_str) {
                            Some(name) => format!("relatedImages/{name}"),
                            None => format!("relatedImages[{i}]"),
                        };
                        if let Some(Value::String(image)) = item.get_mut("image") {
                            visit(&name, "image", image);
                        }
                    }
                }
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
                            visit(&name, "image", image);
                        }
                        for variable in item
                            .get_mut("env")
                            .and_then(Value::as_array_mut)
                            .into_iter()
                            .flatten()
                        {
                            let Some(env) = variable
                                .get("name")
                                .and_then(Value::as_str)
                                .filter(|n| n.starts_with(RELATED_IMAGE_PREFIX))
                                .map(|n| format!("{name}/env/{n}"))
                            else {
                                continue;
                            };
                            if let Some(Value::String(image)) = variable.get_mut("value") {
                                visit(&env, "value", image);
                            }
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
                    visit_containers(&mut object, &mut |container, _, image| {
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
