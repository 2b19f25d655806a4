//! Bearer-token authentication with `TokenReview` and authorisation with
//! `SubjectAccessReview` on the non-resource URL path, both cached briefly so
//! that a burst of requests costs the API server one review each.

use std::collections::HashMap;
use std::hash::Hash;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use sha2::{Digest as _, Sha256};
use thiserror::Error;

/// Upper bound on cached entries per cache; reaching it drops expired ones first.
const MAX_CACHE_ENTRIES: usize = 10_000;

#[derive(Debug, Error)]
pub enum ClientError {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no in-cluster configuration or kubeconfig found (use --kubeconfig): {0}")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("building the Kubernetes client: {0}")]
    Build(#[source] kube::Error),
}

/// A client for the reviews: from `kubeconfig`, else in-cluster or `$KUBECONFIG`.
pub async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let err = |source| ClientError::Kubeconfig {
                path: path.to_owned(),
                source,
            };
            let kc = Kubeconfig::read_from(path).map_err(err)?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(err)?
        }
        None => kube::Config::infer().await.map_err(ClientError::Infer)?,
    };
    kube::Client::try_from(config).map_err(ClientError::Build)
}

#[derive(Debug, Error)]
pub enum AuthError {
    #[error("TokenReview failed: {0}")]
    TokenReview(#[source] kube::Error),
    #[error("SubjectAccessReview failed: {0}")]
    SubjectAccessReview(#[source] kube::Error),
}

/// The outcome of checking one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allowed {
        user: String,
    },
    /// 401: no token, or a token the API server does not accept.
    Unauthenticated {
        reason: String,
    },
    /// 403: a valid token whose user lacks the permission.
    Forbidden {
        user: String,
        reason: String,
    },
}

impl Decision {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Allowed { .. } => "allowed",
            Self::Unauthenticated { .. } => "unauthenticated",
            Self::Forbidden { .. } => "forbidden",
        }
    }
}

#[derive(Debug, Clone)]
enum TokenOutcome {
    Valid(UserInfo),
    Invalid(String),
}

struct TtlCache<K, V> {
    ttl: Duration,
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::default(),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }

    fn insert(&self, key: K, value: V) {
        self.insert_at(key, value, Instant::now());
    }

    fn insert_at(&self, key: K, value: V, at: Instant) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_CACHE_ENTRIES {
            entries.retain(|_, (at, _)| at.elapsed() < self.ttl);
            if entries.len() >= MAX_CACHE_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (at, value));
    }
}

/// Tokens are cached by their hash, never in clear.
type TokenKey = [u8; 32];

pub struct Authorizer {
    client: kube::Client,
    audiences: Vec<String>,
    tokens: TtlCache<TokenKey, TokenOutcome>,
    decisions: TtlCache<(TokenKey, String, &'static str), Decision>,
}

impl Authorizer {
    /// `audiences` are passed to `TokenReview` (empty: the API server's own).
    pub fn new(client: kube::Client, ttl: Duration, audiences: Vec<String>) -> Self {
        Self {
            client,
            audiences,
            tokens: TtlCache::new(ttl),
            decisions: TtlCache::new(ttl),
        }
    }

    /// The decision for the bearer `token` using `verb` on `path` when it needs no review:
    /// a missing token, or a decision still in the cache. Returns the decision and whether it
    /// came from the cache; `None` when the API server must be asked ([`Authorizer::check`]).
    pub fn decided(
        &self,
        token: Option<&str>,
        path: &str,
        verb: &'static str,
    ) -> Option<(Decision, bool)> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Some((
                Decision::Unauthenticated {
                    reason: "no bearer token".into(),
                },
                false,
            ));
        };
        let key: TokenKey = Sha256::digest(token.as_bytes()).into();
        self.decisions
            .get(&(key, path.to_owned(), verb))
            .map(|d| (d, true))
    }

    /// Checks whether the bearer `token` may use `verb` on `path`, asking the API server
    /// unless [`Authorizer::decided`] knows. Returns the decision and whether it came from
    /// the cache.
    pub async fn check(
        &self,
        token: Option<&str>,
        path: &str,
        verb: &'static str,
    ) -> Result<(Decision, bool), AuthError> {
        if let Some(known) = self.decided(token, path, verb) {
            return Ok(known);
        }
        // `decided` answers for a missing or empty token.
        let token = token.unwrap_or_default();
        let key: TokenKey = Sha256::digest(token.as_bytes()).into();
        let decision_key = (key, path.to_owned(), verb);
        let user = match self.review_token(key, token).await? {
            TokenOutcome::Valid(user) => user,
            TokenOutcome::Invalid(reason) => {
                let d = Decision::Unauthenticated { reason };
                self.decisions.insert(decision_key, d.clone());
                return Ok((d, false));
            }
        };
        let d = self.review_access(user, path, verb).await?;
        self.decisions.insert(decision_key, d.clone());
        Ok((d, false))
    }

    async fn review_token(&self, key: TokenKey, token: &str) -> Result<TokenOutcome, AuthError> {
        if let Some(outcome) = self.tokens.get(&key) {
            return Ok(outcome);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..Default::default()
        };
        let review = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(AuthError::TokenReview)?;
        let status = review.status.unwrap_or_default();
        let outcome = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => TokenOutcome::Valid(user),
            _ => TokenOutcome::Invalid(
                status
                    .error
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| "token not accepted".into()),
            ),
        };
        self.tokens.insert(key, outcome.clone());
        Ok(outcome)
    }

    async fn review_access(
        &self,
        user: UserInfo,
        path: &str,
        verb: &'static str,
    ) -> Result<Decision, AuthError> {
        let username = user.username.unwrap_or_default();
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(username.clone()),
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some(verb.to_owned()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let review = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(AuthError::SubjectAccessReview)?;
        let status = review.status.unwrap_or_default();
        if status.allowed && !status.denied.unwrap_or(false) {
            Ok(Decision::Allowed { user: username })
        } else {
            let reason = status
                .reason
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "no RBAC rule allows it".into());
            Ok(Decision::Forbidden {
                user: username,
                reason,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_cache_expires_and_stays_bounded() {
        let cache = TtlCache::new(Duration::from_secs(60));
        cache.insert(1u32, "a");
        assert_eq!(cache.get(&1), Some("a"));
        assert_eq!(cache.get(&2), None);
        for i in 0..(MAX_CACHE_ENTRIES as u32 + 10) {
            cache.insert(i, "b");
        }
        assert!(cache.entries.lock().unwrap().len() <= MAX_CACHE_ENTRIES);

        let old = Instant::now() - Duration::from_secs(120);
        cache.insert_at(7, "old", old);
        assert_eq!(cache.get(&7), None);

        let off = TtlCache::new(Duration::ZERO);
        off.insert(1u32, "a");
        assert_eq!(off.get(&1), None);
    }
}
