//! `events` and `tree`: what happened to a bundle, and the objects it manages as they are now.

use std::collections::{HashMap, HashSet};

use anyhow::Context;
use clap::Args;
use gantry_api::conditions::types;
use gantry_api::{Bundle, BundleStatus, InventoryEntry};
use gantry_rules::conditions::{ConditionStatus, find};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::discovery::{ApiCapabilities, Scope};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::cluster::{GlobalArgs, get_bundles, read_bundle};
use super::output::{
    OutputFormat, age, colours, header, list_of, parse_output, print_structured, styled_table,
    table,
};
use super::review::kind_of;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle events my-app\n  kubectl bundle events my-app -o yaml"
)]
pub struct EventsArgs {
    /// The bundle.
    name: String,
    /// Output format: json, yaml, name, jsonpath=TEMPLATE or custom-columns=SPEC (a `v1 List`
    /// of Events).
    #[arg(short = 'o', long = "output", value_parser = parse_output)]
    output: Option<OutputFormat>,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle tree my-app\n  kubectl bundle tree app-a app-b\n  kubectl bundle tree my-app -o json"
)]
pub struct TreeArgs {
    /// The bundles (one or more).
    #[arg(required = true, value_name = "NAME")]
    names: Vec<String>,
    /// Output format: json, yaml, name, jsonpath=TEMPLATE or custom-columns=SPEC (a `v1 List`
    /// of the objects with `bundle`, `exists`, `health` and `summary`).
    #[arg(short = 'o', long = "output", value_parser = parse_output)]
    output: Option<OutputFormat>,
}

