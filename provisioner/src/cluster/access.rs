//! Access reviews: may an identity do a verb on objects of a kind? Every question the
//! provisioner asks before it acts (the apply's preflight, whether a drift watch may span all
//! namespaces) goes through [`AccessReviews::review`], a SelfSubjectAccessReview made with the
//! identity's own client.
//!
//! Cluster-wide answers ("may this identity create ConfigMaps in every namespace?") are reused
//! for [`ANSWER_TTL`]: thousands of bundles installing into as many namespaces would otherwise
//! ask the same question thousands of times. The reviews only decide whether work may start;
//! the API server still authorizes every request, so an answer made stale by an RBAC change
//! within that time can at worst let an install start that is then refused part way.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SubjectAccessReviewStatus,
};
use kube::Client;
use kube::api::{Api, PostParams};

/// How long a cluster-wide answer is reused.
pub const ANSWER_TTL: Duration = Duration::from_secs(30);
/// Answers kept at most; when full, the cache starts afresh.
const ANSWERS_LIMIT: usize = 4096;

/// What a review asks about: a verb on a kind's resource, in a namespace (`None`: all) and on
/// one name (`None`: any).
#[derive(Clone, Copy, Debug)]
pub struct Question<'a> {
    pub group: &'a str,
    pub version: &'a str,
    /// The resource's plural name.
    pub resource: &'a str,
    pub verb: &'a str,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

impl Question<'_> {
    fn is_cluster_wide(&self) -> bool {
        self.namespace.is_none() && self.name.is_none()
    }
}

/// Identity, API group, resource (plural) and verb of a cluster-wide question.
type Key = (String, String, String, String);

/// Access reviews with the cache of cluster-wide answers.
#[derive(Default)]
pub struct AccessReviews {
    answers: Mutex<HashMap<Key, (bool, Instant)>>,
}

impl AccessReviews {
    /// Asks whether `identity` (the user of `client`, named as in messages) may do what
    /// `question` says; a cluster-wide question is answered from a recent answer when there is
    /// one.
    pub async fn review(
        &self,
        client: &Client,
        identity: &str,
        question: &Question<'_>,
    ) -> kube::Result<SubjectAccessReviewStatus> {
        let key = question.is_cluster_wide().then(|| {
            (
                identity.to_string(),
                question.group.to_string(),
                question.resource.to_string(),
                question.verb.to_string(),
            )
        });
        if let Some(allowed) = key.as_ref().and_then(|key| self.get(key)) {
            return Ok(SubjectAccessReviewStatus {
                allowed,
                ..Default::default()
            });
        }
        let status = ask(client, question).await?;
        if let Some(key) = key {
            self.record(key, status.allowed);
        }
        Ok(status)
    }

    fn get(&self, key: &Key) -> Option<bool> {
        let answers = self.answers.lock().ok()?;
        answers
            .get(key)
            .filter(|(_, at)| at.elapsed() < ANSWER_TTL)
            .map(|(allowed, _)| *allowed)
    }

    fn record(&self, key: Key, allowed: bool) {
        if let Ok(mut answers) = self.answers.lock() {
            if answers.len() >= ANSWERS_LIMIT {
                answers.clear();
            }
            answers.insert(key, (allowed, Instant::now()));
        }
    }
}

/// One SelfSubjectAccessReview.
async fn ask(client: &Client, question: &Question<'_>) -> kube::Result<SubjectAccessReviewStatus> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(question.group.to_string()),
                version: Some(question.version.to_string()),
                resource: Some(question.resource.to_string()),
                namespace: question.namespace.map(str::to_string),
                name: question.name.map(str::to_string),
                verb: Some(question.verb.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = reviews.create(&PostParams::default(), &review).await?;
    Ok(answer.status.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_wide_answers_are_kept_per_question_for_a_while() {
        let reviews = AccessReviews::default();
        let key = |verb: &str| {
            (
                "ServiceAccount a/b".to_string(),
                String::new(),
                "configmaps".to_string(),
                verb.to_string(),
            )
        };
        assert_eq!(reviews.get(&key("create")), None);
        reviews.record(key("create"), true);
        reviews.record(key("patch"), false);
        assert_eq!(reviews.get(&key("create")), Some(true));
        assert_eq!(reviews.get(&key("patch")), Some(false));
        assert_eq!(reviews.get(&key("delete")), None);
        if let Ok(mut answers) = reviews.answers.lock() {
            for (_, at) in answers.values_mut() {
                *at -= ANSWER_TTL;
            }
        }
        assert_eq!(reviews.get(&key("create")), None, "expired");
    }

    #[test]
    fn only_questions_about_every_namespace_and_any_name_are_cluster_wide() {
        let question = Question {
            group: "",
            version: "v1",
            resource: "configmaps",
            verb: "create",
            namespace: None,
            name: None,
        };
        assert!(question.is_cluster_wide());
        assert!(
            !Question {
                namespace: Some("team"),
                ..question
            }
            .is_cluster_wide()
        );
        assert!(
            !Question {
                name: Some("a"),
                ..question
            }
            .is_cluster_wide()
        );
    }
}
