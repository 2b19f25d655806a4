//! Conditions, the summary (`Ready`, `phase`) derived from them ([`summary`], the only place
//! that decides `Ready`), and the status writes and Events that report them.

pub mod history;
pub mod summary;

pub use history::record_history;
pub use summary::{Facts, Hold, summarize};

use gantry_api::conditions::{ReasonKind, reasons, types};
use gantry_api::{
    Bundle, BundleStatus, Condition, FIELD_MANAGER, ProvisionerClass, ProvisionerClassStatus,
    UNINSTALL_FINALIZER,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::cluster::errors::is_not_found;
use crate::error::Result;
use crate::state::Context;

pub use crate::policy::objects;

/// Sets condition `type_`, keeping `lastTransitionTime` when the status does not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" }.to_string();
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

/// Finds condition `type_`.
pub fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether condition `type_` is True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    condition(conditions, type_).is_some_and(|c| c.status == "True")
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// The longest `status.message`, in characters.
const SHORT_MESSAGE_CHARS: usize = 100;

/// Sets `status.message`, the `Ready` message in one short line for `kubectl get`.
pub fn set_short_message(status: &mut BundleStatus) {
    status.message = condition(&status.conditions, types::READY)
        .map(|c| short_message(&c.message))
        .filter(|m| !m.is_empty());
}

/// A message in one short line: its first line, without the retry note, image references
/// shortened to their last path segment (`name:tag`, `name@sha256:` and 12 hex digits),
/// other digests to 12 hex digits, and at most [`SHORT_MESSAGE_CHARS`] characters.
pub fn short_message(message: &str) -> String {
    let mut line = message.lines().next().unwrap_or_default().trim_end();
    // "... (attempt N, next retry in Xs)", added to failures.
    if line.ends_with(')')
        && let Some(at) = line.rfind(" (attempt ")
    {
        line = &line[..at];
    }
    let shortened: Vec<String> = line.split(' ').map(short_word).collect();
    let text = shortened.join(" ");
    if text.chars().count() <= SHORT_MESSAGE_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(SHORT_MESSAGE_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// One word of a message, shortened if it is an image reference or a digest; punctuation
/// around it stays.
fn short_word(word: &str) -> String {
    let trimmed = word.trim_start_matches(['(', '"']);
    let core = trimmed.trim_end_matches([':', ',', ';', ')', '.', '"']);
    if core.is_empty() {
        return word.to_string();
    }
    let start = word.len() - trimmed.len();
    let (before, after) = (&word[..start], &word[start + core.len()..]);
    let short = match core.split_once('/') {
        // `host[:port]/path/name:tag` or `...@sha256:...`, not a URL.
        Some((host, _))
            if !core.contains("://")
                && (host.contains('.') || host.contains(':') || host == "localhost") =>
        {
            let last = core.rsplit('/').next().unwrap_or(core);
            if last.contains(':') || last.contains('@') {
                short_digest(last)
            } else {
                core.to_string()
            }
        }
        _ => short_digest(core),
    };
    format!("{before}{short}{after}")
}

/// `...sha256:` and 64 hex digits, cut to 12 of them.
fn short_digest(text: &str) -> String {
    match text.find("sha256:") {
        Some(at) => {
            let hex_start = at + "sha256:".len();
            let hex = &text[hex_start..];
            if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                format!("{}{}", &text[..hex_start], &hex[..12])
            } else {
                text.to_string()
            }
        }
        None => text.to_string(),
    }
}

/// Whether two statuses differ in what the controller writes (everything but `approval`,
/// and condition times, which only move when a status flips).
pub fn differs(current: &BundleStatus, desired: &BundleStatus) -> bool {
    let strip = |s: &BundleStatus| {
        let mut s = s.clone();
        s.approval = None;
        s.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
        for c in &mut s.conditions {
            c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        }
        s
    };
    strip(current) != strip(desired)
}

/// Shows work in progress (`Unpacking`, `Installing`) before a long step: writes the status as it
/// stands, summarised, and remembers it as what the API server holds.
pub async fn show_progress(
    bundle: &Bundle,
    ctx: &Context,
    status: &BundleStatus,
    facts: &Facts<'_>,
    written: &mut BundleStatus,
) -> Result<()> {
    let mut shown = status.clone();
    shown.observed_generation = bundle.metadata.generation;
    summarize(&mut shown, facts);
    write_bundle_status(bundle, ctx, written, &shown).await?;
    *written = shown;
    Ok(())
}

/// Writes the status when it changed, with server-side apply as field manager `gantry`: the
/// approval, owned by approvers, is never part of what is sent, so it is never touched. A change
/// of `Ready` is recorded as an Event.
pub async fn write_bundle_status(
    bundle: &Bundle,
    ctx: &Context,
    current: &BundleStatus,
    desired: &BundleStatus,
) -> Result<()> {
    // Derived last, from `Ready` as every step left it.
    let mut desired = desired.clone();
    set_short_message(&mut desired);
    let desired = &desired;
    if !differs(current, desired) {
        return Ok(());
    }
    // A bundle that was uninstalled is gone: nothing to write.
    if bundle.metadata.deletion_timestamp.is_some()
        && !bundle.finalizers().iter().any(|f| f == UNINSTALL_FINALIZER)
    {
        return Ok(());
    }
    let mut owned = desired.clone();
    owned.approval = None;
    match apply_status::<Bundle>(ctx, &bundle.name_any(), &owned).await {
        Ok(written) => ctx.written.record(
            &bundle.name_any(),
            written.metadata.resource_version.as_deref(),
        ),
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    ctx.metrics.status_writes.inc();
    if let Some((type_, reason, message)) = ready_transition(current, desired) {
        publish(ctx, bundle, type_, &reason, &message).await;
    }
    Ok(())
}

/// The Event a change of `Ready` (its status or reason) deserves: `Warning` for a failure.
/// The steps of a pass under way (`Unpacking`, `Installing`) are shown in status only: their
/// outcome is the Event.
fn ready_transition(
    current: &BundleStatus,
    desired: &BundleStatus,
) -> Option<(EventType, String, String)> {
    let before = condition(&current.conditions, types::READY).map(|c| (&c.status, &c.reason));
    let after = condition(&desired.conditions, types::READY)?;
    if [reasons::UNPACKING, reasons::INSTALLING].contains(&after.reason.as_str()) {
        return None;
    }
    if before == Some((&after.status, &after.reason)) {
        return None;
    }
    let type_ = if after.status != "True" && ReasonKind::of(&after.reason) == ReasonKind::Failure {
        EventType::Warning
    } else {
        EventType::Normal
    };
    Some((type_, after.reason.clone(), after.message.clone()))
}

/// Records an Event on the bundle; a failure to do so is only logged.
pub async fn publish(
    ctx: &Context,
    bundle: &Bundle,
    type_: EventType,
    reason: &str,
    message: &str,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(message.chars().take(1024).collect()),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &bundle.object_ref(&())).await {
        tracing::debug!(bundle = %bundle.name_any(), %error, "publishing an event failed");
    }
}

/// Writes a class's status when it changed (field manager `gantry`).
pub async fn write_class_status(
    class: &ProvisionerClass,
    ctx: &Context,
    current: &ProvisionerClassStatus,
    desired: &ProvisionerClassStatus,
) -> Result<()> {
    if same_class_status(current, desired) {
        return Ok(());
    }
    apply_status::<ProvisionerClass>(ctx, &class.name_any(), desired).await?;
    Ok(())
}

/// Server-side applies `status` to the cluster-scoped object `name` of kind `K`, as field
/// manager `gantry`.
async fn apply_status<K>(ctx: &Context, name: &str, status: &impl Serialize) -> kube::Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": { "name": name },
        "status": status,
    });
    Api::<K>::all(ctx.client.clone())
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
}