/// When an event last happened: its series, its last timestamp, its event time, its creation.
pub(crate) fn last_seen(event: &Event) -> Option<Timestamp> {
    event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0)
        .or(event.last_timestamp.as_ref().map(|t| t.0))
        .or(event.event_time.as_ref().map(|t| t.0))
        .or(event.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

fn count(event: &Event) -> i32 {
    event
        .series
        .as_ref()
        .and_then(|s| s.count)
        .or(event.count)
        .unwrap_or(1)
        .max(1)
}

/// The bundle's own Events (matched by UID, so a re-created bundle does not show its
/// predecessor's), plus, with `warnings_of_objects`, the Warning Events of the objects in its
/// inventory; oldest first.
pub async fn bundle_events(
    client: &Client,
    bundle: &Bundle,
    warnings_of_objects: bool,
) -> anyhow::Result<Vec<Event>> {
    let events: Api<Event> = Api::all(client.clone());
    let uid = bundle.uid().context("the bundle has no UID")?;
    let mut found = events
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await
        .context("listing the bundle's Events")?
        .items;
    if warnings_of_objects {
        let inventory: HashSet<(&str, &str, &str)> = bundle
            .status
            .iter()
            .flat_map(|s| &s.inventory)
            .map(|e| {
                (
                    e.kind.as_str(),
                    e.namespace.as_deref().unwrap_or(""),
                    e.name.as_str(),
                )
            })
            .collect();
        let warnings = events
            .list(&ListParams::default().fields("type=Warning"))
            .await
            .context("listing Warning Events")?
            .items;
        found.extend(warnings.into_iter().filter(|e| {
            let o = &e.involved_object;
            inventory.contains(&(
                o.kind.as_deref().unwrap_or(""),
                o.namespace.as_deref().unwrap_or(""),
                o.name.as_deref().unwrap_or(""),
            ))
        }));
    }
    found.sort_by_key(last_seen);
    Ok(found)
}

/// Events as kubectl shows them: LAST SEEN, TYPE, REASON, OBJECT, COUNT, MESSAGE.
pub fn events_table(events: &[Event]) -> String {
    let mut rows = vec![header(&[
        "LAST SEEN",
        "TYPE",
        "REASON",
        "OBJECT",
        "COUNT",
        "MESSAGE",
    ])];
    for e in events {
        let o = &e.involved_object;
        rows.push(vec![
            last_seen(e).map(age).unwrap_or_else(|| "-".into()),
            e.type_.clone().unwrap_or_default(),
            e.reason.clone().unwrap_or_default(),
            format!(
                "{}/{}",
                o.kind.as_deref().unwrap_or("").to_lowercase(),
                o.name.as_deref().unwrap_or("")
            ),
            count(e).to_string(),
            e.message.clone().unwrap_or_default().replace('\n', " "),
        ]);
    }
    table(&rows)
}

pub async fn events(global: &GlobalArgs, args: EventsArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    let bundle = read_bundle(&Api::all(client.clone()), &args.name).await?;
    let events = bundle_events(&client, &bundle, true).await?;
    if print_structured(&list_of(&events)?, args.output.as_ref())? {
        return Ok(());
    }
    if events.is_empty() {
        eprintln!("No events for bundle {}.", args.name);
    } else {
        print!("{}", events_table(&events));
    }
    Ok(())
}

/// One managed object as it is now.
struct Node {
    entry: InventoryEntry,
    /// `None` when the object does not exist.
    object: Option<DynamicObject>,
}

/// A short readiness summary from the status conditions and replica counts an object has.
pub fn readiness(status: Option<&Value>) -> String {
    let Some(status) = status else {
        return "-".into();
    };
    let mut parts = Vec::new();
    if let Some(conditions) = status.get("conditions").and_then(Value::as_array) {
        let field = |c: &Value, f: &str| c.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        let preferred = ["Ready", "Available", "Established", "Complete", "Succeeded"];
        let chosen = preferred
            .iter()
            .find_map(|t| conditions.iter().find(|c| field(c, "type") == *t))
            .or(conditions.first());
        if let Some(c) = chosen {
            let mut part = format!("{}={}", field(c, "type"), field(c, "status"));
            if ConditionStatus::from(field(c, "status").as_str()) != ConditionStatus::True
                && !field(c, "reason").is_empty()
            {
                part.push_str(&format!(" ({})", field(c, "reason")));
            }
            parts.push(part);
        }
    }
    let number = |f: &str| status.get(f).and_then(Value::as_i64);
    if let Some(replicas) = number("replicas") {
        parts.push(format!(
            "{}/{replicas} ready",
            number("readyReplicas").unwrap_or(0)
        ));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// The health `status.objectHealth` gives `entry` (`Healthy`, `Progressing`, `Failed`, or `-`
/// when the status does not say: not assessed yet, or beyond the objects it lists), and why it
/// is not healthy.
fn object_health<'a>(
    status: &'a BundleStatus,
    entry: &InventoryEntry,
) -> (&'a str, Option<&'a str>) {
    let Some(health) = &status.object_health else {
        return ("-", None);
    };
    if let Some(object) = health.not_healthy.iter().find(|o| o.is(entry)) {
        return (object.state.as_str(), Some(object.message.as_str()));
    }
    // The list is complete unless it was capped: only then is an unlisted object healthy.
    let listed_all = health.not_healthy.len() as i64 == health.progressing + health.failed;
    (if listed_all { "Healthy" } else { "-" }, None)
}

/// The colour of a health state on a terminal: green, yellow, red.
fn health_colour(state: &str) -> Option<&'static str> {
    match state {
        "Healthy" => Some("32"),
        "Progressing" => Some("33"),
        "Failed" => Some("31"),
        _ => None,
    }
}

fn kind_name(entry: &InventoryEntry) -> String {
    kind_of(&entry.group, &entry.kind)
}

async fn node(
    client: &Client,
    resources: &mut HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>,
    entry: &InventoryEntry,
) -> anyhow::Result<Node> {
    let gvk = GroupVersionKind::gvk(&entry.group, &entry.version, &entry.kind);
    if !resources.contains_key(&gvk) {
        let found = kube::discovery::pinned_kind(client, &gvk)
            .await
            .with_context(|| format!("finding the API of {}", kind_name(entry)))?;
        resources.insert(gvk.clone(), found);
    }
    let (resource, capabilities) = &resources[&gvk];
    let api: Api<DynamicObject> = match (&capabilities.scope, &entry.namespace) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, resource),
        _ => Api::all_with(client.clone(), resource),
    };
    let object = api
        .get_opt(&entry.name)
        .await
        .with_context(|| format!("reading {} {}", kind_name(entry), entry.name))?;
    Ok(Node {
        entry: entry.clone(),
        object,
    })
}

pub async fn tree(global: &GlobalArgs, args: TreeArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    let (found, refused) = get_bundles(&Api::all(client.clone()), &args.names).await?;
    let mut resources = HashMap::new();
    let mut trees = Vec::new();
    for bundle in &found {
        trees.push(objects(&client, &mut resources, bundle).await?);
    }
    let entries: Vec<&Value> = trees.iter().flat_map(|(_, entries)| entries).collect();
    if !print_structured(&list_of(&entries)?, args.output.as_ref())? {
        for (i, (bundle, (nodes, entries))) in found.iter().zip(&trees).enumerate() {
            if i > 0 {
                println!();
            }
            print_tree(bundle, nodes, entries);
        }
    }
    refused.map_or(Ok(()), |r| Err(r.into()))
}

