//! `history`: the digests a bundle installed, newest first, with how they were approved.

use clap::Args;
use gantry_api::{Bundle, HistoryApproval, HistoryEntry};
use kube::api::Api;

use super::cluster::{GlobalArgs, read_bundle};
use super::output::{OutputFormat, age, header, parse_output, print_structured, print_table};

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

pub async fn history(global: &GlobalArgs, args: HistoryArgs) -> anyhow::Result<()> {
    let bundles: Api<Bundle> = Api::all(global.client().await?);
    let bundle = read_bundle(&bundles, &args.name).await?;
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
    let mut rows = vec![header(&["DIGEST", "INSTALLED", "APPROVAL", "IMAGE"])];
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
pub(crate) fn approval(entry: &HistoryEntry) -> String {
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    pub(in crate::commands) fn entry(hex: &str) -> HistoryEntry {
        HistoryEntry {
            image: format!("r.test/app@sha256:{hex}"),
            digest: format!("sha256:{hex}"),
            tag: None,
            installed_at: Time(Timestamp::UNIX_EPOCH),
            approval: HistoryApproval::Automatic,
            approved_at: None,
            approval_reason: None,
            approved_by: None,
        }
    }

    /// A bundle of `r/app` within `semver`: 1.4.2 installed, 1.5.0 awaiting approval.
    pub(in crate::commands) fn ranged_bundle_waiting(semver: &str) -> gantry_api::Bundle {
        let pinned = |c: char| format!("r/app@sha256:{}", c.to_string().repeat(64));
        let mut bundle = gantry_api::Bundle::new(
            "app",
            gantry_api::BundleSpec {
                image: "r/app".into(),
                r#ref: Some(gantry_api::VersionRef {
                    semver: semver.into(),
                    semver_filter: None,
                }),
                ..Default::default()
            },
        );
        let mut installed = entry(&"a".repeat(64));
        installed.image = pinned('a');
        installed.tag = Some("1.4.2".into());
        bundle.status = Some(gantry_api::BundleStatus {
            phase: Some(gantry_api::BundlePhase::AwaitingApproval),
            resolved_image: Some(pinned('b')),
            resolved_tag: Some("1.5.0".into()),
            installed_image: Some(pinned('a')),
            history: vec![installed],
            ..Default::default()
        });
        bundle
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
}
