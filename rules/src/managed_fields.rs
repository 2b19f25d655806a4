//! Field ownership as the API server reports it: the fields a refused apply names (a 409
//! Conflict's causes, a 422 Invalid's immutable fields), removing such a field from an object,
//! the fields other managers own in an object's `managedFields`, and what one manager's apply
//! owns.

use kube_core::Status;
use serde_json::{Map, Value};

/// The fields of a 409 Conflict of a server-side apply without force: other managers own
/// them with other values (`.data.key`, `.spec.template.spec.containers[name="app"].image`).
pub fn conflicting_fields(status: &Status) -> Vec<String> {
    if status.code != 409 {
        return Vec::new();
    }
    causes(status)
        .filter(|(reason, _, field)| *reason == "FieldManagerConflict" && !field.is_empty())
        .map(|(_, _, field)| field.to_string())
        .collect()
}

/// The fields a 422 Invalid refuses because they cannot change (`spec.template: Invalid value:
/// …: field is immutable`, `spec.clusterIPs[0]: Invalid value: …: may not change once set`).
/// Empty when the refusal is for another reason.
pub fn immutable_fields(status: &Status) -> Vec<String> {
    if status.code != 422 {
        return Vec::new();
    }
    let mut fields: Vec<String> = causes(status)
        .filter(|(_, message, _)| says_immutable(message))
        .map(|(_, _, field)| field.to_string())
        .filter(|field| !field.is_empty())
        .collect();
    // A webhook or a CEL rule may say so only in the message.
    if fields.is_empty() && says_immutable(&status.message) {
        fields.push("(a field the API server did not name)".to_string());
    }
    fields.dedup();
    fields
}

fn says_immutable(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    ["immutable", "may not change", "cannot be changed"]
        .iter()
        .any(|phrase| message.contains(phrase))
}

fn causes(status: &Status) -> impl Iterator<Item = (&str, &str, &str)> {
    status.details.iter().flat_map(|details| {
        details.causes.iter().map(|cause| {
            (
                cause.reason.as_str(),
                cause.message.as_str(),
                cause.field.as_str(),
            )
        })
    })
}

/// Removes the field at `path` (a server-side apply field path, as a Conflict names it) from
/// `object`; whether it was found. Field names may hold dots (`.data.app.conf`), so each step
/// tries the object's own keys rather than splitting the text.
pub fn remove_field(object: &mut Value, path: &str) -> bool {
    remove_at(object, path)
}

fn remove_at(value: &mut Value, rest: &str) -> bool {
    if let Some(after) = rest.strip_prefix('.') {
        let Value::Object(map) = value else {
            return false;
        };
        // Longest names first: `.a.b` is the key `a.b` before the key `a`.
        let mut keys: Vec<String> = map
            .keys()
            .filter(|key| {
                after.strip_prefix(key.as_str()).is_some_and(|tail| {
                    tail.is_empty() || tail.starts_with('.') || tail.starts_with('[')
                })
            })
            .cloned()
            .collect();
        keys.sort_by_key(|key| std::cmp::Reverse(key.len()));
        for key in keys {
            let tail = &after[key.len()..];
            if tail.is_empty() {
                map.remove(&key);
                return true;
            }
            if map
                .get_mut(&key)
                .is_some_and(|child| remove_at(child, tail))
            {
                return true;
            }
        }
        false
    } else if rest.starts_with('[') {
        let Value::Array(items) = value else {
            return false;
        };
        let Some((selector, tail)) = parse_selector(rest) else {
            return false;
        };
        let Some(index) = items.iter().position(|item| selector.matches(item)) else {
            return false;
        };
        if tail.is_empty() {
            items.remove(index);
            return true;
        }
        remove_at(&mut items[index], tail)
    } else {
        false
    }
}

/// Which element of a list a path step names.
enum Selector {
    /// `[name="app",protocol="TCP"]`: the element whose key fields have these values.
    Key(Vec<(String, Value)>),
    /// `[="x"]`: the element equal to the value (a set).
    Value(Value),
    /// `[3]`.
    Index(usize),
}

