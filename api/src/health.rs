//! Health: whether `Ready` waits for a bundle's objects to become healthy, and for how long
//! before `Healthy` turns `False` (`spec.health` of a class, overridden per bundle).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether `Ready` waits for health when nothing says: no, as with Flux's Kustomization
/// (`wait: false`); `Healthy` is reported either way.
pub const DEFAULT_WAIT: bool = false;

/// How long objects may take to become healthy before `Healthy=False` (`HealthCheckFailed`):
/// five minutes, as Flux's HelmRelease and `flux` waits.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// How a bundle's health is awaited. Unset fields take the class's value, then the defaults
/// (`wait: false`, `timeout: 5m`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthPolicy {
    /// When true, `Ready` is true only once every object of the bundle is healthy (kstatus
    /// `Current`); when false, `Ready` means installed and `Healthy` is only reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,

    /// How long objects may take to become healthy after an install (or after turning
    /// unhealthy) before `Healthy=False` with reason `HealthCheckFailed`, as a Go duration
    /// (`90s`, `5m`, `1h30m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub timeout: Option<String>,
}

/// A health rule for one custom kind, in CEL, as Flux's `healthCheckExprs`: each expression
/// is evaluated against the live object, whose top-level fields (`metadata`, `spec`, `status`)
/// are its variables. `inProgress` is tried first, then `failed`, then `current`; none true
/// means in progress. An object whose `status.observedGeneration` lags its
/// `metadata.generation` is in progress before any expression is tried.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckExpr {
    /// The kind's `group/version` (`v1` for the core group), as objects name it.
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,

    /// The kind the rule is for.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,

    /// True when the object is still being worked on (e.g. `status.phase == 'Pending'`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub in_progress: Option<String>,

    /// True when the object has failed: `Healthy` turns `False` at once, naming it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub failed: Option<String>,

    /// True when the object is healthy.
    #[schemars(length(min = 1, max = 4096))]
    pub current: String,
}

/// The rules in force for one bundle: the bundle's, then the class's for kinds the bundle has
/// no rule for.
pub fn effective_health_check_exprs(
    class: &[HealthCheckExpr],
    bundle: &[HealthCheckExpr],
) -> Vec<HealthCheckExpr> {
    let mut rules = bundle.to_vec();
    for rule in class {
        if !bundle
            .iter()
            .any(|b| b.api_version == rule.api_version && b.kind == rule.kind)
        {
            rules.push(rule.clone());
        }
    }
    rules
}

/// The health settings in force for one bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EffectiveHealth {
    pub wait: bool,
    pub timeout: Duration,
}

impl Default for EffectiveHealth {
    fn default() -> Self {
        Self {
            wait: DEFAULT_WAIT,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl EffectiveHealth {
    /// The settings for a bundle: each field of the bundle's policy, else the class's, else the
    /// default. A timeout that does not parse (the schema rejects it) falls back the same way.
    pub fn of(class: Option<&HealthPolicy>, bundle: Option<&HealthPolicy>) -> Self {
        let policies = [bundle, class];
        let wait = policies.iter().flatten().find_map(|p| p.wait);
        let timeout = policies
            .iter()
            .flatten()
            .find_map(|p| p.timeout.as_deref().and_then(parse_duration));
        Self {
            wait: wait.unwrap_or(DEFAULT_WAIT),
            timeout: timeout.unwrap_or(DEFAULT_TIMEOUT),
        }
    }
}

/// Parses a Go duration made of `ms`, `s`, `m` and `h` parts (`1h30m`, `2.5s`); `None` when it
/// is not one.
pub fn parse_duration(text: &str) -> Option<Duration> {
    if text.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let (seconds, unit_len) = if rest.starts_with("ms") {
            (0.001, 2)
        } else if rest.starts_with('s') {
            (1.0, 1)
        } else if rest.starts_with('m') {
            (60.0, 1)
        } else if rest.starts_with('h') {
            (3600.0, 1)
        } else {
            return None;
        };
        total += number * seconds;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2.5s"), Some(Duration::from_millis(2500)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        for bad in ["", "5", "s", "5d", "1.2.3s", "-1s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_bundle_overrides_the_class_field_by_field() {
        let class = HealthPolicy {
            wait: Some(true),
            timeout: Some("10m".into()),
        };
        let bundle = HealthPolicy {
            wait: None,
            timeout: Some("20s".into()),
        };
        assert_eq!(
            EffectiveHealth::of(Some(&class), Some(&bundle)),
            EffectiveHealth {
                wait: true,
                timeout: Duration::from_secs(20)
            }
        );
        assert_eq!(
            EffectiveHealth::of(None, None),
            EffectiveHealth::default(),
            "no policy: the defaults"
        );
        let off = HealthPolicy {
            wait: Some(false),
            timeout: None,
        };
        assert!(!EffectiveHealth::of(Some(&class), Some(&off)).wait);
        assert_eq!(
            EffectiveHealth::of(Some(&class), Some(&off)).timeout,
            Duration::from_secs(600)
        );
    }
}
