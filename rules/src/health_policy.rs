//! The health settings in force for one bundle: its `spec.health` over its class's, field by
//! field, over the defaults.

use std::time::Duration;

use gantry_api::HealthPolicy;

use crate::duration::GoDuration;

/// Whether `Ready` waits for health when nothing says: no, as with Flux's Kustomization
/// (`wait: false`); `Healthy` is reported either way.
pub const DEFAULT_WAIT: bool = false;

/// How long objects may take to become healthy before `Healthy=False` (`HealthCheckFailed`):
/// five minutes, as Flux's HelmRelease and `flux` waits.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

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
        let timeout = policies.iter().flatten().find_map(|p| {
            let timeout = p.timeout.as_deref()?.parse::<GoDuration>().ok()?;
            Some(timeout.0)
        });
        Self {
            wait: wait.unwrap_or(DEFAULT_WAIT),
            timeout: timeout.unwrap_or(DEFAULT_TIMEOUT),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
