//! The objects a digest changes, each a folded diff: what the review page is mostly made of.

use maud::{Markup, html};

use super::reason_text;
use crate::commands::ui::changes::{Change, CrdSummary, ObjectChange};
use crate::commands::{causes, diff::UNSAFE_CRD};

/// Diffs longer than this many lines are folded: a CRD's schema, say, is thousands.
const OPEN_DIFF_LINES: usize = 200;

fn size_text(bytes: usize) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

fn diff_lines(text: &str) -> Markup {
    html! {
        pre {
            @for line in text.lines() {
                @let class = if line.starts_with("+++") || line.starts_with("---") || line.starts_with('#') {
                    "head"
                } else if line.starts_with("@@") {
                    "hunk"
                } else if line.starts_with('+') {
                    "add"
                } else if line.starts_with('-') {
                    "del"
                } else {
                    ""
                };
                span class=(class) { (line) "\n" }
            }
        }
    }
}

/// A new object as it would be created: the diff's added lines without their `+`, in one
/// text (a bundle's first install is all new objects, thousands of lines each for CRDs).
fn created_text(text: &str) -> Markup {
    let (head, body) = match text.split_once("\n@@ ") {
        Some((head, rest)) => (head, rest.split_once('\n').map_or("", |(_, body)| body)),
        None => (text, ""),
    };
    let mut object = String::with_capacity(body.len());
    for line in body.lines() {
        object.push_str(line.strip_prefix('+').unwrap_or(line));
        object.push('\n');
    }
    html! {
        @for note in head.lines().filter_map(|l| l.strip_prefix("# ")) { p.hint.note { (note) } }
        pre.object { (object) }
    }
}

fn change_badge(change: Change) -> Markup {
    let class = match change {
        Change::Created => "ok",
        Change::Changed => "warn",
        Change::Pruned | Change::Failed => "bad",
        Change::Unchanged => "none",
    };
    html! { span class={ "badge " (class) } { (change.label()) } }
}

fn crd_versions(crd: &CrdSummary) -> String {
    let versions: Vec<String> = crd
        .versions
        .iter()
        .map(|(name, served, storage)| match (served, storage) {
            (true, true) => format!("{name} (served, storage)"),
            (true, false) => format!("{name} (served)"),
            (false, true) => format!("{name} (storage, not served)"),
            (false, false) => format!("{name} (not served)"),
        })
        .collect();
    versions.join(", ")
}

/// A CRD by the API it defines; for a changed one, the upgrade check's verdict.
fn crd_facts(crd: &CrdSummary, c: &ObjectChange, awaiting: bool) -> Markup {
    let unsafe_changes: Vec<&str> = c
        .attention
        .iter()
        .filter_map(|r| r.strip_prefix(UNSAFE_CRD))
        .collect();
    html! {
        dl.facts.crd {
            dt { "Group" } dd { code { (crd.group) } }
            dt { "Kind" } dd { code { (crd.kind) } " / " code { (crd.plural) } }
            dt { "Versions" } dd { (crd_versions(crd)) }
            dt { "Scope" } dd { (crd.scope) }
            @if c.change == Change::Changed && (awaiting || !unsafe_changes.is_empty()) {
                dt { "Upgrade check" }
                dd.verdict {
                    @if unsafe_changes.is_empty() {
                        span.badge.ok { "safe" } " no unsafe change found"
                    } @else {
                        span.badge.bad { "unsafe" }
                        ul { @for finding in &unsafe_changes { li { (finding) } } }
                    }
                }
            }
        }
    }
}

