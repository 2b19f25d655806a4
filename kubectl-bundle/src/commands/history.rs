//! `history` and `rollback`: the digests a bundle installed, and going back to one of them.

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::{Bundle, HistoryApproval, HistoryEntry};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::cluster::GlobalArgs;
use super::output::{OutputFormat, age, parse_output, print_structured, print_table};
use super::review::get_bundle;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle history my-app\n  kubectl bundle history my-app -o yaml"
)]
pub struct HistoryArgs {
    /// The bundle.
    name: String,
    /// Output format: json, yaml, jsonpath=TEMPLATE or custom-columns=SPEC (applied to the list
    /// of entries).
    #[arg(short = 'o', long = "output", value_parser = parse_output)]
    output: Option<OutputFormat>,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle history my-app\n  kubectl bundle rollback my-app --to sha256:4f1c..."
)]
pub struct RollbackArgs {
    /// The bundle.
    name: String,
    /// A digest from `kubectl bundle history NAME` (`sha256:...`, or a unique prefix of its hex).
    #[arg(long, value_name = "DIGEST")]
    to: String,
}

pub async fn history(global: &GlobalArgs, args: HistoryArgs) -> anyhow::Result<()> {
    let bundles: Api<Bundle> = Api::all(global.client().await?);
    let bundle = get_bundle(&bundles, &args.name).await?;
    let status = bundle.status.unwrap_or_default();
    if print_structured(
        &serde_json::to_value(&status.history)?,
        args.output.as_ref(),
    )? {
        return Ok(());
    }
    if status.history.is_empty() {
        println!("bundle {} has installed nothing yet", args.name);
        return Ok(());
    }
    let mut rows = vec![
        ["DIGEST", "INSTALLED", "APPROVAL", "IMAGE"]
            .map(String::from)
            .to_vec(),
    ];
    for entry in &status.history {
        let current = status.installed_image.as_deref() == Some(entry.image.as_str());
        rows.push(vec![
            format!(
                "{}{}",
                entry.digest,
                if current { " (installed)" } else { "" }
            ),
            format!(
                "{} ago ({})",
                age(entry.installed_at.0),
                entry.installed_at.0
            ),
            approval(entry),
            entry.image.clone(),
        ]);
    }
    print_table(&rows);
    Ok(())
}

/// `Automatic`, or `Manual` with the approver, the time and the reason.
fn approval(entry: &HistoryEntry) -> String {
    match entry.approval {
        HistoryApproval::Automatic => "Automatic".to_string(),
        HistoryApproval::Manual => {
            let mut text = "Manual".to_string();
            if let Some(who) = &entry.approved_by {
                text.push_str(&format!(" by {who}"));
            }
            if let Some(at) = &entry.approved_at {
                text.push_str(&format!(" at {}", at.0));
            }
            if let Some(reason) = &entry.approval_reason {
                text.push_str(&format!(": {reason}"));
            }
            text
        }
    }
}

/// The entry `wanted` names: a full digest, or a prefix of its hex that only one entry has.
fn find<'a>(history: &'a [HistoryEntry], wanted: &str) -> Result<&'a HistoryEntry, String> {
    let hex = wanted.trim_start_matches("sha256:");
    let matching: Vec<&HistoryEntry> = history
        .iter()
        .filter(|e| !hex.is_empty() && e.digest.trim_start_matches("sha256:").starts_with(hex))
        .collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => Err("it is not in the bundle's history".to_string()),
        _ => Err(format!(
            "{} digests of the history start with it: give more of it",
            matching.len()
        )),
    }
}

pub async fn rollback(global: &GlobalArgs, args: RollbackArgs) -> anyhow::Result<()> {
    let name = &args.name;
    let bundles: Api<Bundle> = Api::all(global.client().await?);
    let bundle = get_bundle(&bundles, name).await?;
    let status = bundle.status.clone().unwrap_or_default();
    let entry = match find(&status.history, &args.to) {
        Ok(entry) => entry,
        Err(why) => {
            let known = status
                .history
                .iter()
                .map(|e| e.digest.as_str())
                .collect::<Vec<_>>();
            bail!(
                "cannot roll bundle {name} back to {}: {why}. Installed digests, newest first: {} (see `kubectl bundle history {name}`)",
                args.to,
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            );
        }
    };
    if bundle.spec.image == entry.image {
        bail!("bundle {name} is already pinned to {}", entry.image);
    }
    // The resourceVersion makes the write fail if the bundle changed since it was read.
    let patch = json!({
        "metadata": { "resourceVersion": bundle.metadata.resource_version },
        "spec": { "image": entry.image },
    });
    bundles
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("pinning bundle {name} to {}", entry.image))?;
    println!(
        "bundle {name}: spec.image {} -> {} (installed {} ago); it stays pinned until spec.image changes again",
        bundle.spec.image,
        entry.image,
        age(entry.installed_at.0)
    );
    if entry.approval == HistoryApproval::Manual {
        println!(
            "its class asks for approval: approve {} again if the bundle waits (`kubectl bundle approve {name}`)",
            entry.digest
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn entry(hex: &str) -> HistoryEntry {
        HistoryEntry {
            image: format!("r.test/app@sha256:{hex}"),
            digest: format!("sha256:{hex}"),
            installed_at: Time(Timestamp::UNIX_EPOCH),
            approval: HistoryApproval::Automatic,
            approved_at: None,
            approval_reason: None,
            approved_by: None,
        }
    }

    #[test]
    fn a_manual_approval_names_the_approver_the_time_and_the_reason() {
        assert_eq!(approval(&entry("aa")), "Automatic");
        let manual = HistoryEntry {
            approval: HistoryApproval::Manual,
            approved_at: Some(Time(Timestamp::UNIX_EPOCH)),
            approval_reason: Some("reviewed".into()),
            approved_by: Some("alice".into()),
            ..entry("aa")
        };
        assert_eq!(
            approval(&manual),
            "Manual by alice at 1970-01-01T00:00:00Z: reviewed"
        );
        let anonymous = HistoryEntry {
            approved_by: None,
            ..manual
        };
        assert_eq!(
            approval(&anonymous),
            "Manual at 1970-01-01T00:00:00Z: reviewed"
        );
    }

    #[test]
    fn a_digest_or_a_unique_prefix_finds_its_entry() {
        let history = [entry("aa11"), entry("aa22"), entry("bb33")];
        assert_eq!(find(&history, "sha256:bb33").unwrap().digest, "sha256:bb33");
        assert_eq!(find(&history, "aa2").unwrap().digest, "sha256:aa22");
        assert!(find(&history, "aa").unwrap_err().contains("2 digests"));
        assert!(find(&history, "cc").unwrap_err().contains("not in"));
        assert!(find(&history, "sha256:").is_err());
    }
}
