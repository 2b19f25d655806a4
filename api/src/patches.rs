//! `Bundle.spec.patches`: JSON patches (RFC 6902) applied at plan time to the objects a target
//! selects, as Flux's `Kustomization.spec.patches` does with JSON 6902 patches. The provisioner
//! applies, reviews and compares the patched objects, and `kubectl bundle diff` shows them.
//!
//! Strategic-merge patches are not supported: merging lists by key (containers by `name`,
//! ports by `containerPort`) needs each kind's schema, built-in and custom alike; a JSON patch
//! says exactly which field changes and needs none.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::selector::ObjectSelector;

/// The longest `patch` text.
pub const MAX_PATCH_BYTES: usize = 16 * 1024;

/// How deep a patch's text may nest mappings and sequences (its operations' values included).
/// Patches are parsed wherever they are needed, async tasks included, on whatever stack the
/// thread has: at this depth the YAML parser takes 0.75 MiB of it in an unoptimised build (23 KiB
/// a level), well within the 2 MiB of a spawned or tokio thread.
pub const MAX_PATCH_DEPTH: usize = 32;

/// One patch: JSON 6902 operations, and the objects they apply to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundlePatch {
    /// A list of RFC 6902 operations (`add`, `remove`, `replace`, `move`, `copy`, `test`), in
    /// YAML or JSON: `[{op: remove, path: /spec/replicas}]`. Applied in order to each object
    /// `target` selects; an operation that cannot be applied (a path that does not exist, a
    /// `test` that fails) fails the bundle.
    #[schemars(length(min = 1, max = 16384))]
    pub patch: String,
    /// The objects the patch applies to: every field set must match.
    pub target: ObjectSelector,
}

/// Why `spec.patches` cannot be applied. Each names the patch by its index.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch text is not a list of operations, or an operation is not one.
    #[error("spec.patches[{index}].patch: {message}")]
    Invalid { index: usize, message: String },
    /// The target's label or annotation selector does not parse.
    #[error("spec.patches[{index}].target.{message}")]
    Target { index: usize, message: String },
    /// An operation cannot be applied to an object the patch selects.
    #[error(
        "spec.patches[{index}]: operation {operation} ({description}) failed on {object}: {message}"
    )]
    Failed {
        index: usize,
        operation: usize,
        /// `remove /spec/replicas`.
        description: String,
        /// `apps/v1 Deployment ns/name`.
        object: String,
        message: String,
    },
    /// The patched object is no longer one Gantry can apply as the same kind of object.
    #[error("spec.patches[{index}] on {object}: {message}")]
    Result {
        index: usize,
        object: String,
        message: String,
    },
}

/// One patch of `spec.patches`, parsed.
#[derive(Clone, Debug)]
struct Parsed {
    index: usize,
    operations: Vec<json_patch::PatchOperation>,
    target: ObjectSelector,
}

/// `spec.patches`, parsed and checked: ready to apply to each object.
#[derive(Clone, Debug, Default)]
pub struct Patches {
    parsed: Vec<Parsed>,
}

