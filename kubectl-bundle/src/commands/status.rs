//! `status`: one bundle in full (conditions, digests, requested permissions, inventory,
//! history, recent Events), or as a document, and again as it changes. Fetching reads the
//! bundle and its Events; the summary is made from them alone.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Context, bail};
use clap::Args;
use futures::{StreamExt, TryStreamExt};
use gantry_api::Bundle;
use gantry_api::conditions::types;
use gantry_rules::conditions::{ConditionStatus, find};
use k8s_openapi::api::core::v1::Event;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use super::cluster::{GlobalArgs, get_bundles};
use super::inspect::{bundle_events, events_table};
use super::output::{OutputFormat, clean, header, list_of, parse_output, print_structured, table};
use super::review::{
    approval_state, class_name, config_changed_text, config_sources, configured, decision_text,
    ignore_lines, images_lines, patches_lines, permissions_table, rendered_by,
};

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle status my-app\n  kubectl bundle status app-a app-b\n  kubectl bundle status my-app -o jsonpath='{.status.phase}'\n  kubectl bundle status my-app --watch"
)]
pub struct StatusArgs {
    /// The bundles (one or more).
    #[arg(required = true, value_name = "NAME")]
    names: Vec<String>,
    /// Print the Bundle as json, yaml, name, jsonpath=TEMPLATE or custom-columns=SPEC instead of
    /// the summary (several: a `v1 List` of them).
    #[arg(short = 'o', long = "output", value_parser = parse_output)]
    output: Option<OutputFormat>,
    /// Print the status again each time the bundle changes (one bundle).
    #[arg(short = 'w', long)]
    watch: bool,
}

pub async fn status(global: &GlobalArgs, args: StatusArgs) -> anyhow::Result<()> {
    if args.watch && args.names.len() > 1 {
        bail!("--watch follows one bundle; `kubectl bundle list NAME... --watch` follows several");
    }
    let client = global.client().await?;
    let bundles: Api<Bundle> = Api::all(client.clone());
    let (found, refused) = get_bundles(&bundles, &args.names).await?;
    // Several bundles are one document, as `kubectl get bundle A B -o json` prints them.
    if args.names.len() > 1 && print_structured(&list_of(&found)?, args.output.as_ref())? {
        return refused.map_or(Ok(()), |r| Err(r.into()));
    }
    for (i, bundle) in found.iter().enumerate() {
        if i > 0 {
            println!();
        }
        print_status(&client, bundle, args.output.as_ref()).await?;
    }
    let Some(bundle) = found.first().filter(|_| args.watch) else {
        return refused.map_or(Ok(()), |r| Err(r.into()));
    };
    let name = bundle.name_any();
    let mut last = bundle.resource_version();
    let mut changes = watcher::watch_object(bundles, &name).boxed();
    while let Some(bundle) = changes
        .try_next()
        .await
        .with_context(|| format!("watching bundle {name}"))?
    {
        let Some(bundle) = bundle else {
            bail!("bundle {name} was deleted");
        };
        if bundle.resource_version() != last {
            last = bundle.resource_version();
            println!();
            print_status(&client, &bundle, args.output.as_ref()).await?;
        }
    }
    Ok(())
}

