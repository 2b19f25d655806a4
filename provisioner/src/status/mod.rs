//! Conditions, the summary (`Ready`, `phase`) derived from them ([`summary`], the only place
//! that decides `Ready`), and the status writes and Events that report them.

mod conditions;
mod events;
pub mod history;
mod message;
pub mod summary;
mod writes;

pub use conditions::{remove_condition, set_condition};
pub use events::publish;
pub use history::{record_history, refresh_history_approval};
pub use message::set_short_message;
pub use summary::{Facts, Hold, summarize};
pub use writes::{show_progress, write_bundle_status, write_class_status};

/// A status with `conditions` (type, status, reason) set for generation 1.
#[cfg(test)]
fn status_with(conditions: &[(&str, bool, &str)]) -> gantry_api::BundleStatus {
    let mut status = gantry_api::BundleStatus::default();
    for (t, s, r) in conditions {
        set_condition(&mut status.conditions, t, *s, r, "", Some(1));
    }
    status
}
