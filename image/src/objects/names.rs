//! The checks of an object's metadata that the API server makes and that need no cluster, so
//! that a bundle it would refuse in part is refused whole before anything is applied: the name
//! by the kind's rule (kube-apiserver's `Validate<Kind>Name`), the namespace, the label keys and
//! values and the annotation keys (apimachinery's `ValidateObjectMeta`). `generateName` is not
//! read: a bundle's objects need a name.

use super::fields::{Field, Identity, Spec, StrMap, group_of};

/// Length limit of a DNS-1123 subdomain.
const SUBDOMAIN_MAX: usize = 253;
/// Length limit of a DNS label, of the name part of a qualified name, and of a label value.
const LABEL_MAX: usize = 63;
/// Untrusted text quoted in a message is cut to this many bytes.
const QUOTED_MAX: usize = 80;

/// The name rules kinds differ by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NameRule {
    /// Most kinds, custom resources included.
    Subdomain,
    /// A Namespace.
    Label,
    /// A Service: a DNS-1035 label, which starts with a letter.
    ServiceLabel,
    /// RBAC kinds and CertificateSigningRequests (`system:controller:foo`): anything that is
    /// safe as a URL path segment.
    PathSegment,
}

fn name_rule(group: &str, kind: &str) -> NameRule {
    match (group, kind) {
        ("", "Namespace") => NameRule::Label,
        ("", "Service") => NameRule::ServiceLabel,
        (
            "rbac.authorization.k8s.io",
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding",
        )
        | ("certificates.k8s.io", "CertificateSigningRequest")
        | ("apiregistration.k8s.io", "APIService") => NameRule::PathSegment,
        _ => NameRule::Subdomain,
    }
}

/// Checks `identity`'s name and namespace, and the labels and annotations; the error names the
/// field and the value.
pub(crate) fn check(
    identity: &Identity,
    labels: &StrMap<'_>,
    annotations: &StrMap<'_>,
    spec: &Spec<'_>,
) -> Result<(), String> {
    let name = &identity.name;
    let group = group_of(&identity.api_version);
    let invalid_name =
        |why: String| format!("metadata.name {} is not a valid name: {why}", quoted(name));
    match name_rule(group, &identity.kind) {
        NameRule::Subdomain => subdomain(name),
        NameRule::Label => dns_label(name),
        NameRule::ServiceLabel => service_label(name),
        NameRule::PathSegment => path_segment(name),
    }
    .map_err(invalid_name)?;
    if let Some(required) = required_name(group, &identity.kind, spec)
        && *name != required.1
    {
        return Err(invalid_name(format!(
            "must be {}: {}",
            required.0,
            quoted(&required.1)
        )));
    }
    if let Some(namespace) = &identity.namespace {
        dns_label(namespace).map_err(|why| {
            format!(
                "metadata.namespace {} is not a valid namespace name: {why}",
                quoted(namespace)
            )
        })?;
    }
    for (field, map) in [
        ("metadata.labels", labels),
        ("metadata.annotations", annotations),
    ] {
        let entries = match map {
            StrMap::Absent => continue,
            StrMap::Other => return Err(format!("{field} must be a mapping")),
            StrMap::Entries(entries) => entries,
        };
        for (key, value) in entries {
            let at = format!("{field}[{}]", quoted(key));
            // The API server reads annotation keys in lower case.
            let checked = if field == "metadata.annotations" {
                qualified_name(&key.to_ascii_lowercase())
            } else {
                qualified_name(key)
            };
            checked.map_err(|why| format!("{at}: the key is not a valid {}", why))?;
            match value {
                Field::Missing | Field::Null => {}
                Field::Other => return Err(format!("{at} must be a string")),
                Field::Str(value) if field == "metadata.labels" => {
                    label_value(value).map_err(|why| {
                        format!("{at}: {} is not a valid label value: {why}", quoted(value))
                    })?
                }
                Field::Str(_) => {}
            }
        }
    }
    Ok(())
}

/// The name a kind's `spec` dictates, with what it is made of: a CRD's
/// `<spec.names.plural>.<spec.group>`, an APIService's `<spec.version>.<spec.group>`.
fn required_name(group: &str, kind: &str, spec: &Spec<'_>) -> Option<(&'static str, String)> {
    let (what, first) = match (group, kind) {
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            ("spec.names.plural+\".\"+spec.group", spec.plural)
        }
        ("apiregistration.k8s.io", "APIService") => ("spec.version+\".\"+spec.group", spec.version),
        _ => return None,
    };
    match (first, spec.group) {
        (Field::Str(first), Field::Str(group)) => Some((what, format!("{first}.{group}"))),
        // The API server refuses a spec without them, with its own message.
        _ => None,
    }
}