async fn print_status(
    client: &Client,
    bundle: &Bundle,
    output: Option<&OutputFormat>,
) -> anyhow::Result<()> {
    if print_structured(&clean(bundle)?, output)? {
        std::io::stdout().flush()?;
        return Ok(());
    }
    let events = bundle_events(client, bundle, false).await;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(summary(bundle, &events).as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// The summary of `bundle`, with its `events` or why they could not be listed.
fn summary(bundle: &Bundle, events: &anyhow::Result<Vec<Event>>) -> String {
    let status = bundle.status.clone().unwrap_or_default();
    let mut out = String::new();
    // A label of 12 characters or more (`Configuration:`) is followed by one space; a line
    // ends with no blanks (an empty value, an empty line of the notes).
    let mut field = |label: &str, value: &str| {
        out.push_str(format!("{label:<11} {value}").trim_end());
        out.push('\n');
    };
    field("Name:", &bundle.name_any());
    field("Image:", &bundle.spec.image);
    if let Some(version) = gantry_rules::version_range::version_line(bundle) {
        field("Version:", &version);
    }
    if !bundle.spec.patches.is_empty() {
        field("Patches:", "applied before applying (spec.patches):");
        for line in patches_lines(&bundle.spec.patches).lines() {
            field("", line.trim_start());
        }
    }
    if !bundle.spec.images.is_empty() {
        field("Images:", "rewritten before applying (spec.images):");
        for line in images_lines(&bundle.spec.images).lines() {
            field("", line.trim_start());
        }
    }
    if !bundle.spec.ignore.is_empty() {
        field(
            "Ignored:",
            "fields left to other controllers (spec.ignore):",
        );
        for line in ignore_lines(&bundle.spec.ignore).lines() {
            field("", line.trim_start());
        }
    }
    let class = class_name(bundle);
    field(
        "Class:",
        &if bundle.spec.provisioner_class_name.is_none() && status.class_name.is_some() {
            format!("{class} (the default class)")
        } else {
            class
        },
    );
    field(
        "Phase:",
        &status.phase.map(|p| p.to_string()).unwrap_or_default(),
    );
    // A stalled bundle is not retried: say so before anything else, with what must change.
    if let Some(stalled) =
        find(&status.conditions, types::STALLED).filter(|c| c.status == ConditionStatus::True)
    {
        field(
            "Stalled:",
            &format!(
                "{}: {} (`kubectl bundle reconcile {}` tries again at once)",
                stalled.reason,
                stalled.message,
                bundle.name_any()
            ),
        );
    }
    for (label, value) in [
        ("Resolved:", &status.resolved_image),
        ("Installed:", &status.installed_image),
        ("Manifest:", &status.manifest_digest),
        ("Platform:", &status.platform),
        ("Content:", &status.content_digest),
    ] {
        field(label, value.as_deref().unwrap_or("-"));
    }
    // What rendered the content, from which configuration: names and keys, never a value.
    if let Some(rendered) = &status.rendered {
        field("Rendered by:", &rendered_by(rendered));
        field("Source:", rendered.source.as_deref().unwrap_or("-"));
    }
    if configured(bundle) {
        let sources = config_sources(&bundle.spec);
        let digest = status.config_digest.as_deref().unwrap_or("-");
        if sources.is_empty() {
            field(
                "Configuration:",
                &format!("{digest} (none given: an empty mapping)"),
            );
        } else {
            field(
                "Configuration:",
                &format!("{digest} from (later ones win):"),
            );
            for source in sources {
                field("", &source);
            }
        }
    }
    if let Some(rendered) = &status.rendered {
        if let Some(notes) = rendered.notes.as_deref().filter(|n| !n.trim().is_empty()) {
            field("Notes:", "from the provisioner (status.rendered.notes):");
            for line in notes.trim_end().lines() {
                field("", &printable(line));
            }
        }
        for (i, warning) in rendered.warnings.iter().enumerate() {
            field(if i == 0 { "Warnings:" } else { "" }, &printable(warning));
        }
    }
    field("Approval:", approval_state(&status));
    if let Some(approval) = &status.approval {
        field("", &decision_text(approval));
    }
    if let Some(changed) = config_changed_text(&status) {
        field("", &changed);
    }
    out.push_str("\nConditions:\n");
    let mut rows = vec![header(&["  TYPE", "STATUS", "REASON", "MESSAGE"])];
    for c in &status.conditions {
        rows.push(vec![
            format!("  {}", c.type_),
            c.status.clone(),
            c.reason.clone(),
            super::health::table_message(c).to_string(),
        ]);
    }
    out.push_str(&table(&rows));
    let unhealthy = super::health::unhealthy_objects(&status);
    if !unhealthy.is_empty() {
        out.push_str("\nNot healthy:\n");
        for object in unhealthy {
            out.push_str(&format!("  {object}\n"));
        }
    }
    if let Some(permissions) = &status.requested_permissions {
        out.push_str("\nRequested permissions:\n");
        out.push_str(&permissions_table(permissions));
    }
    let mut inventory: BTreeMap<String, usize> = BTreeMap::new();
    for entry in &status.inventory {
        *inventory.entry(entry.kind.clone()).or_default() += 1;
    }
    out.push_str(&format!(
        "\nInventory: {}\n",
        super::output::count(status.inventory.len(), "object")
    ));
    for (kind, count) in inventory {
        out.push_str(&format!("  {kind}: {count}\n"));
    }
    if let Some(latest) = status.history.first() {
        out.push_str(&format!(
            "\nHistory: {} installed, the latest {} ago (`kubectl bundle history {}`)\n",
            super::output::count(status.history.len(), "digest"),
            super::output::age(latest.installed_at.0),
            bundle.name_any()
        ));
    }
    out.push_str("\nEvents:\n");
    match events {
        Ok(events) if events.is_empty() => out.push_str("  <none>\n"),
        // The latest ten, oldest first.
        Ok(events) => {
            let shown = &events[events.len().saturating_sub(10)..];
            for line in events_table(shown).lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
        Err(e) => out.push_str(&format!(
            "  cannot list them: {}\n",
            super::output::causes(e)
        )),
    }
    out
}

/// The provisioner's text (a chart's `NOTES.txt`) without the control characters a terminal
/// would act on.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\t' {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::testing::condition;
    use gantry_api::conditions::reasons;

    #[test]
    fn the_summary_says_a_stall_first_and_why_events_are_missing() {
        let mut bundle = Bundle::new("app", Default::default());
        bundle.status = Some(gantry_api::BundleStatus {
            class_name: Some("plain".into()),
            conditions: vec![condition(
                types::STALLED,
                "True",
                reasons::INVALID_HEALTH_EXPRESSION,
                "spec.healthCheckExprs[0]: line 1",
                None,
            )],
            ..Default::default()
        });
        let text = summary(&bundle, &Err(anyhow::anyhow!("events are forbidden")));
        let stalled = "Stalled:    InvalidHealthExpression: spec.healthCheckExprs[0]: line 1 (`kubectl bundle reconcile app` tries again at once)";
        assert!(
            text.contains("Class:      plain (the default class)\n"),
            "{text}"
        );
        let at = |line: &str| text.find(line).unwrap_or_else(|| panic!("{line}: {text}"));
        assert!(at(stalled) < at("Resolved:"), "{text}");
        assert!(
            text.contains("Events:\n  cannot list them: events are forbidden\n"),
            "{text}"
        );
    }

    #[test]
    fn the_summary_says_which_version_is_installed_and_which_waits() {
        let bundle = crate::commands::history::tests::ranged_bundle_waiting(">=1.0.0 <2.0.0");
        let text = summary(&bundle, &Ok(Vec::new()));
        assert!(
            text.contains("Image:      r/app\nVersion:    1.4.2 installed, 1.5.0 waiting for approval (spec.ref.semver >=1.0.0 <2.0.0)\n"),
            "{text}"
        );
    }

    #[test]
    fn the_summary_says_what_rendered_the_content_from_which_configuration() {
        let config = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        let digest = config('a');
        let mut bundle = Bundle::new(
            "argocd",
            gantry_api::BundleSpec {
                image: "r/argocd-operator-bundle:v0.6.0".into(),
                config: Some(
                    serde_json::json!({ "watchNamespace": "argocd-system" })
                        .as_object()
                        .unwrap()
                        .clone(),
                ),
                config_from: serde_json::from_value(serde_json::json!([
                    { "kind": "ConfigMap", "name": "defaults", "key": "operator.yaml" },
                    { "kind": "Secret", "name": "operator-values", "optional": true },
                ]))
                .unwrap(),
                ..Default::default()
            },
        );
        let mut approval =
            gantry_api::Approval::of(gantry_api::ApprovalDecision::Approved, &digest);
        approval.config_digest = Some(config('c'));
        bundle.status = Some(gantry_api::BundleStatus {
            phase: Some(gantry_api::BundlePhase::AwaitingApproval),
            resolved_image: Some(format!("r/argocd-operator-bundle@{digest}")),
            content_digest: Some(config('b')),
            config_digest: Some(config('d')),
            rendered: Some(gantry_api::Rendered {
                provisioner: "gantry.dev/registry".into(),
                version: "0.1.0".into(),
                source: Some("argocd-operator.v0.6.0".into()),
                input_digest: config('e'),
                notes: Some("Argo CD is installed.\n\n  Open it:\x1b[2J\n".into()),
                warnings: vec!["the CSV's minKubeVersion is not checked".into()],
            }),
            approval: Some(approval),
            ..Default::default()
        });
        let text = summary(&bundle, &Ok(Vec::new()));
        let lines = format!(
            "Content:    {}\n\
             Rendered by: gantry.dev/registry 0.1.0\n\
             Source:     argocd-operator.v0.6.0\n\
             Configuration: {} from (later ones win):\n\
             \x20           ConfigMap/defaults[operator.yaml]\n\
             \x20           Secret/operator-values[values.yaml] (optional)\n\
             \x20           spec.config\n\
             Notes:      from the provisioner (status.rendered.notes):\n\
             \x20           Argo CD is installed.\n\
             \n\
             \x20             Open it:\u{fffd}[2J\n\
             Warnings:   the CSV's minKubeVersion is not checked\n\
             Approval:   Pending\n\
             \x20           Approved {digest}\n\
             \x20           the configuration changed since the last decision (decided with sha256:cccccccccccc, now sha256:dddddddddddd): awaiting a new one\n",
            config('b'),
            config('d'),
        );
        assert!(text.contains(&lines), "{text}");
        // Never a value of the configuration.
        assert!(!text.contains("argocd-system"), "{text}");

        // Decided with this configuration: nothing to say; no sources, an empty mapping.
        let mut plain = bundle.clone();
        plain.spec.config = None;
        plain.spec.config_from.clear();
        let status = plain.status.as_mut().unwrap();
        status.approval.as_mut().unwrap().config_digest = Some(config('d'));
        status.rendered.as_mut().unwrap().notes = None;
        let text = summary(&plain, &Ok(Vec::new()));
        assert!(
            text.contains(&format!(
                "Configuration: {} (none given: an empty mapping)\nWarnings:",
                config('d')
            )),
            "{text}"
        );
        assert!(
            !text.contains("changed since") && !text.contains("Notes:"),
            "{text}"
        );

        // Plain content: no lines about rendering.
        let text = summary(&Bundle::new("plain", Default::default()), &Ok(Vec::new()));
        assert!(
            !text.contains("Rendered by:") && !text.contains("Configuration:"),
            "{text}"
        );
    }
}
