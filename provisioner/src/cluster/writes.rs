//! How Gantry writes objects whose every field it makes itself: Bundle and class statuses, the
//! finalizer, the sharding labels and Leases, Events.
//!
//! They are sent with `fieldValidation=Ignore`. The API server's default (`Warn`) decodes each
//! body a second time, strictly, only to warn of unknown or duplicate fields, which Gantry's own
//! writes never have (they are serialised from the same types as the CRDs, and the schema
//! prunes what it does not declare). That second decoding is a tenth of what a status write
//! costs the API server. Objects from a bundle's content are not written this way: they are
//! applied with the server's default, as kubectl and Flux apply them.

use kube::api::PatchParams;

/// A patch (merge or JSON) of an object of Gantry's own.
pub fn own_patch() -> PatchParams {
    PatchParams::default().validation_ignore()
}

/// A server-side apply by `field_manager`, forced, of an object of Gantry's own.
pub fn own_apply(field_manager: &str) -> PatchParams {
    PatchParams::apply(field_manager)
        .force()
        .validation_ignore()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::params::ValidationDirective;

    #[test]
    fn own_writes_skip_the_strict_decoding() {
        let patch = own_patch();
        assert!(matches!(
            patch.field_validation,
            Some(ValidationDirective::Ignore)
        ));
        let apply = own_apply("gantry");
        assert!(apply.force);
        assert_eq!(apply.field_manager.as_deref(), Some("gantry"));
        assert!(matches!(
            apply.field_validation,
            Some(ValidationDirective::Ignore)
        ));
    }
}