/// `text` quoted, cut to [`QUOTED_MAX`] bytes.
fn quoted(text: &str) -> String {
    if text.len() <= QUOTED_MAX {
        return format!("{text:?}");
    }
    let mut end = QUOTED_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}...", &text[..end])
}

fn too_long(max: usize) -> String {
    format!("must be no more than {max} characters")
}

fn is_alphanumeric_lower(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// One DNS label's characters: lower case alphanumerics and '-', alphanumeric at both ends.
fn label_chars(label: &str) -> bool {
    let b = label.as_bytes();
    !b.is_empty()
        && b.iter().all(|&c| is_alphanumeric_lower(c) || c == b'-')
        && is_alphanumeric_lower(b[0])
        && is_alphanumeric_lower(b[b.len() - 1])
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated labels; the error says why not.
pub fn subdomain(name: &str) -> Result<(), String> {
    if name.len() > SUBDOMAIN_MAX {
        return Err(too_long(SUBDOMAIN_MAX));
    }
    if !name.split('.').all(label_chars) {
        return Err(
            "must consist of lower case alphanumeric characters, '-' or '.', and must \
                    start and end with an alphanumeric character"
                .into(),
        );
    }
    Ok(())
}

/// A DNS-1123 label: at most 63 characters, no dots; the error says why not.
pub fn dns_label(name: &str) -> Result<(), String> {
    if name.len() > LABEL_MAX {
        return Err(too_long(LABEL_MAX));
    }
    if !label_chars(name) {
        return Err(
            "must consist of lower case alphanumeric characters or '-', and must start \
                    and end with an alphanumeric character"
                .into(),
        );
    }
    Ok(())
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter.
fn service_label(name: &str) -> Result<(), String> {
    dns_label(name)?;
    if !name.as_bytes()[0].is_ascii_lowercase() {
        return Err("a Service name must start with a lower case letter".into());
    }
    Ok(())
}

/// Safe as a URL path segment: not `.` or `..`, no '/' or '%'.
fn path_segment(name: &str) -> Result<(), String> {
    if name == "." || name == ".." {
        return Err(format!("may not be {name:?}"));
    }
    for c in ['/', '%'] {
        if name.contains(c) {
            return Err(format!("may not contain '{c}'"));
        }
    }
    Ok(())
}

/// Alphanumerics, '-', '_' and '.', alphanumeric at both ends (empty allowed).
fn qualified_chars(text: &str) -> bool {
    let b = text.as_bytes();
    b.is_empty()
        || (b
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric())
}

const QUALIFIED_CHARS: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must \
                               start and end with an alphanumeric character";

/// A label or annotation key: `[prefix/]name`, the prefix a DNS-1123 subdomain, the name at most
/// 63 characters of [`qualified_chars`].
fn qualified_name(key: &str) -> Result<(), String> {
    let name = match key.split('/').collect::<Vec<_>>()[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                return Err("qualified name: the prefix before '/' is empty".into());
            }
            subdomain(prefix).map_err(|why| format!("qualified name: its prefix {why}"))?;
            name
        }
        _ => return Err("qualified name: at most one '/' separates a prefix from the name".into()),
    };
    if name.is_empty() {
        return Err("qualified name: the name part is empty".into());
    }
    if name.len() > LABEL_MAX {
        return Err(format!(
            "qualified name: the name part {}",
            too_long(LABEL_MAX)
        ));
    }
    if !qualified_chars(name) {
        return Err(format!("qualified name: the name part {QUALIFIED_CHARS}"));
    }
    Ok(())
}

/// A label value: empty, or at most 63 characters of [`qualified_chars`].
fn label_value(value: &str) -> Result<(), String> {
    if value.len() > LABEL_MAX {
        return Err(too_long(LABEL_MAX));
    }
    if !qualified_chars(value) {
        return Err(QUALIFIED_CHARS.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(api_version: &str, kind: &str, name: &str, namespace: Option<&str>) -> Identity {
        Identity {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            namespace: namespace.map(Into::into),
        }
    }

    fn name_check(api_version: &str, kind: &str, name: &str) -> Result<(), String> {
        check(
            &identity(api_version, kind, name, None),
            &StrMap::Absent,
            &StrMap::Absent,
            &Spec::default(),
        )
    }

    #[test]
    fn names_are_dns_subdomains_for_most_kinds() {
        for name in [
            "a",
            "cm-1",
            "grafana-dashboard-alertmanager-overview",
            "kube-prometheus.v0.14",
            "1st",
            &"a".repeat(253),
        ] {
            for (api_version, kind) in [
                ("v1", "ConfigMap"),
                ("apps/v1", "Deployment"),
                ("monitoring.coreos.com/v1", "Prometheus"),
            ] {
                assert_eq!(name_check(api_version, kind, name), Ok(()), "{kind} {name}");
            }
        }
        let error = name_check("v1", "ConfigMap", "Delta_Bad").unwrap_err();
        assert_eq!(
            error,
            "metadata.name \"Delta_Bad\" is not a valid name: must consist of lower case \
             alphanumeric characters, '-' or '.', and must start and end with an alphanumeric \
             character"
        );
        for name in ["-a", "a-", "a..b", ".a", "a.", "a b", "A", "a_b", "é"] {
            assert!(name_check("v1", "Secret", name).is_err(), "{name}");
        }
        let long = name_check("v1", "Secret", &"a".repeat(254)).unwrap_err();
        assert!(
            long.ends_with("must be no more than 253 characters"),
            "{long}"
        );
        assert!(
            long.contains("\"aaaa") && long.contains("..."),
            "cut: {long}"
        );
    }

    #[test]
    fn namespaces_and_services_are_dns_labels() {
        assert_eq!(name_check("v1", "Namespace", "monitoring"), Ok(()));
        assert_eq!(name_check("v1", "Namespace", "1-team"), Ok(()));
        assert!(name_check("v1", "Namespace", "a.b").is_err());
        assert!(name_check("v1", "Namespace", &"a".repeat(64)).is_err());
        assert_eq!(name_check("v1", "Namespace", &"a".repeat(63)), Ok(()));
        assert_eq!(name_check("v1", "Service", "prometheus-k8s"), Ok(()));
        assert!(name_check("v1", "Service", "v1.svc").is_err());
        let digit = name_check("v1", "Service", "1-svc").unwrap_err();
        assert!(
            digit.ends_with("must start with a lower case letter"),
            "{digit}"
        );
        // A kind of the same name in another group has the general rule.
        assert_eq!(name_check("example.com/v1", "Service", "v1.svc"), Ok(()));
    }

    #[test]
    fn rbac_names_are_path_segments() {
        for kind in ["ClusterRole", "Role", "RoleBinding", "ClusterRoleBinding"] {
            for name in [
                "system:controller:foo",
                "system:aggregate-to-admin",
                "Upper_Case ok",
            ] {
                assert_eq!(
                    name_check("rbac.authorization.k8s.io/v1", kind, name),
                    Ok(()),
                    "{kind} {name}"
                );
            }
            for name in [".", "..", "a/b", "a%2f"] {
                assert!(
                    name_check("rbac.authorization.k8s.io/v1", kind, name).is_err(),
                    "{kind} {name}"
                );
            }
        }
        assert_eq!(
            name_check(
                "certificates.k8s.io/v1",
                "CertificateSigningRequest",
                "csr:node:A"
            ),
            Ok(())
        );
        // Outside RBAC's group a `:` is refused.
        assert!(name_check("v1", "ServiceAccount", "system:foo").is_err());
    }

    fn spec<'a>(group: &'a str, version: &'a str, plural: &'a str) -> Spec<'a> {
        Spec {
            group: Field::Str(group),
            version: Field::Str(version),
            plural: Field::Str(plural),
        }
    }

    #[test]
    fn crds_and_api_services_are_named_by_their_spec() {
        let crd = |name: &str, spec: Spec<'_>| {
            check(
                &identity(
                    "apiextensions.k8s.io/v1",
                    "CustomResourceDefinition",
                    name,
                    None,
                ),
                &StrMap::Absent,
                &StrMap::Absent,
                &spec,
            )
        };
        let prometheuses = spec("monitoring.coreos.com", "", "prometheuses");
        assert_eq!(
            crd("prometheuses.monitoring.coreos.com", prometheuses),
            Ok(())
        );
        let error = crd("prometheus.monitoring.coreos.com", prometheuses).unwrap_err();
        assert!(
            error.ends_with(
                "must be spec.names.plural+\".\"+spec.group: \"prometheuses.monitoring.coreos.com\""
            ),
            "{error}"
        );
        // Without the fields, the API server says what is missing.
        assert_eq!(crd("anything.example.com", Spec::default()), Ok(()));
        let service = |name: &str, spec: Spec<'_>| {
            check(
                &identity("apiregistration.k8s.io/v1", "APIService", name, None),
                &StrMap::Absent,
                &StrMap::Absent,
                &spec,
            )
        };
        let metrics = spec("metrics.k8s.io", "v1beta1", "");
        assert_eq!(service("v1beta1.metrics.k8s.io", metrics), Ok(()));
        assert!(service("v1.metrics.k8s.io", metrics).is_err());
    }

    #[test]
    fn namespaces_of_objects_are_dns_labels() {
        let with = |namespace: &str| {
            check(
                &identity("v1", "ConfigMap", "a", Some(namespace)),
                &StrMap::Absent,
                &StrMap::Absent,
                &Spec::default(),
            )
        };
        assert_eq!(with("kube-system"), Ok(()));
        let error = with("Team_A").unwrap_err();
        assert!(
            error.starts_with("metadata.namespace \"Team_A\" is not a valid namespace name: "),
            "{error}"
        );
        assert!(with("a.b").is_err());
    }

    fn with_maps(labels: StrMap<'_>, annotations: StrMap<'_>) -> Result<(), String> {
        check(
            &identity("v1", "ConfigMap", "a", None),
            &labels,
            &annotations,
            &Spec::default(),
        )
    }

    #[test]
    fn label_keys_and_values_are_qualified_names() {
        let labels = |entries: Vec<(&'static str, Field<'static>)>| {
            with_maps(StrMap::Entries(entries), StrMap::Absent)
        };
        assert_eq!(
            labels(vec![
                ("app.kubernetes.io/name", Field::Str("prometheus")),
                ("app.kubernetes.io/version", Field::Str("2.54.1")),
                (
                    "rbac.authorization.k8s.io/aggregate-to-admin",
                    Field::Str("true")
                ),
                ("Tier_1", Field::Str("Front.End-2")),
                ("empty", Field::Str("")),
                ("null", Field::Null),
                (&*"k".repeat(63).leak(), Field::Str(&*"v".repeat(63).leak())),
            ]),
            Ok(())
        );
        for (key, value, says) in [
            (
                "a b",
                "x",
                "the key is not a valid qualified name: the name part must consist",
            ),
            (
                "Example.com/a",
                "x",
                "its prefix must consist of lower case",
            ),
            ("/a", "x", "the prefix before '/' is empty"),
            ("a/", "x", "the name part is empty"),
            ("a/b/c", "x", "at most one '/'"),
            ("a", "-x", "\"-x\" is not a valid label value"),
            ("a", "x y", "is not a valid label value"),
        ] {
            let error = labels(vec![(key, Field::Str(value))]).unwrap_err();
            assert!(
                error.starts_with(&format!("metadata.labels[{key:?}]")),
                "{key}: {error}"
            );
            assert!(error.contains(says), "{key}={value}: {error}");
        }
        let long = labels(vec![("a", Field::Str(&*"v".repeat(64).leak()))]).unwrap_err();
        assert!(
            long.ends_with("must be no more than 63 characters"),
            "{long}"
        );
        let long = labels(vec![(&*"k".repeat(64).leak(), Field::Str(""))]).unwrap_err();
        assert!(
            long.contains("the name part must be no more than 63"),
            "{long}"
        );
        assert_eq!(
            labels(vec![("a", Field::Other)]).unwrap_err(),
            "metadata.labels[\"a\"] must be a string"
        );
        assert_eq!(
            with_maps(StrMap::Other, StrMap::Absent).unwrap_err(),
            "metadata.labels must be a mapping"
        );
    }

    #[test]
    fn annotation_keys_are_qualified_names_in_any_case() {
        let annotations = |entries: Vec<(&'static str, Field<'static>)>| {
            with_maps(StrMap::Absent, StrMap::Entries(entries))
        };
        assert_eq!(
            annotations(vec![
                (
                    "kubectl.kubernetes.io/last-applied-configuration",
                    Field::Str("{}")
                ),
                ("Example.COM/Mixed", Field::Str("any value: at all")),
                ("null", Field::Null),
            ]),
            Ok(())
        );
        assert!(annotations(vec![("a b", Field::Str(""))]).is_err());
        assert_eq!(
            annotations(vec![("a", Field::Other)]).unwrap_err(),
            "metadata.annotations[\"a\"] must be a string"
        );
    }
}
