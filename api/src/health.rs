//! Health: whether `Ready` waits for a bundle's objects to become healthy, and for how long
//! before `Healthy` turns `False` (`spec.health` of a class, overridden per bundle).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
