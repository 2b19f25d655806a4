//! The objects of a bundle that are not healthy, as its `Healthy` condition lists them (one
//! `- Kind namespace/name: why` line each, after a summary line).

use gantry_api::conditions::types;
use gantry_api::{BundleStatus, Condition};
use gantry_rules::conditions::ConditionStatus;

/// The message a condition shows in the table: for `Healthy`, its summary line (the objects
/// are listed below the table).
pub fn table_message(condition: &Condition) -> &str {
    if condition.type_ == types::HEALTHY {
        condition.message.lines().next().unwrap_or("")
    } else {
        &condition.message
    }
}

/// `Kind namespace/name: why` of each object the `Healthy` condition says is not healthy.
pub fn unhealthy_objects(status: &BundleStatus) -> Vec<&str> {
    status
        .conditions
        .iter()
        .filter(|c| c.type_ == types::HEALTHY && c.status != ConditionStatus::True)
        .flat_map(|c| c.message.lines().skip(1))
        .filter_map(|line| line.strip_prefix("- "))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::testing::condition;

    fn healthy(status: &str, message: &str) -> BundleStatus {
        BundleStatus {
            conditions: vec![condition(
                types::HEALTHY,
                status,
                "HealthCheckFailed",
                message,
                Some(1),
            )],
            ..Default::default()
        }
    }

    #[test]
    fn each_listed_object_is_one_entry() {
        let status = healthy(
            "False",
            "2 of 3 objects not healthy after 60s:\n- Deployment.apps ns/web: Available: 0/1; Pod web-1: container web waiting: ImagePullBackOff\n- Job.batch ns/migrate: Job Failed",
        );
        assert_eq!(
            unhealthy_objects(&status),
            [
                "Deployment.apps ns/web: Available: 0/1; Pod web-1: container web waiting: ImagePullBackOff",
                "Job.batch ns/migrate: Job Failed"
            ]
        );
        assert_eq!(
            table_message(&status.conditions[0]),
            "2 of 3 objects not healthy after 60s:"
        );
        assert!(unhealthy_objects(&healthy("True", "3 objects healthy")).is_empty());
    }
}
