//! The tokens the check presents, issued with the TokenRequest API
//! (`POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`): the served account's for the
//! contract's audience (accepted), the same account's for another audience, and another
//! account's for the right audience (both refused).

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use gantry_api::plugin::TOKEN_AUDIENCE;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};

/// The ServiceAccount the check creates beside the served one: a valid identity the plugin
/// must refuse.
pub const CHECK_ACCOUNT: &str = "gantry-plugin-check";

/// Marks the ServiceAccount as made by the check, so that one left by an interrupted run is
/// deleted by the next, and one made by someone else is left alone.
const CHECK_LABEL: &str = "gantry.dev/plugin-check";

/// An audience the plugin must not accept.
pub const OTHER_AUDIENCE: &str = "gantry.dev/not-a-provisioner-plugin";

/// Tokens are asked for the shortest lifetime the API server grants.
const TOKEN_SECONDS: i64 = 600;

/// `NS/NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountName {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for AccountName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl AccountName {
    /// The user name a TokenReview gives the account's tokens.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

/// Parses `--service-account NS/NAME`.
pub fn parse_account(text: &str) -> Result<AccountName, String> {
    let (namespace, name) = text
        .split_once('/')
        .ok_or_else(|| format!("{text:?} is not NAMESPACE/NAME"))?;
    let valid = |part: &str| {
        !part.is_empty()
            && part.len() <= 253
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    if !valid(namespace) || !valid(name) || name.contains('/') {
        return Err(format!(
            "{text:?} is not NAMESPACE/NAME (lower-case Kubernetes names)"
        ));
    }
    Ok(AccountName {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

/// The served account's tokens.
pub struct Tokens {
    /// For the contract's audience.
    pub served: String,
    /// For [`OTHER_AUDIENCE`].
    pub other_audience: String,
}

/// The ServiceAccount [`CHECK_ACCOUNT`], and whether the check deletes it when done.
pub struct CheckAccount {
    accounts: Api<ServiceAccount>,
    namespace: String,
    delete: bool,
}

impl CheckAccount {
    /// Deletes the account if the check made it (this run or an interrupted one).
    pub async fn remove(self) -> anyhow::Result<()> {
        if !self.delete {
            return Ok(());
        }
        match self
            .accounts
            .delete(CHECK_ACCOUNT, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
            Err(e) => Err(e).with_context(|| {
                format!("deleting ServiceAccount {}/{CHECK_ACCOUNT}", self.namespace)
            }),
        }
    }
}

/// A token of `namespace/name` for `audience`.
async fn token(
    accounts: &Api<ServiceAccount>,
    namespace: &str,
    name: &str,
    audience: &str,
) -> anyhow::Result<String> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.to_string()],
            expiration_seconds: Some(TOKEN_SECONDS),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let issued = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| {
            format!(
                "requesting a token of ServiceAccount {namespace}/{name} for the audience {audience}"
            )
        })?;
    match issued.status.map(|s| s.token) {
        Some(token) if !token.is_empty() => Ok(token),
        _ => bail!("the TokenRequest for ServiceAccount {namespace}/{name} returned no token"),
    }
}

/// [`CHECK_ACCOUNT`] in `namespace`: created when missing.
pub async fn check_account(client: &Client, namespace: &str) -> anyhow::Result<CheckAccount> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(CHECK_ACCOUNT.to_string()),
            labels: Some(BTreeMap::from([(
                CHECK_LABEL.to_string(),
                "true".to_string(),
            )])),
            annotations: Some(BTreeMap::from([(
                "kubernetes.io/description".to_string(),
                "Made by `kubectl bundle plugin check` for the duration of a check: a ServiceAccount a plugin must refuse.".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    let delete = match accounts.create(&PostParams::default(), &account).await {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            let existing = accounts
                .get(CHECK_ACCOUNT)
                .await
                .with_context(|| format!("reading ServiceAccount {namespace}/{CHECK_ACCOUNT}"))?;
            existing
                .labels()
                .get(CHECK_LABEL)
                .is_some_and(|v| v == "true")
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("creating ServiceAccount {namespace}/{CHECK_ACCOUNT}"));
        }
    };
    Ok(CheckAccount {
        accounts,
        namespace: namespace.to_string(),
        delete,
    })
}

/// The served account's two tokens: for the contract's audience, and for [`OTHER_AUDIENCE`].
pub async fn served_tokens(client: &Client, served: &AccountName) -> anyhow::Result<Tokens> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &served.namespace);
    let ns = served.namespace.as_str();
    let accepted = token(&accounts, ns, &served.name, TOKEN_AUDIENCE)
        .await
        .with_context(|| format!("--service-account {served}: the account the plugin serves"))?;
    let other_audience = token(&accounts, ns, &served.name, OTHER_AUDIENCE).await?;
    Ok(Tokens {
        served: accepted,
        other_audience,
    })
}

impl CheckAccount {
    /// The account's token for the contract's audience.
    pub async fn token(&self) -> anyhow::Result<String> {
        token(
            &self.accounts,
            &self.namespace,
            CHECK_ACCOUNT,
            TOKEN_AUDIENCE,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_are_namespace_slash_name() {
        let account = parse_account("gantry-system/gantry-provisioner").unwrap();
        assert_eq!(account.namespace, "gantry-system");
        assert_eq!(account.name, "gantry-provisioner");
        assert_eq!(account.to_string(), "gantry-system/gantry-provisioner");
        assert_eq!(
            account.user(),
            "system:serviceaccount:gantry-system:gantry-provisioner"
        );
        for bad in [
            "gantry-provisioner",
            "/name",
            "ns/",
            "ns/a/b",
            "NS/name",
            "ns/-name",
            "ns:name",
        ] {
            assert!(parse_account(bad).is_err(), "{bad}");
        }
    }
}
