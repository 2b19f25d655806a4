//! Decisions made from data alone, without a cluster: planning a bundle's objects, the
//! permissions it requests, whether a CRD's new content is a safe upgrade, each object's apply
//! policy and the fields other managers own, which class serves a bundle, allowed images, whose
//! identity applies it, and the kstatus rules and health verdicts. Tested without a cluster.

pub mod allowed_images;
pub mod class_selection;
pub mod crd_upgrade;
pub mod health;
pub mod health_rules;
pub mod identity;
pub mod kstatus;
pub mod managed_fields;
pub mod object_policy;
pub mod permissions;
pub mod plan;
pub mod ring;

/// "1 object", "3 objects": counts in messages.
pub fn objects(count: usize) -> String {
    if count == 1 {
        "1 object".to_string()
    } else {
        format!("{count} objects")
    }
}