impl Selector {
    fn matches(&self, item: &Value) -> bool {
        match self {
            Selector::Key(fields) => fields
                .iter()
                .all(|(name, want)| item.get(name).is_some_and(|have| same(have, want))),
            Selector::Value(want) => same(item, want),
            Selector::Index(_) => false,
        }
    }
}

/// Numbers by value: `80` is `80.0`.
fn same(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Number(h), Value::Number(w)) => h.as_f64() == w.as_f64(),
        (h, w) => h == w,
    }
}

/// Parses `[…]` at the start of `text`: the selector and the text after it.
fn parse_selector(text: &str) -> Option<(Selector, &str)> {
    let inner = text.strip_prefix('[')?;
    if let Some(value) = inner.strip_prefix('=') {
        let (value, after) = json_prefix(value)?;
        return Some((Selector::Value(value), after.strip_prefix(']')?));
    }
    let digits = inner.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && inner[digits..].starts_with(']') {
        let index = inner[..digits].parse().ok()?;
        return Some((Selector::Index(index), &inner[digits + 1..]));
    }
    let mut fields = Vec::new();
    let mut rest = inner;
    loop {
        let equals = rest.find('=')?;
        let name = rest[..equals].to_string();
        let (value, after) = json_prefix(&rest[equals + 1..])?;
        fields.push((name, value));
        if let Some(after) = after.strip_prefix(',') {
            rest = after;
        } else {
            return Some((Selector::Key(fields), after.strip_prefix(']')?));
        }
    }
}

/// One JSON value at the start of `text`, and the text after it.
fn json_prefix(text: &str) -> Option<(Value, &str)> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let value = values.next()?.ok()?;
    Some((value, &text[values.byte_offset()..]))
}

/// `desired` without the fields that managers other than `manager`'s applies own in the live
/// object's `managedFields` (`Update`s by anyone, `manager`'s included, count as others: they
/// are edits). Lists keep their elements (they are compared by position); only fields inside
/// them go.
pub fn without_fields_of_others(desired: &Value, managed_fields: &Value, manager: &str) -> Value {
    let mut desired = desired.clone();
    let Some(entries) = managed_fields.as_array() else {
        return desired;
    };
    for entry in entries {
        let text = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or_default();
        let ours = text("manager") == manager && text("operation") == "Apply";
        // Status and other subresources are not what a bundle sets.
        if ours || !text("subresource").is_empty() {
            continue;
        }
        if let Some(Value::Object(owned)) = entry.get("fieldsV1") {
            subtract(&mut desired, owned);
        }
    }
    desired
}

/// What one manager's server-side apply owns of a value: a node of its `fieldsV1`, or nothing.
/// A field it owns is one its last apply set and nobody has changed or removed since: a write
/// by anyone else that changes or removes the field takes it out of the manager's set.
#[derive(Clone, Copy, Debug, Default)]
pub struct Owned<'a>(Option<&'a Map<String, Value>>);

impl<'a> Owned<'a> {
    /// What `manager`'s apply owns of the object whose `managedFields` these are.
    pub fn by_apply_of(managed_fields: &'a Value, manager: &str) -> Self {
        let entry = managed_fields
            .as_array()
            .into_iter()
            .flatten()
            .find(|entry| {
                let text = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or_default();
                text("manager") == manager
                    && text("operation") == "Apply"
                    && text("subresource").is_empty()
            });
        Self(
            entry
                .and_then(|e| e.get("fieldsV1"))
                .and_then(Value::as_object),
        )
    }

    /// Whether the manager owns this value (as a whole, or fields of it).
    pub fn is_owned(self) -> bool {
        self.0.is_some()
    }

    /// What it owns of field `name` of this map.
    pub fn field(self, name: &str) -> Self {
        let node = self.0.and_then(|node| node.get(&format!("f:{name}")));
        Self(node.and_then(Value::as_object))
    }

    /// What it owns of `item`, the element at `index` of this list (a keyed element is found
    /// by its key fields, which the live element always holds).
    pub fn element(self, item: &Value, index: usize) -> Self {
        let Some(node) = self.0 else {
            return self;
        };
        let found = node.iter().find(|(key, _)| {
            if let Some(keys) = key.strip_prefix("k:") {
                serde_json::from_str::<Map<String, Value>>(keys)
                    .is_ok_and(|keys| Selector::Key(keys.into_iter().collect()).matches(item))
            } else {
                key.strip_prefix("i:").and_then(|i| i.parse().ok()) == Some(index)
            }
        });
        Self(found.and_then(|(_, node)| node.as_object()))
    }
}

