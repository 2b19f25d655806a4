//! The streaming validation of a bundle's files: each file is walked without building its
//! documents in memory (only the identifying fields are kept, see [`super::walk`]), then the
//! checks across files run: no object twice, at least one object, at most `maxObjects`.

use std::collections::HashSet;
use std::io::Read;

use super::fields::{Identity, group_of};
use super::rules::{self, Place};
use super::walk::DocSummary;
use crate::error::ImageError;
use crate::error::LimitKind;
use crate::layer::BundleFiles;
use crate::limits::EffectiveLimits;

/// What identifies one object of a bundle, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSummary {
    pub file: String,
    /// Index (from 0) of the document among the file's non-empty documents.
    pub document: usize,
    /// Index in `items` when the document is a list.
    pub item: Option<usize>,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
}

impl ObjectSummary {
    pub(crate) fn at(file: &str, place: Place, identity: Identity) -> Self {
        ObjectSummary {
            file: file.to_string(),
            document: place.document,
            item: place.item,
            api_version: identity.api_version,
            kind: identity.kind,
            name: identity.name,
            namespace: identity.namespace,
        }
    }

    /// The version of `apiVersion`.
    pub fn version(&self) -> &str {
        self.api_version
            .split_once('/')
            .map_or(self.api_version.as_str(), |(_, version)| version)
    }

    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        group_of(&self.api_version)
    }
}

/// Validates one file and returns the objects it holds.
pub fn summarize_file(
    file: &str,
    content: &[u8],
    limits: &EffectiveLimits,
) -> Result<Vec<ObjectSummary>, ImageError> {
    rules::read_file::<DocSummary, _>(
        file,
        content,
        limits,
        |_, place, identity| ObjectSummary::at(file, place, identity),
        // Checked per document, so that the error names the document that went over.
        |objects, document| {
            if objects.len() as u64 > limits.max_objects {
                return Err(
                    limits.exceeded(LimitKind::Objects, format!("{file}, document {document}"))
                );
            }
            Ok(())
        },
    )
}

/// Validates every file of a bundle: parsable, objects complete, no object twice, at least one
/// object, at most `maxObjects`.
pub fn validate_files(
    files: &BundleFiles,
    limits: &EffectiveLimits,
) -> Result<Vec<ObjectSummary>, ImageError> {
    check_objects(
        files
            .files
            .iter()
            .map(|(name, stored)| summarize_stored(name, &stored.path, limits)),
        limits,
    )
}

/// Validates one file stored at `path`.
pub(crate) fn summarize_stored(
    name: &str,
    path: &std::path::Path,
    limits: &EffectiveLimits,
) -> Result<Vec<ObjectSummary>, ImageError> {
    let file = std::fs::File::open(path)
        .map_err(|e| ImageError::from_io(format!("manifests/{name}"), e))?;
    // Sized up front: growing the buffer while reading would copy the file several times.
    let size = file.metadata().map_or(0, |m| m.len());
    let mut buffer = Vec::with_capacity(size.min(limits.max_file_bytes) as usize + 1);
    file.take(limits.max_file_bytes.saturating_add(1))
        .read_to_end(&mut buffer)
        .map_err(|e| ImageError::from_io(format!("manifests/{name}"), e))?;
    if buffer.len() as u64 > limits.max_file_bytes {
        return Err(limits.exceeded(LimitKind::FileBytes, format!("manifests/{name}")));
    }
    summarize_file(name, &buffer, limits)
}

