//! The conditions of a status: set and remove (`gantry_rules::conditions` reads them).

use gantry_api::Condition;
use gantry_rules::conditions::ConditionStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Sets condition `type_`, keeping `lastTransitionTime` when the status does not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) {
    let status = ConditionStatus::from(status).to_string();
    let message = message.into();
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status != status {
            existing.last_transition_time = now();
        }
        existing.status = status;
        existing.reason = reason.to_string();
        existing.message = message;
        existing.observed_generation = generation;
        return;
    }
    conditions.push(Condition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time: now(),
    });
}

/// Removes condition `type_`.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

fn now() -> Time {
    Time(Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let mut conditions = Vec::new();
        set_condition(&mut conditions, "X", false, "A", "", None);
        conditions[0].last_transition_time = Time(Timestamp::UNIX_EPOCH);
        set_condition(&mut conditions, "X", false, "B", "other", None);
        assert_eq!(
            conditions[0].last_transition_time,
            Time(Timestamp::UNIX_EPOCH)
        );
        set_condition(&mut conditions, "X", true, "C", "", None);
        assert_ne!(
            conditions[0].last_transition_time,
            Time(Timestamp::UNIX_EPOCH)
        );
    }
}
