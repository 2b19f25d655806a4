//! Class selection: which ProvisionerClass serves a bundle, and whether its parameters are
//! valid (used by the Bundle reconcile and by the class controller).

use std::sync::Arc;

use gantry_api::{Bundle, DEFAULT_CLASS_ANNOTATION, ProvisionerClass};
use gantry_image::Platform;
use kube_core::ResourceExt;

/// The outcome of looking up a bundle's class.
#[derive(Debug)]
pub enum Selection {
    /// This provisioner serves the bundle with this class.
    Serve(Arc<ProvisionerClass>),
    /// The class names another provisioner (or another installation's ID): the bundle is not
    /// ours to touch.
    NotOurs,
    /// No class (yet): the bundle waits.
    Missing(ClassMissing),
}

/// Why a bundle has no class (yet).
#[derive(Debug, thiserror::Error)]
pub enum ClassMissing {
    #[error("ProvisionerClass {0} does not exist")]
    ClassNotFound(String),

    #[error(
        "the bundle names no class and no ProvisionerClass is annotated gantry.dev/is-default-class=\"true\""
    )]
    NoDefaultClass,
}

/// The provisioners one installation of Gantry serves, by the IDs classes name in
/// `spec.provisioner`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedProvisioners {
    /// The built-in `plain+v0` provisioner's ID (`--provisioner-id`).
    pub plain: String,
    /// The built-in OLM `registry+v1` provisioner's ID (`--registry-provisioner-id`); `None`
    /// when it is turned off.
    pub registry: Option<String>,
    /// The IDs external plugins registered in the provisioner's namespace serve.
    pub plugins: std::collections::BTreeSet<String>,
}

/// How a served provisioner turns content into objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProvisionerKind {
    /// `plain+v0`: the objects are the image's manifests.
    Plain,
    /// OLM `registry+v1`: the objects are rendered from the bundle in-process.
    Registry,
    /// An external plugin renders the objects (docs/plugins.md).
    Plugin,
}

impl Default for ServedProvisioners {
    fn default() -> Self {
        ServedProvisioners {
            plain: gantry_api::PLAIN_PROVISIONER.into(),
            registry: Some(gantry_api::REGISTRY_PROVISIONER.into()),
            plugins: Default::default(),
        }
    }
}

impl ServedProvisioners {
    /// Only the plain provisioner, with ID `plain`.
    pub fn plain(plain: impl Into<String>) -> Self {
        ServedProvisioners {
            plain: plain.into(),
            registry: None,
            plugins: Default::default(),
        }
    }

    /// Which provisioner `id` names, when it is served here.
    pub fn kind(&self, id: &str) -> Option<ProvisionerKind> {
        if id == self.plain {
            Some(ProvisionerKind::Plain)
        } else if self.registry.as_deref() == Some(id) {
            Some(ProvisionerKind::Registry)
        } else if self.plugins.contains(id) {
            Some(ProvisionerKind::Plugin)
        } else {
            None
        }
    }

    /// Whether `id` is served here.
    pub fn serves(&self, id: &str) -> bool {
        self.kind(id).is_some()
    }
}

/// Picks the class of `bundle` among `classes`: the named one, or the default class; it is
/// ours when its `spec.provisioner` is one `served`.
pub fn select(
    bundle: &Bundle,
    classes: &[Arc<ProvisionerClass>],
    served: &ServedProvisioners,
) -> Selection {
    select_by_name(
        bundle.spec.provisioner_class_name.as_deref(),
        classes,
        served,
    )
}

/// [`select`] for a bundle whose `spec.provisionerClassName` is `class_name`.
pub fn select_by_name(
    class_name: Option<&str>,
    classes: &[Arc<ProvisionerClass>],
    served: &ServedProvisioners,
) -> Selection {
    let class = match class_name {
        Some(name) => match classes.iter().find(|c| c.name_any() == name) {
            Some(class) => class.clone(),
            None => return Selection::Missing(ClassMissing::ClassNotFound(name.to_string())),
        },
        None => match default_class(classes) {
            Some(class) => class,
            None => return Selection::Missing(ClassMissing::NoDefaultClass),
        },
    };
    if served.serves(&class.spec.provisioner) {
        Selection::Serve(class)
    } else {
        Selection::NotOurs
    }
}

/// The default class: annotated `gantry.dev/is-default-class: "true"`; when several are, the
/// newest wins (as Kubernetes does for StorageClasses), then the first by name.
pub fn default_class(classes: &[Arc<ProvisionerClass>]) -> Option<Arc<ProvisionerClass>> {
    classes
        .iter()
        .filter(|c| {
            c.annotations()
                .get(DEFAULT_CLASS_ANNOTATION)
                .is_some_and(|v| v == "true")
        })
        .max_by(|a, b| {
            let created = |c: &ProvisionerClass| c.metadata.creation_timestamp.clone().map(|t| t.0);
            created(a)
                .cmp(&created(b))
                .then_with(|| b.name_any().cmp(&a.name_any()))
        })
        .cloned()
}

