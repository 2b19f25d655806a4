//! The Jobs of a wave of rendered content (docs/plugins.md): the next wave is applied once
//! every Job of the wave before it completed. A Job that failed, or did not complete within its
//! time, stops the apply. Nothing waits here: the pass that finds a Job running ends, saying
//! which, and the next pass (woken by the Job's change, or looking again shortly) goes on.

use std::time::Duration;

use futures::future::try_join_all;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use serde_json::Value;

use crate::cluster::discovery::object_api;
use crate::cluster::errors::{api_message, is_forbidden, is_not_found};
use crate::cluster::preflight::forbidden;
use crate::error::{Error, Result};
use gantry_rules::duration::GoDuration;
use gantry_rules::plan::PlannedObject;

/// How soon a pass that found a Job of a wave running looks again when no change of the Job
/// wakes it sooner (the drift watch on the bundle's Jobs normally does).
pub const LOOK_AGAIN: Duration = Duration::from_secs(10);

/// How many running Jobs a waiting message names.
const NAMED: usize = 5;

/// What a Job's conditions say of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// `Complete=True`.
    Complete,
    /// `Failed=True`: the condition's reason and message.
    Failed(String),
    /// Neither, yet.
    Running,
}

/// What the status of a Job (`job`, the live object) says of it.
pub fn state(job: &Value) -> JobState {
    let conditions = job
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let holds = |type_: &str| {
        conditions.iter().find(|c| {
            c.get("type").and_then(Value::as_str) == Some(type_)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    };
    if let Some(failed) = holds("Failed") {
        let text = |key: &str| {
            failed
                .get(key)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
        };
        let said = match (text("reason"), text("message")) {
            (Some(reason), Some(message)) => format!("{reason}: {message}"),
            (Some(said), None) | (None, Some(said)) => said.to_string(),
            (None, None) => "its condition Failed is True".to_string(),
        };
        return JobState::Failed(said);
    }
    if holds("Complete").is_some() {
        return JobState::Complete;
    }
    JobState::Running
}

/// The Jobs of a wave the next one waits for.
#[derive(Clone, Debug, PartialEq)]
pub struct Waiting {
    /// The Jobs not complete yet, `namespace/name`, in the plan's order.
    pub jobs: Vec<String>,
    /// Their wave, and the wave that waits for them.
    pub wave: u32,
    pub next_wave: Option<u32>,
    /// How long each Job may take from its creation.
    pub timeout: Duration,
    /// How long until the first of them runs out of time.
    pub due_in: Duration,
}

impl Waiting {
    /// What the `Installed` condition says while the next wave waits.
    pub fn message(&self) -> String {
        let mut named: Vec<&str> = self.jobs.iter().take(NAMED).map(String::as_str).collect();
        let more = format!("and {} more", self.jobs.len().saturating_sub(NAMED));
        if self.jobs.len() > NAMED {
            named.push(&more);
        }
        let jobs = match self.jobs.len() {
            1 => format!("Job {}", named.join(", ")),
            _ => format!("Jobs {}", named.join(", ")),
        };
        let next = match self.next_wave {
            Some(next) => format!("wave {next}"),
            None => "the next wave".to_string(),
        };
        format!(
            "waiting for {jobs} of wave {} to complete before {next} is applied (a Job has {} from its creation: spec.health.timeout)",
            self.wave,
            GoDuration(self.timeout)
        )
    }

    /// When the pass that found the Jobs running comes back, at the latest: shortly, or just
    /// after the first of them runs out of time.
    pub fn look_again(&self) -> Duration {
        LOOK_AGAIN.min(self.due_in + Duration::from_millis(100))
    }
}

/// `namespace/name` of a Job of the plan.
fn job_name(object: &PlannedObject) -> String {
    match &object.namespace {
        Some(namespace) => format!("{namespace}/{}", object.name),
        None => object.name.clone(),
    }
}

/// Reads every Job among `objects` (one wave of rendered content, `wave`, just applied):
/// `None` when each completed; what the next wave (`next_wave`) waits for when some are still
/// running, each within `timeout` of its creation; `WaveJobFailed` when one failed or ran out
/// of time.
pub async fn wave_jobs(
    client: &Client,
    objects: &[PlannedObject],
    wave: u32,
    next_wave: Option<u32>,
    identity: &str,
    timeout: Duration,
) -> Result<Option<Waiting>> {
    let reads = objects
        .iter()
        .filter(|o| o.is_job())
        .map(|object| async move {
            let failed = |error: kube::Error| {
                if is_forbidden(&error) {
                    return forbidden(object, identity, &error);
                }
                Error::Apply {
                    object: object.to_string(),
                    message: format!(
                        "reading it to know whether it completed: {}",
                        api_message(&error)
                    ),
                }
            };
            let live = match object_api(client, object).get(&object.name).await {
                Ok(live) => live,
                // Deleted since it was applied: the next pass creates it again.
                Err(error) if is_not_found(&error) => return Ok((object, None)),
                Err(error) => return Err(failed(error)),
            };
            let age = live.metadata.creation_timestamp.as_ref().map(|created| {
                Duration::try_from(Timestamp::now().duration_since(created.0)).unwrap_or_default()
            });
            let state = state(&serde_json::to_value(&live).unwrap_or(Value::Null));
            Ok((object, Some((state, age.unwrap_or_default()))))
        });
    let mut jobs = Vec::new();
    let mut due_in = timeout;
    for (object, read) in try_join_all(reads).await? {
        let job = format!("Job {}", job_name(object));
        match read {
            Some((JobState::Complete, _)) => continue,
            Some((JobState::Failed(said), _)) => {
                return Err(Error::WaveJobFailed {
                    job,
                    wave,
                    what: format!("failed: {said}"),
                });
            }
            Some((JobState::Running, age)) if age >= timeout => {
                return Err(Error::WaveJobFailed {
                    job,
                    wave,
                    what: format!(
                        "did not complete within {} of its creation (spec.health.timeout)",
                        GoDuration(timeout)
                    ),
                });
            }
            Some((JobState::Running, age)) => due_in = due_in.min(timeout - age),
            None => {}
        }
        jobs.push(job_name(object));
    }
    Ok((!jobs.is_empty()).then_some(Waiting {
        jobs,
        wave,
        next_wave,
        timeout,
        due_in,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(conditions: Value) -> Value {
        json!({ "status": { "conditions": conditions } })
    }

    #[test]
    fn a_job_is_complete_or_failed_only_by_its_true_conditions() {
        assert_eq!(state(&json!({})), JobState::Running);
        assert_eq!(state(&job(json!([]))), JobState::Running);
        assert_eq!(
            state(&job(json!([{ "type": "Complete", "status": "False" }]))),
            JobState::Running
        );
        assert_eq!(
            state(&job(json!([
                { "type": "SuccessCriteriaMet", "status": "True" },
                { "type": "Complete", "status": "True" },
            ]))),
            JobState::Complete
        );
        assert_eq!(
            state(&job(json!([
                { "type": "FailureTarget", "status": "True" },
                { "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                  "message": "Job has reached the specified backoff limit" },
            ]))),
            JobState::Failed(
                "BackoffLimitExceeded: Job has reached the specified backoff limit".into()
            )
        );
        assert_eq!(
            state(&job(json!([{ "type": "Failed", "status": "True" }]))),
            JobState::Failed("its condition Failed is True".into())
        );
        // Failed wins over Complete, as kstatus reads a Job.
        assert!(matches!(
            state(&job(json!([
                { "type": "Complete", "status": "True" },
                { "type": "Failed", "status": "True", "reason": "DeadlineExceeded" },
            ]))),
            JobState::Failed(said) if said == "DeadlineExceeded"
        ));
    }

    #[test]
    fn the_waiting_message_names_the_jobs_their_wave_and_the_next() {
        let mut waiting = Waiting {
            jobs: vec!["app/migrate".into()],
            wave: 1,
            next_wave: Some(2),
            timeout: Duration::from_secs(300),
            due_in: Duration::from_secs(3),
        };
        assert_eq!(
            waiting.message(),
            "waiting for Job app/migrate of wave 1 to complete before wave 2 is applied (a Job has 5m from its creation: spec.health.timeout)"
        );
        assert_eq!(waiting.look_again(), Duration::from_millis(3100));
        waiting.due_in = Duration::from_secs(200);
        assert_eq!(waiting.look_again(), LOOK_AGAIN);
        waiting.jobs = (0..7).map(|i| format!("app/j{i}")).collect();
        assert!(
            waiting.message().starts_with(
                "waiting for Jobs app/j0, app/j1, app/j2, app/j3, app/j4, and 2 more of wave 1"
            ),
            "{}",
            waiting.message()
        );
    }
}