/// One object: a one-line summary (kind, name, namespace, size) that opens on what changes.
/// New objects, unchanged ones and long diffs start folded; a CRD shows the API it defines,
/// its schema only on demand.
fn object_change(c: &ObjectChange, awaiting: bool) -> Markup {
    let lines = c.text.lines().count();
    let open = match c.change {
        Change::Failed => true,
        Change::Changed | Change::Pruned => c.crd.is_some() || lines <= OPEN_DIFF_LINES,
        Change::Created | Change::Unchanged => false,
    };
    let text = html! {
        @if c.change == Change::Created { (created_text(&c.text)) } @else { (diff_lines(&c.text)) }
    };
    html! {
        details.diff open[open] {
            summary {
                (change_badge(c.change))
                @if !c.attention.is_empty() { span.badge.warn { "needs attention" } }
                span.title { (c.title) }
                span.meta {
                    @if c.size > 0 { (size_text(c.size)) }
                    @if c.size > 0 && lines > 0 { " · " }
                    @if lines > 0 { (lines) " lines" }
                }
                @if let Some(crd) = &c.crd {
                    span.meta { (crd.group) " · " (crd.kind) "/" (crd.plural) " · " (crd.scope) }
                }
            }
            @if !c.attention.is_empty() {
                ul.reasons { @for reason in &c.attention { li { (reason_text(reason)) } } }
            }
            @if let Some(crd) = &c.crd {
                div.body { (crd_facts(crd, c, awaiting)) }
                @if !c.text.is_empty() {
                    details.schema {
                        summary {
                            @if c.change == Change::Created { "Schema and definition" } @else { "The diff, schema included" }
                            " (" (lines) " lines)"
                        }
                        (text)
                    }
                }
            } @else if !c.text.is_empty() {
                (text)
            }
        }
    }
}

/// How many objects are in `change`.
pub(super) fn count(changes: &[ObjectChange], change: Change) -> usize {
    changes.iter().filter(|c| c.change == change).count()
}