/// The checks across files, given each file's objects in file-name order.
pub(crate) fn check_objects(
    per_file: impl Iterator<Item = Result<Vec<ObjectSummary>, ImageError>>,
    limits: &EffectiveLimits,
) -> Result<Vec<ObjectSummary>, ImageError> {
    let mut all = Vec::new();
    let mut seen = HashSet::new();
    for objects in per_file {
        for object in objects? {
            if all.len() as u64 >= limits.max_objects {
                return Err(limits.exceeded(
                    LimitKind::Objects,
                    format!("{}, document {}", object.file, object.document),
                ));
            }
            let key = (
                object.group().to_string(),
                object.kind.clone(),
                object.namespace.clone().unwrap_or_default(),
                object.name.clone(),
            );
            if !seen.insert(key) {
                let first = all
                    .iter()
                    .find(|o: &&ObjectSummary| {
                        o.group() == object.group()
                            && o.kind == object.kind
                            && o.namespace == object.namespace
                            && o.name == object.name
                    })
                    .map(|o| format!("{}, document {}", o.file, o.document))
                    .unwrap_or_default();
                return Err(ImageError::InvalidObject {
                    file: object.file.clone(),
                    document: object.document,
                    object: None,
                    reason: format!(
                        "{} {}{} is defined twice (first in {first})",
                        object.kind,
                        object
                            .namespace
                            .as_deref()
                            .map(|ns| format!("{ns}/"))
                            .unwrap_or_default(),
                        object.name
                    ),
                });
            }
            all.push(object);
        }
    }
    if all.is_empty() {
        return Err(ImageError::EmptyManifests);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{is_list, parse_file};

    fn limits() -> EffectiveLimits {
        EffectiveLimits::default()
    }

    fn summaries(file: &str, content: &str) -> Result<Vec<ObjectSummary>, ImageError> {
        summarize_file(file, content.as_bytes(), &limits())
    }

    fn ids(objects: &[ObjectSummary]) -> Vec<(usize, Option<usize>, &str, &str)> {
        objects
            .iter()
            .map(|o| (o.document, o.item, o.kind.as_str(), o.name.as_str()))
            .collect()
    }

    const MULTI: &str = "\
---
# an empty document
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  namespace: ns
data:
  key: value
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Secret
  metadata: {name: s1}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: d1}
  spec: {replicas: 2}
...
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r}
rules: []
";

    #[test]
    fn multi_document_yaml_and_lists_are_flattened() {
        let objects = summaries("a.yaml", MULTI).unwrap();
        assert_eq!(
            ids(&objects),
            vec![
                (0, None, "ConfigMap", "a"),
                (1, Some(0), "Secret", "s1"),
                (1, Some(1), "Deployment", "d1"),
                (2, None, "ClusterRole", "r"),
            ]
        );
        assert_eq!(objects[0].namespace.as_deref(), Some("ns"));
        assert_eq!(objects[2].group(), "apps");
        assert_eq!(objects[3].group(), "rbac.authorization.k8s.io");
        assert_eq!(objects[0].group(), "");
    }

    #[test]
    fn the_full_parse_agrees_with_validation() {
        let objects = parse_file("a.yaml", MULTI.as_bytes(), &limits()).unwrap();
        let summary = summaries("a.yaml", MULTI).unwrap();
        assert_eq!(objects.len(), summary.len());
        for (object, summary) in objects.iter().zip(&summary) {
            assert_eq!(&object.summary, summary);
            let value = object.value().unwrap();
            assert_eq!(value["kind"], summary.kind.as_str());
            assert_eq!(value["metadata"]["name"], summary.name.as_str());
        }
        assert_eq!(objects[2].value().unwrap()["spec"]["replicas"], 2);
        let dynamic = objects[0].to_dynamic().unwrap();
        assert_eq!(dynamic.metadata.name.as_deref(), Some("a"));
        assert_eq!(dynamic.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(dynamic.types.unwrap().kind, "ConfigMap");
        assert_eq!(dynamic.data["data"]["key"], "value");
    }

    #[test]
    fn json_files() {
        let json = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"j"}}]}"#;
        let objects = summaries("x.json", json).unwrap();
        assert_eq!(ids(&objects), vec![(0, Some(0), "ConfigMap", "j")]);
        assert!(summaries("x.json", "  \n").unwrap().is_empty());
        match summaries("x.json", "{\n\"a\": }") {
            Err(ImageError::InvalidYaml { file, line, .. }) => {
                assert_eq!(file, "x.json");
                assert_eq!(line, Some(2));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unparsable_yaml_names_the_file_and_line() {
        let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: [unclosed\n";
        match summaries("bad.yaml", yaml) {
            Err(ImageError::InvalidYaml {
                file,
                line,
                message,
            }) => {
                assert_eq!(file, "bad.yaml");
                assert!(
                    line.is_some_and(|l| (5..=6).contains(&l)),
                    "{line:?} {message}"
                );
            }
            other => panic!("{other:?}"),
        }
        let yaml = "a: 1\nb: [\n  - x\n";
        let err = summaries("bad.yaml", yaml).unwrap_err();
        assert!(err.to_string().contains("bad.yaml at line"), "{err}");
    }

    #[test]
    fn missing_fields_name_the_file_and_document() {
        for (yaml, field, document) in [
            ("kind: A\nmetadata: {name: a}\n", "apiVersion is missing", 0),
            (
                "apiVersion: v1\nmetadata: {name: a}\n",
                "kind is missing",
                0,
            ),
            ("apiVersion: v1\nkind: A\n", "metadata.name is missing", 0),
            (
                "apiVersion: v1\nkind: A\nmetadata: {}\n",
                "metadata.name is missing",
                0,
            ),
            (
                "apiVersion: v1\nkind: A\nmetadata: {name: x}\n---\napiVersion: v1\nkind: A\nmetadata: {name: 3}\n",
                "metadata.name must be a non-empty string",
                1,
            ),
            (
                "apiVersion: v1\nkind: A\nmetadata: [a]\n",
                "metadata must be a mapping",
                0,
            ),
            ("- a\n- b\n", "not a mapping", 0),
            ("just a string\n", "not a mapping", 0),
            (
                "apiVersion: v1\nkind: List\nitems:\n- kind: A\n  metadata: {name: a}\n",
                "items[0]: apiVersion is missing",
                0,
            ),
            (
                "apiVersion: v1\nkind: List\nitems: 3\n",
                "items of a List must be a sequence",
                0,
            ),
            (
                "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: List\n  metadata: {name: l}\n  items: 3\n",
                "items[0]: a List inside a List is not flattened: give it a document of its own",
                0,
            ),
            (
                "apiVersion: v1\nkind: A\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMapList\nitems:\n- apiVersion: rbac.authorization.k8s.io/v1\n  kind: RoleList\n  items: []\n",
                "items[0]: a RoleList inside a ConfigMapList is not flattened: give it a document of its own",
                1,
            ),
            (
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleList\nitems: {a: 1}\n",
                "items of a RoleList must be a sequence",
                0,
            ),
            (
                "apiVersion: v1\nkind: A\nmetadata: {name: a, namespace: [x]}\n",
                "metadata.namespace must be a string",
                0,
            ),
        ] {
            match summaries("f.yaml", yaml) {
                Err(ImageError::InvalidObject {
                    file,
                    document: d,
                    reason,
                    ..
                }) => {
                    assert_eq!(file, "f.yaml");
                    assert_eq!(d, document, "{yaml}");
                    assert_eq!(reason, field, "{yaml}");
                }
                other => panic!("{yaml}: {other:?}"),
            }
            // The full parse refuses the same documents with the same message.
            let summary_error = summaries("f.yaml", yaml).unwrap_err().to_string();
            let parse_error = parse_file("f.yaml", yaml.as_bytes(), &limits()).unwrap_err();
            assert_eq!(parse_error.to_string(), summary_error, "{yaml}");
        }
    }

    /// kube-prometheus's three files of typed lists (`manifests/` of its release).
    fn kube_prometheus() -> BundleFiles {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kube-prometheus");
        BundleFiles::from_dir(&dir, &limits()).unwrap()
    }

    #[test]
    fn typed_lists_of_any_group_are_flattened_in_order() {
        let files = kube_prometheus();
        let objects = validate_files(&files, &limits()).unwrap();
        let found: Vec<_> = objects
            .iter()
            .map(|o| {
                (
                    o.file.as_str(),
                    o.item,
                    o.kind.as_str(),
                    o.namespace.as_deref().unwrap_or_default(),
                    o.name.as_str(),
                )
            })
            .collect();
        let (dashboards, bindings, roles) = (
            "grafana-dashboardDefinitions.yaml",
            "prometheus-roleBindingSpecificNamespaces.yaml",
            "prometheus-roleSpecificNamespaces.yaml",
        );
        let mut expected = vec![
            (
                dashboards,
                Some(0),
                "ConfigMap",
                "monitoring",
                "grafana-dashboard-alertmanager-overview",
            ),
            (
                dashboards,
                Some(1),
                "ConfigMap",
                "monitoring",
                "grafana-dashboard-apiserver",
            ),
        ];
        for (file, kind) in [(bindings, "RoleBinding"), (roles, "Role")] {
            for (i, namespace) in ["default", "kube-system", "monitoring"]
                .into_iter()
                .enumerate()
            {
                expected.push((file, Some(i), kind, namespace, "prometheus-k8s"));
            }
        }
        assert_eq!(found, expected);
        assert!(objects.iter().all(|o| o.document == 0));
        // The full parse gives the same objects, each a whole object of its own.
        let (_, parsed) =
            crate::canonical::write_canonical_objects(&files, std::io::sink(), &limits()).unwrap();
        assert_eq!(parsed.len(), objects.len());
        for (object, summary) in parsed.iter().zip(&objects) {
            assert_eq!(&object.summary, summary);
            let value = object.value().unwrap();
            assert_eq!(value["kind"], summary.kind.as_str());
            assert!(value.get("items").is_none());
        }
        assert_eq!(parsed[5].value().unwrap()["rules"][0]["verbs"][2], "watch");
        // `is_list`, for readers that keep their own parse, is the same rule.
        let list = |yaml: &str| is_list(&serde_saphyr::from_str(yaml).unwrap());
        assert!(list(
            "apiVersion: example.com/v1\nkind: WidgetList\nitems: []\n"
        ));
        assert!(list("apiVersion: v1\nkind: List\nitems: []\n"));
        assert!(!list("apiVersion: v1\nkind: ConfigMap\nitems: []\n"));
        assert!(!list(
            "apiVersion: example.com/v1\nkind: AllowList\nmetadata: {name: a}\n"
        ));
    }

    #[test]
    fn a_kind_ending_in_list_without_items_is_an_object() {
        let yaml = "apiVersion: example.com/v1\nkind: AllowList\nmetadata: {name: a}\nspec: {}\n";
        assert_eq!(
            ids(&summaries("a.yaml", yaml).unwrap()),
            vec![(0, None, "AllowList", "a")]
        );
        assert_eq!(
            parse_file("a.yaml", yaml.as_bytes(), &limits())
                .unwrap()
                .len(),
            1
        );
    }

    /// Runs `check` on a thread with the stack every spawned and tokio thread gets (2 MiB),
    /// less than a parse at the depth limit needs in an unoptimised build.
    fn on_small_stack(check: impl FnOnce() + Send + 'static) {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(check)
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn nesting_past_the_depth_limit_is_refused_on_any_thread() {
        on_small_stack(|| {
            let deep = [
                (
                    "map.yaml",
                    format!("x: {}1{}\n", "{a: ".repeat(60_000), "}".repeat(60_000)),
                ),
                (
                    "seq.yaml",
                    format!("x: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
                ),
                (
                    "block.yaml",
                    (0..200).map(|i| format!("{}a:\n", " ".repeat(i))).collect(),
                ),
                (
                    "deep.json",
                    format!("{}1{}", "{\"a\":".repeat(60_000), "}".repeat(60_000)),
                ),
            ];
            for (file, content) in deep {
                for error in [
                    summaries(file, &content).unwrap_err(),
                    parse_file(file, content.as_bytes(), &limits()).unwrap_err(),
                ] {
                    match error {
                        ImageError::InvalidYaml {
                            file: named,
                            line: Some(_),
                            message,
                        } => {
                            assert_eq!(named, file);
                            assert_eq!(
                                message,
                                "nested deeper than 127 levels of mappings and sequences, the limit"
                            );
                        }
                        other => panic!("{file}: {other:?}"),
                    }
                }
            }
            // At the limit, an object is read, by both parsers.
            let nested = |depth: usize| {
                format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\ndata: {}1{}\n",
                    "{a: ".repeat(depth),
                    "}".repeat(depth)
                )
            };
            let deepest = nested(126);
            assert_eq!(summaries("a.yaml", &deepest).unwrap().len(), 1);
            let parsed = parse_file("a.yaml", deepest.as_bytes(), &limits()).unwrap();
            assert!(parsed[0].value().is_ok());
            assert!(summaries("a.yaml", &nested(127)).is_err());
            // Sequences alike, and JSON (whose document is a mapping, a level).
            let seqs = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            let object = |data: String| {
                format!(
                    "{{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {{\"name\": \"a\"}}, \"data\": {data}}}"
                )
            };
            for file in ["a.yaml", "a.json"] {
                assert!(summaries(file, &object(seqs(126))).is_ok(), "{file}");
                assert!(summaries(file, &object(seqs(127))).is_err(), "{file}");
            }
        });
    }

    #[test]
    fn names_the_api_server_refuses_are_refused_naming_the_object() {
        let yaml = format!(
            "{CM}---\n{}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: Delta_Bad}}\n",
            CM.replace("name: a", "name: b")
        );
        let error = summaries("f.yaml", &yaml).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid object in f.yaml, document 2 (ConfigMap Delta_Bad): metadata.name \
             \"Delta_Bad\" is not a valid name: must consist of lower case alphanumeric \
             characters, '-' or '.', and must start and end with an alphanumeric character"
        );
        let both = |yaml: &str| {
            let summary = summaries("f.yaml", yaml)
                .map(|o| o.len())
                .map_err(|e| e.to_string());
            let parsed = parse_file("f.yaml", yaml.as_bytes(), &limits())
                .map(|o| o.len())
                .map_err(|e| e.to_string());
            assert_eq!(summary, parsed, "{yaml}");
            summary
        };
        assert_eq!(both(&yaml), Err(error.to_string()));
        for (yaml, says) in [
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: Team\n",
                "(ConfigMap Team/a): metadata.namespace \"Team\" is not a valid namespace name",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {\"a b\": x}\n",
                "(ConfigMap a): metadata.labels[\"a b\"]: the key is not a valid qualified name",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {app: true}\n",
                "metadata.labels[\"app\"] must be a string",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {app: -web}\n",
                "\"-web\" is not a valid label value",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  annotations: {\"a/b/c\": x}\n",
                "metadata.annotations[\"a/b/c\"]: the key is not a valid qualified name",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  annotations: {a: [x]}\n",
                "metadata.annotations[\"a\"] must be a string",
            ),
            (
                "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: 1st}\n",
                "document 0 (Service 1st): items[0]: metadata.name \"1st\" is not a valid name",
            ),
            (
                "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widget.example.com}\nspec:\n  group: example.com\n  names: {plural: widgets, kind: Widget}\n",
                "must be spec.names.plural+\".\"+spec.group: \"widgets.example.com\"",
            ),
            (
                "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1.metrics.k8s.io}\nspec: {group: metrics.k8s.io, version: v1beta1}\n",
                "must be spec.version+\".\"+spec.group: \"v1beta1.metrics.k8s.io\"",
            ),
        ] {
            let error = both(yaml).unwrap_err();
            assert!(error.contains(says), "{yaml}: {error}");
        }
        // Names of real install sets.
        for yaml in [
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: \"system:controller:foo\"}\n",
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: \"system:aggregate-to-admin\"}\n",
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: prometheuses.monitoring.coreos.com\n  annotations: {controller-gen.kubebuilder.io/version: v0.18.0}\nspec:\n  group: monitoring.coreos.com\n  names: {plural: prometheuses, kind: Prometheus, listKind: PrometheusList}\n",
            "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: v1beta1.metrics.k8s.io\n  labels: {k8s-app: metrics-server}\nspec: {group: metrics.k8s.io, version: v1beta1, service: {name: metrics-server, namespace: kube-system}}\n",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kube-root-ca.crt.v2, namespace: kube-system, labels: {tier: null}}\n",
        ] {
            assert_eq!(both(yaml), Ok(1), "{yaml}");
        }
    }

    #[test]
    fn non_string_keys_are_refused_by_both_parsers() {
        let yaml = "apiVersion: v1\nkind: A\nmetadata: {name: a}\ndata:\n  ? [a, b]\n  : c\n";
        assert!(summaries("f.yaml", yaml).is_err());
        assert!(parse_file("f.yaml", yaml.as_bytes(), &limits()).is_err());
    }

    #[test]
    fn empty_documents_are_skipped() {
        assert!(summaries("e.yaml", "").unwrap().is_empty());
        assert!(
            summaries("e.yaml", "---\n---\n# comment\n")
                .unwrap()
                .is_empty()
        );
        assert!(summaries("e.yaml", "~\n").unwrap().is_empty());
    }

    fn bundle(files: &[(&str, &str)]) -> (tempfile::TempDir, BundleFiles) {
        let dir = crate::dir::bundle_dir(files);
        let files = BundleFiles::from_dir(dir.path(), &limits()).unwrap();
        (dir, files)
    }

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x}\n";

    #[test]
    fn the_same_object_twice_is_an_error() {
        let (_d, files) = bundle(&[("a.yaml", CM), ("b.yaml", CM)]);
        match validate_files(&files, &limits()) {
            Err(ImageError::InvalidObject {
                file,
                document,
                reason,
                ..
            }) => {
                assert_eq!(file, "b.yaml");
                assert_eq!(document, 0);
                assert!(reason.contains("x/a is defined twice"), "{reason}");
                assert!(reason.contains("a.yaml, document 0"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // Another namespace, group or kind makes another object.
        let other_ns = CM.replace("namespace: x", "namespace: other");
        let other_group = CM.replace("apiVersion: v1", "apiVersion: example.com/v1");
        let same_group_other_version = CM.replace("apiVersion: v1", "apiVersion: v2");
        let (_d, files) = bundle(&[
            ("a.yaml", CM),
            ("b.yaml", &other_ns),
            ("c.yaml", &other_group),
        ]);
        assert_eq!(validate_files(&files, &limits()).unwrap().len(), 3);
        let (_d, files) = bundle(&[("a.yaml", CM), ("b.yaml", &same_group_other_version)]);
        assert!(validate_files(&files, &limits()).is_err());
    }

    #[test]
    fn a_bundle_needs_an_object_and_at_most_max_objects() {
        let (_d, files) = bundle(&[("a.yaml", "---\n")]);
        assert!(matches!(
            validate_files(&files, &limits()),
            Err(ImageError::EmptyManifests)
        ));
        let two = format!("{CM}---\n{}", CM.replace("name: a", "name: b"));
        let (_d, files) = bundle(&[("a.yaml", &two)]);
        let small = EffectiveLimits {
            max_objects: 1,
            ..limits()
        };
        match validate_files(&files, &small) {
            Err(ImageError::LimitExceeded {
                limit: LimitKind::Objects,
                value: 1,
                culprit,
            }) => assert_eq!(culprit, "a.yaml, document 1"),
            other => panic!("{other:?}"),
        }
        assert_eq!(validate_files(&files, &limits()).unwrap().len(), 2);
    }
}