/// Checks what the schema cannot: returns the first invalid parameter, named.
pub fn validate(class: &ProvisionerClass) -> Result<(), String> {
    if let Some(platform) = &class.spec.platform {
        platform
            .parse::<Platform>()
            .map_err(|e| format!("spec.platform {platform:?}: {e}"))?;
    }
    if let Some(limits) = &class.spec.limits {
        let fields = [
            ("maxCompressedBytes", limits.max_compressed_bytes),
            ("maxUncompressedBytes", limits.max_uncompressed_bytes),
            ("maxFiles", limits.max_files),
            ("maxFileBytes", limits.max_file_bytes),
            ("maxObjects", limits.max_objects),
        ];
        for (field, value) in fields {
            if value.is_some_and(|v| v < 1) {
                return Err(format!("spec.limits.{field} must be at least 1"));
            }
        }
    }
    for registry in &class.spec.insecure_registries {
        if registry.is_empty() || registry.contains('/') || registry.contains(char::is_whitespace) {
            return Err(format!(
                "spec.insecureRegistries: {registry:?} is not a host[:port]"
            ));
        }
    }
    crate::allowed_images::validate(&class.spec.allowed_images)?;
    crate::health_rules::validate("spec.healthCheckExprs", &class.spec.health_check_exprs)
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::PLAIN_PROVISIONER;
    use gantry_api::{BundleSpec, ProvisionerClassSpec};

    fn class(name: &str, provisioner: &str, default: bool) -> Arc<ProvisionerClass> {
        let mut class = ProvisionerClass::new(
            name,
            ProvisionerClassSpec {
                provisioner: provisioner.into(),
                ..Default::default()
            },
        );
        if default {
            class
                .annotations_mut()
                .insert(DEFAULT_CLASS_ANNOTATION.into(), "true".into());
        }
        Arc::new(class)
    }

    fn bundle(class: Option<&str>) -> Bundle {
        Bundle::new(
            "b",
            BundleSpec {
                provisioner_class_name: class.map(Into::into),
                image: "127.0.0.1:1/x:v1".into(),
                ..Default::default()
            },
        )
    }

    #[test]
    fn named_class_of_ours_is_served() {
        let classes = [class("plain", PLAIN_PROVISIONER, false)];
        assert!(
            matches!(select(&bundle(Some("plain")), &classes, &ServedProvisioners::plain(PLAIN_PROVISIONER)), Selection::Serve(c) if c.name_any() == "plain")
        );
    }

    #[test]
    fn another_provisioner_is_left_alone() {
        let classes = [class("other", "example.com/other", true)];
        assert!(matches!(
            select(
                &bundle(Some("other")),
                &classes,
                &ServedProvisioners::plain(PLAIN_PROVISIONER)
            ),
            Selection::NotOurs
        ));
        assert!(matches!(
            select(
                &bundle(None),
                &classes,
                &ServedProvisioners::plain(PLAIN_PROVISIONER)
            ),
            Selection::NotOurs
        ));
    }

    #[test]
    fn a_class_of_another_installation_is_left_alone() {
        let classes = [
            class("plain", PLAIN_PROVISIONER, true),
            class("team", "gantry.dev/plain-team", false),
        ];
        // The second installation serves only the classes naming its ID...
        assert!(matches!(
            select(&bundle(Some("team")), &classes, &ServedProvisioners::plain("gantry.dev/plain-team")),
            Selection::Serve(c) if c.name_any() == "team"
        ));
        assert!(matches!(
            select(
                &bundle(Some("plain")),
                &classes,
                &ServedProvisioners::plain("gantry.dev/plain-team")
            ),
            Selection::NotOurs
        ));
        assert!(matches!(
            select(
                &bundle(None),
                &classes,
                &ServedProvisioners::plain("gantry.dev/plain-team")
            ),
            Selection::NotOurs
        ));
        // ...and the first leaves those alone.
        assert!(matches!(
            select(
                &bundle(Some("team")),
                &classes,
                &ServedProvisioners::plain(PLAIN_PROVISIONER)
            ),
            Selection::NotOurs
        ));
    }

    #[test]
    fn missing_and_default_classes() {
        let classes = [class("plain", PLAIN_PROVISIONER, false)];
        assert!(matches!(
            select(&bundle(Some("nope")), &classes, &ServedProvisioners::plain(PLAIN_PROVISIONER)),
            Selection::Missing(ClassMissing::ClassNotFound(name)) if name == "nope"
        ));
        assert!(matches!(
            select(
                &bundle(None),
                &classes,
                &ServedProvisioners::plain(PLAIN_PROVISIONER)
            ),
            Selection::Missing(ClassMissing::NoDefaultClass)
        ));
        let classes = [
            class("a", PLAIN_PROVISIONER, false),
            class("d", PLAIN_PROVISIONER, true),
        ];
        assert!(
            matches!(select(&bundle(None), &classes, &ServedProvisioners::plain(PLAIN_PROVISIONER)), Selection::Serve(c) if c.name_any() == "d")
        );
    }

    #[test]
    fn invalid_parameters_are_named() {
        let mut bad = (*class("c", PLAIN_PROVISIONER, false)).clone();
        bad.spec.platform = Some("linux".into());
        assert!(validate(&bad).unwrap_err().contains("spec.platform"));
        let mut bad = (*class("c", PLAIN_PROVISIONER, false)).clone();
        bad.spec.limits = Some(gantry_api::Limits {
            max_objects: Some(0),
            ..Default::default()
        });
        assert!(validate(&bad).unwrap_err().contains("maxObjects"));
    }
}
