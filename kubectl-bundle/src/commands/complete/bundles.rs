//! The names of the cluster's Bundles, read as the verb being completed would read them.

use std::time::Duration;

use gantry_api::Bundle;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::Offered;
use crate::commands::cluster::{GlobalArgs, parse_timeout};

/// How long completion waits for the cluster: a shell waits on it.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(5);
/// The kubeconfig flags among `words` (the last value of each), as the verb would take them;
/// a request timeout of [`CLUSTER_TIMEOUT`] unless one is given.
pub(super) fn cluster_flags(words: &[String]) -> GlobalArgs {
    let flag = |name: &str| -> Option<String> {
        let with_equals = format!("--{name}=");
        let mut found = None;
        for (i, w) in words.iter().enumerate() {
            if w == &format!("--{name}") {
                found = words.get(i + 1).cloned().or(found);
            } else if let Some(value) = w.strip_prefix(&with_equals) {
                found = Some(value.to_string());
            }
        }
        found
    };
    GlobalArgs {
        kubeconfig: flag("kubeconfig").map(Into::into),
        context: flag("context"),
        cluster: flag("cluster"),
        user: flag("user"),
        request_timeout: Some(
            flag("request-timeout")
                .and_then(|t| parse_timeout(&t).ok())
                .filter(|t| !t.is_zero())
                .unwrap_or(CLUSTER_TIMEOUT),
        ),
        ..Default::default()
    }
}

/// The names of the cluster's Bundles that are `offered`, sorted; none when the cluster cannot
/// be read.
pub(super) async fn bundle_names(global: &GlobalArgs, offered: Offered) -> Vec<String> {
    let list = async {
        let client = global.client().await?;
        let bundles: Api<Bundle> = Api::all(client);
        let params = ListParams::default();
        // Names alone, unless the status decides.
        let names: Vec<String> = if offered == Offered::All {
            let listed = bundles.list_metadata(&params).await?;
            listed
                .items
                .into_iter()
                .filter_map(|b| b.metadata.name)
                .collect()
        } else {
            let listed = bundles.list(&params).await?;
            listed
                .items
                .iter()
                .filter(|b| offered.offers(b))
                .map(|b| b.name_any())
                .collect()
        };
        anyhow::Ok(names)
    };
    let wait = global.request_timeout.unwrap_or(CLUSTER_TIMEOUT);
    match tokio::time::timeout(wait, list).await {
        Ok(Ok(mut names)) => {
            names.sort();
            names
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::complete::tests::words;

    #[test]
    fn cluster_flags_come_from_the_words() {
        let flags = cluster_flags(&words(
            "status --kubeconfig /k --context=c --request-timeout 2s",
        ));
        assert_eq!(flags.kubeconfig, Some("/k".into()));
        assert_eq!(flags.context.as_deref(), Some("c"));
        assert_eq!(flags.request_timeout, Some(Duration::from_secs(2)));
        assert_eq!(
            cluster_flags(&words("status")).request_timeout,
            Some(CLUSTER_TIMEOUT)
        );
    }
}