/// Removes from `value` the fields `owned` (a `fieldsV1` node) holds as leaves.
fn subtract(value: &mut Value, owned: &Map<String, Value>) {
    match value {
        Value::Object(map) => {
            for (key, node) in owned {
                let Some(name) = key.strip_prefix("f:") else {
                    continue;
                };
                match node.as_object() {
                    // A leaf: the field as a whole (a scalar, or an atomic map or list).
                    Some(children) if children.is_empty() => {
                        map.remove(name);
                    }
                    Some(children) => {
                        if let Some(child) = map.get_mut(name) {
                            subtract(child, children);
                        }
                    }
                    None => {}
                }
            }
        }
        Value::Array(items) => {
            for (key, node) in owned {
                let Some(children) = node.as_object().filter(|c| !c.is_empty()) else {
                    continue;
                };
                let selector = if let Some(keys) = key.strip_prefix("k:") {
                    match serde_json::from_str::<Map<String, Value>>(keys) {
                        Ok(keys) => Selector::Key(keys.into_iter().collect()),
                        Err(_) => continue,
                    }
                } else if let Some(index) = key.strip_prefix("i:") {
                    match index.parse() {
                        Ok(index) => Selector::Index(index),
                        Err(_) => continue,
                    }
                } else {
                    continue;
                };
                let position = match &selector {
                    Selector::Index(index) => Some(*index).filter(|i| *i < items.len()),
                    selector => items.iter().position(|item| selector.matches(item)),
                };
                if let Some(position) = position {
                    subtract(&mut items[position], children);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Status as the API server sends it.
    fn status(code: u16, message: &str, causes: &[(&str, &str, &str)]) -> Status {
        let causes: Vec<Value> = causes
            .iter()
            .map(|(reason, message, field)| {
                json!({ "reason": reason, "message": message, "field": field })
            })
            .collect();
        serde_json::from_value(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": if code == 409 { "Conflict" } else { "Invalid" },
            "details": { "causes": causes }, "code": code
        }))
        .unwrap()
    }

    #[test]
    fn a_conflict_names_its_fields() {
        let conflict = status(
            409,
            "Apply failed with 2 conflicts: conflict with \"editor\" using v1: .data.k",
            &[
                (
                    "FieldManagerConflict",
                    "conflict with \"editor\" using v1",
                    ".data.k",
                ),
                (
                    "FieldManagerConflict",
                    "conflict with \"hpa\" using apps/v1",
                    ".spec.replicas",
                ),
            ],
        );
        assert_eq!(conflicting_fields(&conflict), [".data.k", ".spec.replicas"]);
        assert!(conflicting_fields(&status(422, "x", &[])).is_empty());
    }

    #[test]
    fn immutable_refusals_name_their_fields_and_others_name_none() {
        // As kube-apiserver answers a changed Job template and a changed Service clusterIP.
        let job = status(
            422,
            "Job.batch \"migrate\" is invalid: spec.template: Invalid value: core.PodTemplateSpec{…}: field is immutable",
            &[(
                "FieldValueInvalid",
                "Invalid value: core.PodTemplateSpec{…}: field is immutable",
                "spec.template",
            )],
        );
        assert_eq!(immutable_fields(&job), ["spec.template"]);
        let service = status(
            422,
            "Service \"web\" is invalid: spec.clusterIPs[0]: Invalid value: []string{\"127.0.0.9\"}: may not change once set",
            &[(
                "FieldValueInvalid",
                "Invalid value: []string{\"127.0.0.9\"}: may not change once set",
                "spec.clusterIPs[0]",
            )],
        );
        assert_eq!(immutable_fields(&service), ["spec.clusterIPs[0]"]);
        let schema = status(
            422,
            "ConfigMap \"c\" is invalid: data: Invalid value: 1: must be a string",
            &[(
                "FieldValueInvalid",
                "Invalid value: 1: must be a string",
                "data",
            )],
        );
        assert!(immutable_fields(&schema).is_empty());
        let webhook = status(422, "admission webhook denied: spec.size is immutable", &[]);
        assert_eq!(immutable_fields(&webhook).len(), 1);
        assert!(immutable_fields(&status(409, "field is immutable", &[])).is_empty());
    }

    #[test]
    fn fields_are_removed_by_their_path() {
        let mut object = json!({
            "data": { "k": "v", "app.conf": "x", "app": { "conf": "y" } },
            "spec": {
                "replicas": 3,
                "template": { "spec": { "containers": [
                    { "name": "sidecar", "image": "s" },
                    { "name": "app", "image": "a", "ports": [
                        { "containerPort": 80, "protocol": "TCP", "name": "http" }
                    ] }
                ] } }
            },
            "metadata": { "finalizers": ["a", "b"] }
        });
        assert!(remove_field(&mut object, ".data.k"));
        assert!(remove_field(&mut object, ".spec.replicas"));
        assert!(remove_field(&mut object, ".data.app.conf"));
        assert_eq!(object["data"], json!({ "app": { "conf": "y" } }));
        assert!(remove_field(
            &mut object,
            ".spec.template.spec.containers[name=\"app\"].image"
        ));
        assert!(remove_field(
            &mut object,
            ".spec.template.spec.containers[name=\"app\"].ports[containerPort=80,protocol=\"TCP\"].name"
        ));
        assert!(remove_field(&mut object, ".metadata.finalizers[=\"b\"]"));
        assert_eq!(
            object,
            json!({
                "data": { "app": { "conf": "y" } },
                "spec": { "template": { "spec": { "containers": [
                    { "name": "sidecar", "image": "s" },
                    { "name": "app", "ports": [{ "containerPort": 80, "protocol": "TCP" }] }
                ] } } },
                "metadata": { "finalizers": ["a"] }
            })
        );
        assert!(!remove_field(&mut object, ".data.missing"));
        assert!(!remove_field(
            &mut object,
            ".spec.template.spec.containers[name=\"x\"].image"
        ));
        assert!(!remove_field(&mut object, "data"));
    }

    #[test]
    fn fields_other_managers_own_are_left_out_of_the_comparison() {
        let desired = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "c", "labels": { "a": "1", "b": "2" } },
            "data": { "mine": "1", "theirs": "bundle" }
        });
        let managed = json!([
            { "manager": "gantry", "operation": "Apply", "fieldsV1": {
                "f:metadata": { "f:labels": { "f:a": {}, "f:b": {} } },
                "f:data": { "f:mine": {} } } },
            { "manager": "editor", "operation": "Apply", "fieldsV1": {
                "f:data": { "f:theirs": {} } } },
            { "manager": "kubectl-label", "operation": "Update", "fieldsV1": {
                "f:metadata": { "f:labels": { "f:b": {} } } } },
            { "manager": "status-writer", "operation": "Update", "subresource": "status",
              "fieldsV1": { "f:data": { "f:mine": {} } } }
        ]);
        assert_eq!(
            without_fields_of_others(&desired, &managed, "gantry"),
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "c", "labels": { "a": "1" } },
                "data": { "mine": "1" }
            })
        );
        assert_eq!(
            without_fields_of_others(&desired, &Value::Null, "gantry"),
            desired
        );
    }

    #[test]
    fn fields_inside_list_elements_go_and_the_elements_stay() {
        let desired = json!({ "spec": { "replicas": 2, "template": { "spec": { "containers": [
            { "name": "app", "image": "a:1", "args": ["x"] }
        ] } } } });
        let managed = json!([
            { "manager": "rollout", "operation": "Update", "fieldsV1": { "f:spec": {
                "f:replicas": {},
                "f:template": { "f:spec": { "f:containers": {
                    "k:{\"name\":\"app\"}": { ".": {}, "f:image": {} },
                    "k:{\"name\":\"other\"}": { "f:image": {} }
                } } }
            } } }
        ]);
        assert_eq!(
            without_fields_of_others(&desired, &managed, "gantry"),
            json!({ "spec": { "template": { "spec": { "containers": [
                { "name": "app", "args": ["x"] }
            ] } } } })
        );
    }
}
