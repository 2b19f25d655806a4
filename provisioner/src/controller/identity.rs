//! Whose permissions a bundle's objects are read, applied, pruned and deleted with: the
//! ServiceAccount the bundle or its class names, which the provisioner impersonates. The
//! provisioner's own identity only writes what is its own (Bundle status, Events, Leases,
//! stored content).

use std::collections::HashMap;
use std::sync::Mutex;

use gantry_api::{Bundle, ProvisionerClass, ServiceAccountReference};
use kube::{Client, Config, ResourceExt};

use super::context::Settings;
use super::error::{Error, Result};

/// The ServiceAccount `bundle`'s objects are applied as, `None` for the provisioner's own
/// identity: the bundle's `serviceAccountName` where its class allows it, else the class's
/// `serviceAccount`, else `--default-service-account`. With `--require-service-account`, a
/// bundle none of them names is refused.
pub fn service_account_for(
    bundle: &Bundle,
    class: &ProvisionerClass,
    settings: &Settings,
) -> Result<Option<ServiceAccountReference>> {
    if let Some(name) = &bundle.spec.service_account_name {
        let refused = |why: &str| Error::ServiceAccountNotAllowed {
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
        .or(settings.default_service_account.as_ref())
    {
        return Ok(Some(account.clone()));
    }
    if settings.require_service_account {
        return Err(Error::ServiceAccountRequired {
            class: class.name_any(),
        });
    }
    Ok(None)
}

/// The identity a bundle's objects are handled with, and its client.
#[derive(Clone)]
pub struct Applier {
    /// `None`: the provisioner's own identity.
    pub account: Option<ServiceAccountReference>,
    pub client: Client,
}

impl Applier {
    /// The applier of `bundle` under `class`.
    pub fn of(
        bundle: &Bundle,
        class: &ProvisionerClass,
        settings: &Settings,
        appliers: &Appliers,
    ) -> Result<Self> {
        let account = service_account_for(bundle, class, settings)?;
        Self::as_account(account, appliers)
    }

    /// The applier acting as `account`.
    pub fn as_account(
        account: Option<ServiceAccountReference>,
        appliers: &Appliers,
    ) -> Result<Self> {
        let client = appliers.client(account.as_ref())?;
        Ok(Self { account, client })
    }

    /// How the identity is named in messages.
    pub fn describe(&self) -> String {
        describe(self.account.as_ref())
    }
}

/// How an identity is described in messages.
pub fn describe(account: Option<&ServiceAccountReference>) -> String {
    match account {
        Some(account) => format!("ServiceAccount {account}"),
        None => "the provisioner's own identity".to_string(),
    }
}

/// Kubernetes clients, one per identity: the provisioner's own, and one impersonating each
/// ServiceAccount in use, built on first use and kept.
pub struct Appliers {
    /// The provisioner's own configuration; `None` where only the own client exists (unit
    /// tests with a mock API server).
    config: Option<Config>,
    own: Client,
    impersonating: Mutex<HashMap<ServiceAccountReference, Client>>,
}

impl Appliers {
    pub fn new(config: Option<Config>, own: Client) -> Self {
        Self {
            config,
            own,
            impersonating: Mutex::new(HashMap::new()),
        }
    }

    /// The client acting as `account` (`None`: the provisioner itself).
    pub fn client(&self, account: Option<&ServiceAccountReference>) -> Result<Client> {
        let Some(account) = account else {
            return Ok(self.own.clone());
        };
        let mut clients = self
            .impersonating
            .lock()
            .map_err(|_| Error::Impersonation("the client cache is poisoned".into()))?;
        if let Some(client) = clients.get(account) {
            return Ok(client.clone());
        }
        let Some(config) = &self.config else {
            return Err(Error::Impersonation(format!(
                "no configuration to impersonate {account} with"
            )));
        };
        let mut config = config.clone();
        // The API server adds the ServiceAccount's groups (system:serviceaccounts,
        // system:serviceaccounts:<namespace>, system:authenticated) to an impersonated
        // ServiceAccount user given without groups.
        config.auth_info.impersonate = Some(account.username());
        config.auth_info.impersonate_groups = None;
        let client = Client::try_from(config)
            .map_err(|e| Error::Impersonation(format!("a client for {account}: {e}")))?;
        clients.insert(account.clone(), client.clone());
        Ok(client)
    }
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
        let settings = Settings::default();
        let plain = class(ProvisionerClassSpec::default());
        assert_eq!(
            service_account_for(&bundle(None, None), &plain, &settings).unwrap(),
            None
        );
        let with_default = Settings {
            default_service_account: Some(sa("gantry-system", "gantry-applier")),
            ..Settings::default()
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
            service_account_for(&bundle(Some("own"), Some("app")), &named, &settings).unwrap(),
            Some(sa("app", "own"))
        );
    }

    #[test]
    fn refusals_say_why() {
        let settings = Settings::default();
        let closed = class(ProvisionerClassSpec {
            service_account: Some(sa("team", "deployer")),
            ..Default::default()
        });
        let error =
            service_account_for(&bundle(Some("own"), Some("app")), &closed, &settings).unwrap_err();
        assert!(
            error.to_string().contains("allowBundleServiceAccount"),
            "{error}"
        );
        let open = class(ProvisionerClassSpec {
            allow_bundle_service_account: true,
            ..Default::default()
        });
        let error = service_account_for(&bundle(Some("own"), None), &open, &settings).unwrap_err();
        assert!(error.to_string().contains("installNamespace"), "{error}");

        let required = Settings {
            require_service_account: true,
            ..Settings::default()
        };
        let error = service_account_for(
            &bundle(None, None),
            &class(ProvisionerClassSpec::default()),
            &required,
        )
        .unwrap_err();
        assert_eq!(
            error.reason(),
            gantry_api::conditions::reasons::SERVICE_ACCOUNT_REQUIRED
        );
        assert!(
            service_account_for(&bundle(None, None), &closed, &required)
                .unwrap()
                .is_some()
        );
    }
}
