//! `status.message`: the `Ready` message in one short line, and the retry note.

use gantry_api::BundleStatus;
use gantry_api::conditions::types;
use gantry_rules::conditions::find;

/// The longest `status.message`, in characters.
const SHORT_MESSAGE_CHARS: usize = 100;

/// Sets `status.message`, the `Ready` message in one short line for `kubectl get`.
pub fn set_short_message(status: &mut BundleStatus) {
    status.message = find(&status.conditions, types::READY)
        .map(|c| short_message(&c.message))
        .filter(|m| !m.is_empty());
}

/// A message in one short line: its first line, without the retry note, image references
/// shortened to their last path segment (`name:tag`, `name@sha256:` and 12 hex digits),
/// other digests to 12 hex digits, and at most [`SHORT_MESSAGE_CHARS`] characters.
pub fn short_message(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default().trim_end();
    let line = without_retry_note(line);
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

/// `message` without the retry note added to failures ("... (attempt N, next retry in Xs)"):
/// the note changes on every attempt, the failure does not.
pub fn without_retry_note(message: &str) -> &str {
    match message.rfind(" (attempt ") {
        Some(at) if message.ends_with(')') && message[at..].contains(", next retry in ") => {
            &message[..at]
        }
        _ => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_retry_note_goes_and_nothing_else() {
        assert_eq!(
            without_retry_note("forbidden: x\nmore (attempt 12, next retry in 3.0s)"),
            "forbidden: x\nmore"
        );
        assert_eq!(
            without_retry_note("waiting (attempt to reach the registry)"),
            "waiting (attempt to reach the registry)"
        );
        assert_eq!(without_retry_note("no note"), "no note");
    }
}
