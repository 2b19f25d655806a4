//! Whose identity a bundle's objects are applied with: the ServiceAccount the bundle or its
//! class names, else the provisioner's default, else the provisioner's own identity (unless a
//! ServiceAccount is required).

use gantry_api::{Bundle, ProvisionerClass, ServiceAccountReference};
use kube_core::ResourceExt;

/// Why a bundle may not be applied with the identity it would get.
#[derive(Debug, thiserror::Error)]
pub enum ServiceAccountRefused {
    #[error(
        "the provisioner requires a ServiceAccount (--require-service-account), and neither the bundle nor ProvisionerClass {class} names one"
    )]
    Required { class: String },

    #[error("spec.serviceAccountName {name} is not allowed by ProvisionerClass {class}: {why}")]
    NotAllowed {
        name: String,
        class: String,
        why: String,
    },
}

/// The provisioner's settings for bundles whose class names no ServiceAccount.
#[derive(Clone, Debug, Default)]
pub struct ServiceAccountDefaults {
    /// The ServiceAccount bundles are applied as when neither they nor their class name one
    /// (`--default-service-account`).
    pub default: Option<ServiceAccountReference>,
    /// Refuse bundles that would be applied with the provisioner's own identity
    /// (`--require-service-account`).
    pub required: bool,
}

/// The ServiceAccount `bundle`'s objects are applied as, `None` for the provisioner's own
/// identity: the bundle's `serviceAccountName` where its class allows it, else the class's
/// `serviceAccount`, else `--default-service-account`. With `--require-service-account`, a
/// bundle none of them names is refused.
pub fn service_account_for(
    bundle: &Bundle,
    class: &ProvisionerClass,
    defaults: &ServiceAccountDefaults,
) -> Result<Option<ServiceAccountReference>, ServiceAccountRefused> {
    if let Some(name) = &bundle.spec.service_account_name {
        let refused = |why: &str| ServiceAccountRefused::NotAllowed {
            name: name.clone(),
            class: class.name_any(),
            why: why.to_string(),
        };
        if !class.spec.allow_bundle_service_account {
            return Err(refused("the class does not set allowBundleServiceAccount"));
        }
        let Some(namespace) = &bundle.spec.install_namespace else {
            return Err(refused(
                "the bundle sets no installNamespace to find the ServiceAccount in",
            ));
        };
        return Ok(Some(ServiceAccountReference {
            namespace: namespace.clone(),
            name: name.clone(),
        }));
    }
    if let Some(account) = class
        .spec
        .service_account
        .as_ref()
        .or(defaults.default.as_ref())
    {
        return Ok(Some(account.clone()));
    }
    if defaults.required {
        return Err(ServiceAccountRefused::Required {
            class: class.name_any(),
        });
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::{BundleSpec, ProvisionerClassSpec};

    fn class(spec: ProvisionerClassSpec) -> ProvisionerClass {
        ProvisionerClass::new("c", spec)
    }

    fn bundle(service_account: Option<&str>, namespace: Option<&str>) -> Bundle {
        Bundle::new(
            "b",
            BundleSpec {
                image: "registry.test/app:v1".into(),
                install_namespace: namespace.map(Into::into),
                service_account_name: service_account.map(Into::into),
                ..Default::default()
            },
        )
    }

    fn sa(namespace: &str, name: &str) -> ServiceAccountReference {
        ServiceAccountReference {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn the_bundle_the_class_the_default_then_the_provisioner() {
        let defaults = ServiceAccountDefaults::default();
        let plain = class(ProvisionerClassSpec::default());
        assert_eq!(
            service_account_for(&bundle(None, None), &plain, &defaults).unwrap(),
            None
        );
        let with_default = ServiceAccountDefaults {
            default: Some(sa("gantry-system", "gantry-applier")),
            ..Default::default()
        };
        assert_eq!(
            service_account_for(&bundle(None, None), &plain, &with_default).unwrap(),
            Some(sa("gantry-system", "gantry-applier"))
        );
        let named = class(ProvisionerClassSpec {
            service_account: Some(sa("team", "deployer")),
            allow_bundle_service_account: true,
            ..Default::default()
        });
        assert_eq!(
            service_account_for(&bundle(None, None), &named, &with_default).unwrap(),
            Some(sa("team", "deployer"))
        );
        assert_eq!(
            service_account_for(&bundle(Some("own"), Some("app")), &named, &defaults).unwrap(),
            Some(sa("app", "own"))
        );
    }

    #[test]
    fn refusals_say_why() {
        let defaults = ServiceAccountDefaults::default();
        let closed = class(ProvisionerClassSpec {
            service_account: Some(sa("team", "deployer")),
            ..Default::default()
        });
        let error =
            service_account_for(&bundle(Some("own"), Some("app")), &closed, &defaults).unwrap_err();
        assert!(
            error.to_string().contains("allowBundleServiceAccount"),
            "{error}"
        );
        let open = class(ProvisionerClassSpec {
            allow_bundle_service_account: true,
            ..Default::default()
        });
        let error = service_account_for(&bundle(Some("own"), None), &open, &defaults).unwrap_err();
        assert!(error.to_string().contains("installNamespace"), "{error}");

        let required = ServiceAccountDefaults {
            required: true,
            ..Default::default()
        };
        let error = service_account_for(
            &bundle(None, None),
            &class(ProvisionerClassSpec::default()),
            &required,
        )
        .unwrap_err();
        assert!(
            matches!(error, ServiceAccountRefused::Required { .. }),
            "{error}"
        );
        assert!(
            service_account_for(&bundle(None, None), &closed, &required)
                .unwrap()
                .is_some()
        );
    }
}