pub(super) fn changes_section(
    changes: &anyhow::Result<Vec<ObjectChange>>,
    awaiting: bool,
) -> Markup {
    html! {
        section #changes aria-label="Changes" {
            h2 { "What it changes" }
            @match changes {
                Err(error) => div.flash.bad role="alert" {
                    "The diff could not be made: " (causes(error))
                },
                Ok(changes) => {
                    p.count {
                        (changes.len() - count(changes, Change::Unchanged)) " of " (changes.len())
                        " objects change; objects that need attention first. New objects and long diffs are folded: open them to read them."
                    }
                    @for c in changes { (object_change(c, awaiting)) }
                }
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn change(title: &str, change: Change, text: String) -> ObjectChange {
        ObjectChange {
            title: title.into(),
            change,
            size: text.len(),
            text,
            attention: Vec::new(),
            crd: None,
        }
    }

    /// A unified diff of `lines` lines, all added when `created`.
    fn diff_text(lines: usize, created: bool) -> String {
        let mut text = format!(
            "--- t (live)\n+++ t (after apply)\n@@ -{} +1,{lines} @@\n",
            if created { "0,0" } else { "1,1" }
        );
        for i in 0..lines {
            text.push_str(&format!("+  key{i}: value\n"));
        }
        text
    }

    pub(in super::super) fn prometheus_crd(change: Change, attention: Vec<String>) -> ObjectChange {
        ObjectChange {
            attention,
            crd: Some(CrdSummary {
                group: "monitoring.coreos.com".into(),
                kind: "Prometheus".into(),
                plural: "prometheuses".into(),
                scope: "Namespaced".into(),
                versions: vec![("v1".into(), true, true), ("v1alpha1".into(), false, false)],
            }),
            ..self::change(
                "CustomResourceDefinition prometheuses.monitoring.coreos.com",
                change,
                diff_text(11_371, change == Change::Created),
            )
        }
    }

    /// The `<details>` element of the object `title`, as rendered.
    fn details_of<'a>(html: &'a str, title: &str) -> &'a str {
        let at = html
            .find(title)
            .unwrap_or_else(|| panic!("{title} in {html}"));
        let start = html[..at].rfind("<details class=\"diff\"").unwrap();
        &html[start..at]
    }

    #[test]
    fn new_objects_and_long_diffs_are_folded_short_diffs_are_not() {
        let changes = Ok(vec![
            change("ConfigMap app/new", Change::Created, diff_text(3, true)),
            change(
                "ConfigMap app/short",
                Change::Changed,
                diff_text(OPEN_DIFF_LINES - 10, false),
            ),
            change(
                "ConfigMap app/long",
                Change::Changed,
                diff_text(OPEN_DIFF_LINES + 10, false),
            ),
            change("ConfigMap app/same", Change::Unchanged, String::new()),
        ]);
        let html = changes_section(&changes, true).into_string();
        for (object, open) in [
            ("new", false),
            ("short", true),
            ("long", false),
            ("same", false),
        ] {
            let details = details_of(&html, &format!("ConfigMap app/{object}"));
            assert_eq!(details.contains(" open"), open, "{object}: {html}");
        }
        // The one-line summary names the size; a new object reads as it will be created.
        assert!(
            html.contains("ConfigMap app/new</span><span class=\"meta\">"),
            "{html}"
        );
        assert!(
            html.contains(&format!("{} lines", OPEN_DIFF_LINES + 10 + 3)),
            "{html}"
        );
        assert!(
            html.contains("<pre class=\"object\">  key0: value\n  key1: value\n"),
            "{html}"
        );
    }

    #[test]
    fn a_crd_shows_the_api_it_defines_and_its_schema_on_demand() {
        let html = changes_section(&Ok(vec![prometheus_crd(Change::Created, Vec::new())]), true)
            .into_string();
        for fact in [
            "monitoring.coreos.com",
            "<code>Prometheus</code> / <code>prometheuses</code>",
            "v1 (served, storage), v1alpha1 (not served)",
            "Namespaced",
        ] {
            assert!(html.contains(fact), "{fact} in the CRD's summary");
        }
        // Folded twice: the object, then its schema within it.
        assert!(!html.contains(" open>"), "{}", &html[..2000]);
        assert!(
            html.contains("<details class=\"schema\"><summary>Schema and definition (11374 lines)")
        );
        assert!(
            !html.contains("Upgrade check"),
            "a new CRD upgrades nothing"
        );

        // A changed CRD: open on its summary and the upgrade check's verdict, the diff folded.
        let finding = "prometheuses.monitoring.coreos.com v1 spec.versions[v1].schema.openAPIV3Schema.properties.spec.properties.color: property removed";
        let unsafe_crd = prometheus_crd(Change::Changed, vec![format!("{UNSAFE_CRD}{finding}")]);
        let html = changes_section(&Ok(vec![unsafe_crd]), true).into_string();
        assert!(
            html.contains("<details class=\"diff\" open>"),
            "{}",
            &html[..2000]
        );
        assert!(
            html.contains("<span class=\"badge bad\">unsafe</span>"),
            "{}",
            &html[..2000]
        );
        assert!(
            html.contains(&format!("<li>{finding}</li>")),
            "{}",
            &html[..2000]
        );
        assert!(html.contains("<details class=\"schema\"><summary>The diff"));
        let safe = changes_section(&Ok(vec![prometheus_crd(Change::Changed, Vec::new())]), true)
            .into_string();
        assert!(safe.contains("no unsafe change found"), "{}", &safe[..2000]);
    }

    /// The review of 2,000 objects, 5 MB of content, renders in time that docs/ui.md gives.
    #[test]
    fn the_changes_of_2000_objects_render() {
        let changes = Ok((0..2000)
            .map(|i| {
                change(
                    &format!("ConfigMap app/config-{i}"),
                    Change::Created,
                    diff_text(160, true),
                )
            })
            .collect::<Vec<_>>());
        let bytes: usize = changes.as_ref().unwrap().iter().map(|c| c.text.len()).sum();
        assert!(bytes > 5_000_000, "{bytes} bytes");
        let started = std::time::Instant::now();
        let html = changes_section(&changes, true).into_string();
        let took = started.elapsed();
        eprintln!(
            "2,000 objects, {} KiB of diffs: {} KiB of HTML in {took:?}",
            bytes / 1024,
            html.len() / 1024
        );
        assert_eq!(html.matches("<details class=\"diff\">").count(), 2000);
    }
}
