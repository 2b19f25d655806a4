//! Per-bundle timing: `spec.interval`, `spec.retryInterval` and `spec.timeout` override the
//! provisioner's `--resolve-interval`, `--backoff-cap` and `--apply-timeout` for one bundle.
//! The CRD's schema admits only Go durations of at least one second; a value that does not
//! parse (a bundle stored under an older schema) falls back to the flag.

use std::time::Duration;

use gantry_api::Bundle;
use gantry_rules::duration;

use crate::state::Settings;

fn parsed(value: Option<&String>) -> Option<Duration> {
    value
        .and_then(|text| duration::parse(text).ok())
        .filter(|d| *d >= Duration::from_secs(1))
}

/// How often the bundle's tag is resolved again.
pub(super) fn resolve_interval(bundle: &Bundle, settings: &Settings) -> Duration {
    parsed(bundle.spec.interval.as_ref()).unwrap_or(settings.resolve_interval)
}

/// The bundle's own longest wait between retries after failures, if it sets one (the
/// backoff applies `--backoff-cap` otherwise).
pub(super) fn retry_ceiling(bundle: &Bundle) -> Option<Duration> {
    parsed(bundle.spec.retry_interval.as_ref())
}

/// How long applying the objects may take.
pub(super) fn apply_timeout(bundle: &Bundle, settings: &Settings) -> Duration {
    parsed(bundle.spec.timeout.as_ref()).unwrap_or(settings.apply_timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::BundleSpec;

    #[test]
    fn a_bundle_value_overrides_the_flag_and_a_bad_one_falls_back() {
        let settings = Settings::default();
        let mut bundle = Bundle::new("b", BundleSpec::default());
        assert_eq!(
            resolve_interval(&bundle, &settings),
            settings.resolve_interval
        );
        bundle.spec.interval = Some("2s".into());
        bundle.spec.retry_interval = Some("1m30s".into());
        bundle.spec.timeout = Some("45s".into());
        assert_eq!(resolve_interval(&bundle, &settings), Duration::from_secs(2));
        assert_eq!(retry_ceiling(&bundle), Some(Duration::from_secs(90)));
        assert_eq!(apply_timeout(&bundle, &settings), Duration::from_secs(45));
        for bad in ["0s", "5x", "", "100ms"] {
            bundle.spec.interval = Some(bad.into());
            assert_eq!(
                resolve_interval(&bundle, &settings),
                settings.resolve_interval,
                "{bad}"
            );
        }
    }
}