fn same_class_status(a: &ProvisionerClassStatus, b: &ProvisionerClassStatus) -> bool {
    let key = |s: &ProvisionerClassStatus| {
        (
            s.observed_generation,
            s.conditions
                .iter()
                .map(|c| {
                    (
                        c.type_.clone(),
                        c.status.clone(),
                        c.reason.clone(),
                        c.message.clone(),
                    )
                })
                .collect::<Vec<_>>(),
        )
    };
    key(a) == key(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_with(conditions: &[(&str, bool, &str)]) -> BundleStatus {
        let mut status = BundleStatus::default();
        for (t, s, r) in conditions {
            set_condition(&mut status.conditions, t, *s, r, "", Some(1));
        }
        status
    }

    #[test]
    fn the_short_message_is_one_line_with_short_references() {
        let hex = "0123456789abcdef".repeat(4);
        let message = format!(
            "pulling 127.0.0.1:5000/team/app@sha256:{hex}: repository or tag not found (attempt 3, next retry in 1.6s)"
        );
        assert_eq!(
            short_message(&message),
            "pulling app@sha256:0123456789ab: repository or tag not found"
        );
        let message = format!(
            "invalid bundle r.test/app:v2: too many objects; r.test/app@sha256:{hex} stays installed"
        );
        assert_eq!(
            short_message(&message),
            "invalid bundle app:v2: too many objects; app@sha256:0123456789ab stays installed"
        );
        assert_eq!(
            short_message("2 of 3 objects not healthy:\n  Deployment ns/web: 0/1 ready"),
            "2 of 3 objects not healthy:"
        );
        let long = "word ".repeat(40);
        let short = short_message(&long);
        assert_eq!(short.chars().count(), SHORT_MESSAGE_CHARS);
        assert!(short.ends_with('…'));
        // Not references: object names, files, URLs, a registry alone.
        let plain = "applying apps/v1 Deployment ns/web from manifests/a.yaml: see http://127.0.0.1:5000/v2/x";
        assert_eq!(short_message(plain), plain);
    }

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

    #[test]
    fn differs_ignores_approval_and_times() {
        let a = status_with(&[(types::UNPACKED, true, reasons::UNPACK_SUCCEEDED)]);
        let mut b = a.clone();
        b.conditions[0].last_transition_time = Time(Timestamp::UNIX_EPOCH);
        b.approval = Some(gantry_api::Approval {
            decision: gantry_api::ApprovalDecision::Approved,
            digest: "sha256:00".into(),
            reason: None,
            time: None,
        });
        assert!(!differs(&a, &b));
        b.phase = Some(gantry_api::BundlePhase::Installed);
        assert!(differs(&a, &b));
    }

    #[test]
    fn a_change_of_ready_is_an_event_warning_only_for_failures() {
        let mut before = BundleStatus::default();
        summarize(&mut before, &Facts::default());
        let mut installing = status_with(&[(types::INSTALLED, false, reasons::INSTALLING)]);
        summarize(&mut installing, &Facts::default());
        assert!(
            ready_transition(&before, &installing).is_none(),
            "a step under way is no Event"
        );
        let mut installed = status_with(&[
            (types::UNPACKED, true, reasons::UNPACK_SUCCEEDED),
            (types::APPROVED, true, reasons::AUTOMATIC_APPROVAL),
            (types::INSTALLED, true, reasons::INSTALL_SUCCEEDED),
        ]);
        summarize(&mut installed, &Facts::default());
        let (type_, reason, _) = ready_transition(&installing, &installed).unwrap();
        assert_eq!(
            (type_, reason.as_str()),
            (EventType::Normal, reasons::INSTALL_SUCCEEDED)
        );

        let mut failing = status_with(&[(types::INSTALLED, false, reasons::CONFLICT)]);
        summarize(&mut failing, &Facts::default());
        let (type_, reason, _) = ready_transition(&installing, &failing).unwrap();
        assert_eq!(
            (type_, reason.as_str()),
            (EventType::Warning, reasons::CONFLICT)
        );
        assert!(
            ready_transition(&failing, &failing).is_none(),
            "no change, no Event"
        );
    }
}
