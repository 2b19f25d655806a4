//! Events (`events.k8s.io/v1`) on bundles, aggregated as client-go's events library does: the
//! same Event (type, reason, action, the object it regards, and its note) seen again within
//! [`SERIES_WINDOW`] is one Event with a growing `series.count`. kube-runtime's `Recorder`
//! leaves the note out of that key, so a new message was counted under an old one
//! ("InstallSucceeded x5" naming a digest no longer installed).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::writes::own_patch;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as KubeEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use serde_json::json;

use crate::cluster::errors::is_not_found;

/// How long an Event is counted on rather than created anew (client-go's is 6 minutes too).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// What makes two Events the same occurrence. The object's resourceVersion is not part of it:
/// every status write changes that.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    warning: bool,
    reason: String,
    action: String,
    regarding: (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
    note: Option<String>,
}

/// The Event a series counts on.
struct Series {
    name: String,
    count: i32,
    last_seen: Instant,
}

/// Publishes Events, counting repeats of the same one.
pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    series: Mutex<HashMap<SeriesKey, Series>>,
}

impl EventRecorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            series: Mutex::new(HashMap::new()),
        }
    }

    /// Records `event` on the object `regarding` refers to: a new Event, or one more
    /// occurrence of the same Event seen within [`SERIES_WINDOW`].
    pub async fn publish(&self, event: &Event, regarding: &ObjectReference) -> kube::Result<()> {
        let key = SeriesKey {
            warning: event.type_ == EventType::Warning,
            reason: event.reason.clone(),
            action: event.action.clone(),
            regarding: (
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ),
            note: event.note.clone(),
        };
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let events: Api<KubeEvent> = Api::namespaced(self.client.clone(), &namespace);
        if let Some((name, count)) = self.repeat(&key) {
            let series = EventSeries {
                count,
                last_observed_time: MicroTime(Timestamp::now()),
            };
            let patch = json!({ "series": series });
            match events
                .patch(&name, &own_patch(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // Expired or deleted meanwhile: start over with a new Event.
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        let created = events
            .create(&PostParams::default(), &self.new_event(event, regarding))
            .await?;
        if let (Ok(mut series), Some(name)) = (self.series.lock(), created.metadata.name) {
            series.insert(
                key,
                Series {
                    name,
                    count: 1,
                    last_seen: Instant::now(),
                },
            );
        }
        Ok(())
    }

    /// The Event `key` repeats, with its next count; forgets series past the window.
    fn repeat(&self, key: &SeriesKey) -> Option<(String, i32)> {
        let mut series = self.series.lock().ok()?;
        series.retain(|_, s| s.last_seen.elapsed() < SERIES_WINDOW);
        let repeated = series.get_mut(key)?;
        repeated.count += 1;
        repeated.last_seen = Instant::now();
        Some((repeated.name.clone(), repeated.count))
    }

    fn new_event(&self, event: &Event, regarding: &ObjectReference) -> KubeEvent {
        let now = Timestamp::now();
        let controller = &self.reporter.controller;
        KubeEvent {
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: event.note.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(controller),
                    now.as_nanosecond()
                )),
                ..Default::default()
            },
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| controller.clone()),
            ),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            related: event.secondary.clone(),
            ..Default::default()
        }
    }
}