impl Patches {
    /// Parses every patch and checks its target; the first that is invalid is the error.
    pub fn parse(patches: &[BundlePatch]) -> Result<Self, PatchError> {
        let parsed = patches
            .iter()
            .enumerate()
            .map(|(index, patch)| {
                patch
                    .target
                    .validate()
                    .map_err(|message| PatchError::Target { index, message })?;
                Ok(Parsed {
                    index,
                    operations: operations(&patch.patch)
                        .map_err(|message| PatchError::Invalid { index, message })?,
                    target: patch.target.clone(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Patches { parsed })
    }

    pub fn is_empty(&self) -> bool {
        self.parsed.is_empty()
    }

    /// How many patches there are.
    pub fn len(&self) -> usize {
        self.parsed.len()
    }

    /// Applies, in order, every patch whose target selects `object` (as earlier patches left
    /// it); returns the indexes of the patches applied. An object's `apiVersion` and `kind`
    /// may not change, and it must keep a name.
    pub fn apply(&self, object: &mut Value) -> Result<Vec<usize>, PatchError> {
        let mut applied = Vec::new();
        for patch in &self.parsed {
            if !patch.target.matches(object) {
                continue;
            }
            let before = describe(object);
            let identity = |o: &Value| (o.get("apiVersion").cloned(), o.get("kind").cloned());
            let kind_before = identity(object);
            json_patch::patch(object, &patch.operations).map_err(|e| {
                let operation = patch.operations.get(e.operation);
                PatchError::Failed {
                    index: patch.index,
                    operation: e.operation,
                    description: operation.map(describe_operation).unwrap_or_default(),
                    object: before.clone(),
                    message: explain(operation, &e),
                }
            })?;
            let result = |message: &str| PatchError::Result {
                index: patch.index,
                object: before.clone(),
                message: message.to_string(),
            };
            if identity(object) != kind_before {
                return Err(result(
                    "a patch may not change an object's apiVersion or kind (remove the object from the selection instead)",
                ));
            }
            let named = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            if !named {
                return Err(result("the patched object has no metadata.name"));
            }
            applied.push(patch.index);
        }
        Ok(applied)
    }

    /// The patches none of `applied` names, with their targets: `spec.patches[1] (kind=Job
    /// name=setup)`.
    pub fn unmatched(&self, applied: &std::collections::BTreeSet<usize>) -> Vec<String> {
        self.parsed
            .iter()
            .filter(|p| !applied.contains(&p.index))
            .map(|p| format!("spec.patches[{}] ({})", p.index, p.target))
            .collect()
    }
}

impl BundlePatch {
    /// What the patch does, one line per operation with its value as compact JSON
    /// (`add /spec/template/spec/containers/0/args/- "--kubelet-insecure-tls"`), for people who
    /// review it; why it does not parse otherwise.
    pub fn operation_lines(&self) -> Result<Vec<String>, String> {
        use json_patch::PatchOperation::*;
        Ok(operations(&self.patch)?
            .iter()
            .map(|operation| match operation {
                Add(op) => format!("add {} {}", op.path, op.value),
                Replace(op) => format!("replace {} {}", op.path, op.value),
                Test(op) => format!("test {} {}", op.path, op.value),
                other => describe_operation(other),
            })
            .collect())
    }
}

/// The operations of a patch text: a YAML or JSON list.
fn operations(text: &str) -> Result<Vec<json_patch::PatchOperation>, String> {
    if text.len() > MAX_PATCH_BYTES {
        return Err(format!("longer than {MAX_PATCH_BYTES} bytes"));
    }
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_PATCH_DEPTH;
    options.budget = Some(budget);
    let value: Value = serde_saphyr::from_str_with_options(text, options).map_err(|e| {
        let message = e.without_snippet().to_string();
        // The depth budget, or the limit on nested flow collections (which is higher).
        if message.starts_with("budget breached: Depth")
            || message.starts_with("recursion limit exceeded")
        {
            format!(
                "nested deeper than {MAX_PATCH_DEPTH} levels of mappings and sequences, the limit"
            )
        } else {
            format!("not YAML or JSON: {message}")
        }
    })?;
    let Value::Array(items) = value else {
        return Err(
            "not a list of JSON patch operations (write `- op: ...` items, or a JSON array)".into(),
        );
    };
    if items.is_empty() {
        return Err("no operations".into());
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| serde_json::from_value(item).map_err(|e| format!("operation {i}: {e}")))
        .collect()
}

/// `remove /spec/replicas`, `move /a to /b`: what an operation does, without its value.
pub fn describe_operation(operation: &json_patch::PatchOperation) -> String {
    use json_patch::PatchOperation::*;
    match operation {
        Add(op) => format!("add {}", op.path),
        Remove(op) => format!("remove {}", op.path),
        Replace(op) => format!("replace {}", op.path),
        Move(op) => format!("move {} to {}", op.from, op.path),
        Copy(op) => format!("copy {} to {}", op.from, op.path),
        Test(op) => format!("test {}", op.path),
    }
}

fn explain(
    operation: Option<&json_patch::PatchOperation>,
    error: &json_patch::PatchError,
) -> String {
    use json_patch::PatchErrorKind;
    let path = &error.path;
    match (&error.kind, operation) {
        (PatchErrorKind::InvalidPointer, Some(json_patch::PatchOperation::Add(_))) => format!(
            "the parent of {path} does not exist in the object (or the index is past the end of its list)"
        ),
        (PatchErrorKind::InvalidPointer, _) => format!("{path} does not exist in the object"),
        (PatchErrorKind::InvalidFromPointer, _) => {
            "the `from` path does not exist in the object".to_string()
        }
        (PatchErrorKind::TestFailed, _) => format!("the value at {path} is not the one tested"),
        (kind, _) => kind.to_string(),
    }
}

/// `apps/v1 Deployment ns/name`, or `v1 Namespace name`.
pub fn describe(object: &Value) -> String {
    let at = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let name = match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", at("/metadata/name")),
        _ => at("/metadata/name").to_string(),
    };
    format!("{} {} {name}", at("/apiVersion"), at("/kind"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(name: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": name, "namespace": "monitoring" },
            "spec": {
                "replicas": 2,
                "template": { "spec": { "containers": [
                    { "name": "server", "image": "metrics-server:v0.8", "args": ["--secure-port=10250"] },
                ]}},
            },
        })
    }

    fn patch(text: &str, kind: &str, name: Option<&str>) -> BundlePatch {
        BundlePatch {
            patch: text.into(),
            target: ObjectSelector {
                kind: Some(kind.into()),
                name: name.map(Into::into),
                ..Default::default()
            },
        }
    }

    #[test]
    fn yaml_and_json_patches_apply_to_the_objects_selected() {
        let patches = Patches::parse(&[
            patch(
                "- op: add\n  path: /spec/template/spec/containers/0/args/-\n  value: --kubelet-insecure-tls\n",
                "Deployment",
                Some("metrics-server"),
            ),
            patch(
                r#"[{"op": "remove", "path": "/spec/replicas"}]"#,
                "Deployment",
                None,
            ),
        ])
        .unwrap();
        assert_eq!(patches.len(), 2);

        let mut server = deployment("metrics-server");
        assert_eq!(patches.apply(&mut server).unwrap(), [0, 1]);
        assert_eq!(
            server.pointer("/spec/template/spec/containers/0/args"),
            Some(&json!(["--secure-port=10250", "--kubelet-insecure-tls"]))
        );
        assert_eq!(server.pointer("/spec/replicas"), None);

        let mut webhook = deployment("webhook");
        assert_eq!(patches.apply(&mut webhook).unwrap(), [1]);
        assert_eq!(
            webhook.pointer("/spec/template/spec/containers/0/args"),
            Some(&json!(["--secure-port=10250"]))
        );

        let mut config =
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" } });
        let untouched = config.clone();
        assert!(patches.apply(&mut config).unwrap().is_empty());
        assert_eq!(config, untouched);
        assert_eq!(
            patches.unmatched(&[1].into()),
            ["spec.patches[0] (kind=Deployment name=metrics-server)"]
        );
    }

    #[test]
    fn later_patches_see_what_earlier_ones_did() {
        let patches = Patches::parse(&[
            patch(
                "[{op: replace, path: /metadata/namespace, value: elsewhere}]",
                "Deployment",
                None,
            ),
            BundlePatch {
                patch: "[{op: add, path: /metadata/labels, value: {moved: 'true'}}]".into(),
                target: ObjectSelector {
                    namespace: Some("elsewhere".into()),
                    ..Default::default()
                },
            },
        ])
        .unwrap();
        let mut object = deployment("web");
        assert_eq!(patches.apply(&mut object).unwrap(), [0, 1]);
        assert_eq!(object["metadata"]["namespace"], "elsewhere");
        assert_eq!(object["metadata"]["labels"]["moved"], "true");
    }

    #[test]
    fn an_invalid_patch_is_named_by_its_index() {
        let fine = patch("[{op: remove, path: /spec/replicas}]", "Deployment", None);
        for (text, says) in [
            ("op: remove", "not a list of JSON patch operations"),
            ("[]", "no operations"),
            (
                "[{op: upsert, path: /a}]",
                "operation 0: unknown variant `upsert`",
            ),
            (
                "[{op: remove, path: /a}, {op: add, path: /b}]",
                "operation 1: missing field `value`",
            ),
            ("[{op: remove, path: spec}]", "operation 0"),
            ("- op: [", "not YAML or JSON"),
            (
                format!(
                    "[{{op: add, path: /a, value: {}1{}}}]",
                    "{a: ".repeat(MAX_PATCH_DEPTH),
                    "}".repeat(MAX_PATCH_DEPTH)
                )
                .as_str(),
                "nested deeper than 32 levels",
            ),
            (
                format!("[{}]", "[".repeat(8000)).as_str(),
                "nested deeper than 32 levels",
            ),
        ] {
            let error =
                Patches::parse(&[fine.clone(), patch(text, "Deployment", None)]).unwrap_err();
            let message = error.to_string();
            assert!(
                message.starts_with("spec.patches[1].patch: ") && message.contains(says),
                "{text}: {message}"
            );
        }
        let mut bad_target = fine.clone();
        bad_target.target.label_selector = Some("app in web".into());
        let message = Patches::parse(&[bad_target]).unwrap_err().to_string();
        assert!(
            message.starts_with("spec.patches[0].target.labelSelector"),
            "{message}"
        );
    }

    #[test]
    fn an_operation_that_cannot_apply_names_the_patch_the_operation_and_the_object() {
        let patches = Patches::parse(&[
            patch("[{op: remove, path: /spec/replicas}]", "Deployment", None),
            patch(
                "[{op: test, path: /spec/template/spec/containers/0/name, value: server}, {op: remove, path: /spec/paused}]",
                "Deployment",
                None,
            ),
        ])
        .unwrap();
        let mut object = deployment("web");
        let original = object.clone();
        let error = patches.apply(&mut object).unwrap_err();
        assert_eq!(
            error.to_string(),
            "spec.patches[1]: operation 1 (remove /spec/paused) failed on apps/v1 Deployment monitoring/web: /spec/paused does not exist in the object"
        );
        assert_ne!(object, original, "the caller drops the object on an error");

        let add = Patches::parse(&[patch(
            "[{op: add, path: /spec/strategy/type, value: Recreate}]",
            "Deployment",
            None,
        )])
        .unwrap();
        let message = add.apply(&mut deployment("web")).unwrap_err().to_string();
        assert!(
            message.contains("operation 0 (add /spec/strategy/type)")
                && message.contains("the parent of /spec/strategy/type does not exist"),
            "{message}"
        );

        let test = Patches::parse(&[patch(
            "[{op: test, path: /spec/replicas, value: 3}]",
            "Deployment",
            None,
        )])
        .unwrap();
        let message = test.apply(&mut deployment("web")).unwrap_err().to_string();
        assert!(message.contains("is not the one tested"), "{message}");
    }

    #[test]
    fn a_patch_may_not_change_the_kind_or_drop_the_name() {
        for (text, says) in [
            (
                "[{op: replace, path: /kind, value: StatefulSet}]",
                "apiVersion or kind",
            ),
            (
                "[{op: replace, path: /apiVersion, value: apps/v1beta2}]",
                "apiVersion or kind",
            ),
            ("[{op: remove, path: /metadata/name}]", "no metadata.name"),
        ] {
            let patches = Patches::parse(&[patch(text, "Deployment", None)]).unwrap();
            let message = patches
                .apply(&mut deployment("web"))
                .unwrap_err()
                .to_string();
            assert!(
                message.starts_with("spec.patches[0] on apps/v1 Deployment monitoring/web: ")
                    && message.contains(says),
                "{text}: {message}"
            );
        }
    }

    #[test]
    fn operations_are_shown_with_their_values() {
        let shown = patch(
            "- op: add\n  path: /spec/template/spec/containers/0/args/-\n  value: --kubelet-insecure-tls\n- {op: remove, path: /spec/replicas}\n- {op: move, from: /a, path: /b}\n",
            "Deployment",
            None,
        );
        assert_eq!(
            shown.operation_lines().unwrap(),
            [
                r#"add /spec/template/spec/containers/0/args/- "--kubelet-insecure-tls""#,
                "remove /spec/replicas",
                "move /a to /b",
            ]
        );
        let broken = patch("op: remove", "Deployment", None);
        assert!(broken.operation_lines().unwrap_err().contains("not a list"));
    }

    #[test]
    fn objects_are_described_with_version_kind_namespace_and_name() {
        assert_eq!(
            describe(&deployment("web")),
            "apps/v1 Deployment monitoring/web"
        );
        assert_eq!(
            describe(
                &json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "a" } })
            ),
            "v1 Namespace a"
        );
    }
}
