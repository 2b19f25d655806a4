//! The contract between the provisioner and the unpack program of `pullMode: Node`
//! (`gantry-unpack`, run in an unpack Pod): how the Pod is labelled, the report the program
//! writes as its termination message, and its exit codes.

use serde::{Deserialize, Serialize};

/// Label of every unpack Pod.
pub const APP_LABEL: (&str, &str) = ("app.kubernetes.io/name", "gantry-unpack");
/// Annotation naming the bundle an unpack Pod unpacks.
pub const BUNDLE_ANNOTATION: &str = "gantry.dev/bundle";

/// Exit code of the unpack program when the bundle's content is invalid; its termination
/// message is then the same text a direct pull reports.
pub const EXIT_INVALID_BUNDLE: i32 = 2;
/// Exit code of the unpack program for any other failure (storage, scratch space).
pub const EXIT_FAILED: i32 = 1;

/// What the unpack program reports on success, as its termination message (JSON).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UnpackReport {
    /// `sha256:…` of the canonical tarball it stored.
    pub content_digest: String,
    /// The platform the program (and so the image the node ran) is built for.
    pub platform: String,
    /// Objects in the bundle.
    pub objects: usize,
}

/// The largest termination message the kubelet keeps, in bytes.
pub const MAX_TERMINATION_MESSAGE: usize = 4096;

/// `message` cut at a character boundary to fit a termination message.
pub fn fit_termination_message(message: &str) -> &str {
    if message.len() <= MAX_TERMINATION_MESSAGE {
        return message;
    }
    let mut end = MAX_TERMINATION_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn termination_messages_are_cut_at_a_character() {
        assert_eq!(fit_termination_message("short"), "short");
        let long = "é".repeat(MAX_TERMINATION_MESSAGE);
        let cut = fit_termination_message(&long);
        assert!(cut.len() <= MAX_TERMINATION_MESSAGE && cut.len() >= MAX_TERMINATION_MESSAGE - 1);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn the_report_is_camel_case_json() {
        let report = UnpackReport {
            content_digest: "sha256:00".into(),
            platform: "linux/amd64".into(),
            objects: 3,
        };
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["contentDigest"], "sha256:00");
        assert_eq!(
            serde_json::from_value::<UnpackReport>(json).unwrap(),
            report
        );
    }
}
