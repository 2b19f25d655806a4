//! Reading conditions: a condition's `status` as a type, and conditions found by type.

use std::fmt;

use gantry_api::Condition;

/// A condition's `status`. Kubernetes writes `True`, `False` or `Unknown`; any other text reads
/// as `Unknown`, as does a condition that is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

impl From<&str> for ConditionStatus {
    fn from(text: &str) -> Self {
        match text {
            "True" => Self::True,
            "False" => Self::False,
            _ => Self::Unknown,
        }
    }
}

impl From<&Condition> for ConditionStatus {
    fn from(condition: &Condition) -> Self {
        condition.status.as_str().into()
    }
}

impl From<bool> for ConditionStatus {
    fn from(status: bool) -> Self {
        if status { Self::True } else { Self::False }
    }
}

/// `condition.status == ConditionStatus::True`: the text compared as the status it reads as.
impl PartialEq<ConditionStatus> for String {
    fn eq(&self, status: &ConditionStatus) -> bool {
        ConditionStatus::from(self.as_str()) == *status
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        out.write_str(self.as_str())
    }
}

/// Condition `type_`, if there is one.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The status of condition `type_`; `Unknown` when there is none.
pub fn status(conditions: &[Condition], type_: &str) -> ConditionStatus {
    find(conditions, type_).map_or(ConditionStatus::Unknown, ConditionStatus::from)
}

/// Whether condition `type_` is `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    status(conditions, type_) == ConditionStatus::True
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn condition(type_: &str, status: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: String::new(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn a_status_reads_as_written_and_anything_else_is_unknown() {
        for status in [
            ConditionStatus::True,
            ConditionStatus::False,
            ConditionStatus::Unknown,
        ] {
            assert_eq!(ConditionStatus::from(status.to_string().as_str()), status);
        }
        for other in ["true", "", "Yes"] {
            assert_eq!(
                ConditionStatus::from(other),
                ConditionStatus::Unknown,
                "{other:?}"
            );
        }
        assert_eq!(ConditionStatus::from(true).as_str(), "True");
        assert_eq!(ConditionStatus::from(false).as_str(), "False");
        assert!("True".to_string() == ConditionStatus::True);
        assert!("Yes".to_string() == ConditionStatus::Unknown);
        assert!("False".to_string() != ConditionStatus::True);
    }

    #[test]
    fn conditions_are_found_by_type() {
        let conditions = [condition("Ready", "True"), condition("Healthy", "False")];
        assert_eq!(find(&conditions, "Healthy"), Some(&conditions[1]));
        assert_eq!(find(&conditions, "Installed"), None);
        assert_eq!(status(&conditions, "Healthy"), ConditionStatus::False);
        assert_eq!(status(&conditions, "Installed"), ConditionStatus::Unknown);
        assert!(is_true(&conditions, "Ready"));
        assert!(!is_true(&conditions, "Healthy"));
        assert!(!is_true(&conditions, "Installed"));
    }
}
