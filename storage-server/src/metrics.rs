//! Prometheus metrics, encoded in the OpenMetrics text format.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: &'static str,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthLabels {
    /// `allowed`, `unauthenticated`, `forbidden` or `error`.
    pub decision: &'static str,
    /// Whether the decision came from the cache.
    pub cached: bool,
}

fn method_label(m: &http::Method) -> &'static str {
    match *m {
        http::Method::GET => "GET",
        http::Method::HEAD => "HEAD",
        http::Method::PUT => "PUT",
        http::Method::DELETE => "DELETE",
        http::Method::POST => "POST",
        _ => "OTHER",
    }
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub received_bytes: Counter,
    pub sent_bytes: Counter,
    pub auth_decisions: Family<AuthLabels, Counter>,
    pub corrupt_tarballs: Counter,
    pub removed_temp_files: Counter,
}

impl Metrics {
    /// `stored_bytes` and `stored_tarballs` are the store's own gauges.
    pub fn new(stored_bytes: Gauge, stored_tarballs: Gauge) -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("gantry_storage"),
            requests: Family::default(),
            received_bytes: Counter::default(),
            sent_bytes: Counter::default(),
            auth_decisions: Family::default(),
            corrupt_tarballs: Counter::default(),
            removed_temp_files: Counter::default(),
        };
        let registry = &mut metrics.registry;
        registry.register(
            "http_requests",
            "HTTP requests answered, by method and status code",
            metrics.requests.clone(),
        );
        registry.register_with_unit(
            "http_received",
            "Request body bytes received",
            Unit::Bytes,
            metrics.received_bytes.clone(),
        );
        registry.register_with_unit(
            "http_sent",
            "Response body bytes sent",
            Unit::Bytes,
            metrics.sent_bytes.clone(),
        );
        registry.register_with_unit(
            "stored",
            "Total size of the stored tarballs",
            Unit::Bytes,
            stored_bytes,
        );
        registry.register(
            "stored_tarballs",
            "Number of stored tarballs",
            stored_tarballs,
        );
        registry.register(
            "auth_decisions",
            "Authentication and authorisation decisions",
            metrics.auth_decisions.clone(),
        );
        registry.register(
            "corrupt_tarballs",
            "Stored tarballs whose content did not match their name, moved to quarantine",
            metrics.corrupt_tarballs.clone(),
        );
        registry.register(
            "removed_temp_files",
            "Temporary files of interrupted uploads removed at start-up",
            metrics.removed_temp_files.clone(),
        );
        metrics
    }

    /// Counts an answered request.
    pub fn count_request(&self, method: &http::Method, status: http::StatusCode) {
        self.requests
            .get_or_create(&RequestLabels {
                method: method_label(method),
                code: status.as_u16(),
            })
            .inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_all_families() {
        let bytes = Gauge::default();
        bytes.set(42);
        let m = Metrics::new(bytes, Gauge::default());
        m.requests
            .get_or_create(&RequestLabels {
                method: "GET",
                code: 200,
            })
            .inc();
        m.auth_decisions
            .get_or_create(&AuthLabels {
                decision: "forbidden",
                cached: true,
            })
            .inc();
        let text = m.encode();
        for want in [
            "gantry_storage_http_requests_total{method=\"GET\",code=\"200\"} 1",
            "gantry_storage_stored_bytes 42",
            "gantry_storage_stored_tarballs 0",
            "gantry_storage_http_received_bytes_total 0",
            "gantry_storage_http_sent_bytes_total 0",
            "gantry_storage_auth_decisions_total{decision=\"forbidden\",cached=\"true\"} 1",
            "gantry_storage_corrupt_tarballs_total 0",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
    }
}
