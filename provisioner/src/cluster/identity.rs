//! Whose permissions a bundle's objects are read, applied, pruned and deleted with: the
//! ServiceAccount the bundle or its class names, which the provisioner impersonates. The
//! provisioner's own identity only writes what is its own (Bundle status, Events, Leases,
//! stored content).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gantry_api::{Bundle, ProvisionerClass, ServiceAccountReference};
use kube::{Client, Config};

use crate::error::{Error, Result};
use gantry_rules::identity::{ServiceAccountDefaults, service_account_for};

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
        defaults: &ServiceAccountDefaults,
        appliers: &Appliers,
    ) -> Result<Self> {
        let account = service_account_for(bundle, class, defaults)?;
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
    /// How every client is built here (a replica's puts its fence and User-Agent on it);
    /// `None`: kube's own.
    build: Option<BuildClient>,
}

/// Builds a client for a configuration.
pub type BuildClient = Arc<dyn Fn(Config) -> kube::Result<Client> + Send + Sync>;

impl Appliers {
    pub fn new(config: Option<Config>, own: Client) -> Self {
        Self {
            config,
            own,
            impersonating: Mutex::new(HashMap::new()),
            build: None,
        }
    }

    /// Clients from now on are built by `build` (the own client already was).
    pub fn with_build(mut self, build: BuildClient) -> Self {
        self.build = Some(build);
        self
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
        let client = match &self.build {
            Some(build) => build(config),
            None => Client::try_from(config),
        }
        .map_err(|e| Error::Impersonation(format!("a client for {account}: {e}")))?;
        clients.insert(account.clone(), client.clone());
        Ok(client)
    }
}