/// The objects of `bundle`'s inventory as they are now, and each as `-o json` prints it.
async fn objects(
    client: &Client,
    resources: &mut HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>,
    bundle: &Bundle,
) -> anyhow::Result<(Vec<Node>, Vec<Value>)> {
    let status = bundle.status.clone().unwrap_or_default();
    let mut nodes = Vec::new();
    for entry in &status.inventory {
        nodes.push(node(client, resources, entry).await?);
    }
    let entries: Vec<Value> = nodes
        .iter()
        .map(|n| {
            let e = &n.entry;
            let api_version = if e.group.is_empty() {
                e.version.clone()
            } else {
                format!("{}/{}", e.group, e.version)
            };
            let mut metadata = json!({ "name": e.name });
            if let Some(ns) = &e.namespace {
                metadata["namespace"] = json!(ns);
            }
            let (health, why) = object_health(&status, e);
            let mut item = json!({
                "apiVersion": api_version,
                "kind": e.kind,
                "metadata": metadata,
                "bundle": bundle.name_any(),
                "exists": n.object.is_some(),
                "health": health,
                "summary": readiness(n.object.as_ref().and_then(|o| o.data.get("status"))),
            });
            if let Some(why) = why {
                item["healthMessage"] = json!(why);
            }
            item
        })
        .collect();
    Ok((nodes, entries))
}

/// One bundle's tree: the bundle, its objects, and why those that are not healthy are not.
fn print_tree(bundle: &Bundle, nodes: &[Node], entries: &[Value]) {
    let status = bundle.status.clone().unwrap_or_default();
    let state = |type_: &str| {
        let condition = find(&status.conditions, type_);
        condition.map_or_else(|| "-".into(), |c| format!("{type_}={}", c.status))
    };
    let (ready, healthy) = (state(types::READY), state(types::HEALTHY));
    let mut rows = vec![
        header(&["OBJECT", "NAMESPACE", "STATUS", "HEALTH", "SUMMARY"]),
        vec![
            format!("Bundle/{}", bundle.name_any()),
            String::new(),
            status.phase.map(|p| p.to_string()).unwrap_or_default(),
            healthy,
            ready,
        ],
    ];
    for (i, (n, entry)) in nodes.iter().zip(entries).enumerate() {
        let branch = if i + 1 == nodes.len() {
            "└─"
        } else {
            "├─"
        };
        rows.push(vec![
            format!("{branch} {}/{}", kind_name(&n.entry), n.entry.name),
            n.entry.namespace.clone().unwrap_or_default(),
            if n.object.is_some() {
                "Exists"
            } else {
                "Missing"
            }
            .into(),
            entry["health"].as_str().unwrap_or("-").to_string(),
            entry["summary"].as_str().unwrap_or("-").to_string(),
        ]);
    }
    let colours = colours();
    print!(
        "{}",
        styled_table(&rows, |row, column, cell| {
            (colours && row > 0 && column == 3).then(|| health_colour(cell))?
        })
    );
    // Why each object that is not healthy is not, as the provisioner last assessed it.
    let reasons: Vec<String> = nodes
        .iter()
        .filter_map(|n| {
            let (_, why) = object_health(&status, &n.entry);
            why.map(|why| format!("  {}/{}: {why}", kind_name(&n.entry), n.entry.name))
        })
        .collect();
    if !reasons.is_empty() {
        println!("\nNot healthy:\n{}", reasons.join("\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_reads_conditions_and_replicas() {
        assert_eq!(readiness(None), "-");
        assert_eq!(readiness(Some(&json!({}))), "-");
        assert_eq!(
            readiness(Some(&json!({
                "replicas": 3, "readyReplicas": 1,
                "conditions": [
                    {"type": "Progressing", "status": "True"},
                    {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
                ],
            }))),
            "Available=False (MinimumReplicasUnavailable), 1/3 ready"
        );
        assert_eq!(
            readiness(Some(
                &json!({"conditions": [{"type": "Established", "status": "True"}]})
            )),
            "Established=True"
        );
    }
}
