//! The CRD upgrade check against the cluster: each CRD of a plan that exists live compared
//! with its new content ([`crd_upgrade::compare`]), with the findings that depend on stored
//! objects confirmed by reading them. Used before an apply (unsafe changes refuse it) and while
//! a digest awaits an approver (the findings are shown to them first).

use std::collections::HashMap;

use gantry_api::PermissionHighlight;
use kube::ResourceExt;
use kube::api::DynamicObject;

use crate::cluster::crds;
use crate::error::Result;
use crate::state::Context;
use gantry_rules::crd_upgrade::{self, Change};
use gantry_rules::plan::Plan;

/// The unsafe changes found for one CRD of a plan.
pub(crate) struct CrdFindings {
    /// The CRD's name.
    pub name: String,
    /// Each finding, with the stored objects that make it unsafe where that is what counts.
    pub findings: Vec<String>,
    /// Whether the CRD in the bundle accepts them (`gantry.dev/crd-upgrade: unsafe-allowed`).
    pub allowed_by_crd: bool,
}

impl CrdFindings {
    /// The findings as highlights of the requested permissions: what an approver reads first.
    pub fn highlights(&self) -> impl Iterator<Item = PermissionHighlight> + '_ {
        let allowed = if self.allowed_by_crd {
            " (the CRD accepts it: gantry.dev/crd-upgrade: unsafe-allowed)"
        } else {
            ""
        };
        self.findings
            .iter()
            .map(move |finding| PermissionHighlight {
                group: "apiextensions.k8s.io".into(),
                kind: "CustomResourceDefinition".into(),
                namespace: None,
                name: self.name.clone(),
                reason: format!("unsafe CRD upgrade: {finding}{allowed}"),
            })
    }
}

/// Every CRD of `plan` that exists live, with its unsafe changes; CRDs without any are left
/// out. A served version no longer served counts only when objects are read through it; a
/// tightened limit or a removed enum value only when objects hold values it refuses.
pub(crate) async fn findings(ctx: &Context, plan: &Plan) -> Result<Vec<CrdFindings>> {
    let mut all = Vec::new();
    for object in &plan.objects {
        let Some(name) = object.defines_crd.as_deref() else {
            continue;
        };
        let Some(live) = crds::read_live(&ctx.client, name).await? else {
            continue;
        };
        let new = object.value();
        let mut found = Vec::new();
        // Objects of the live CRD by version, read once and only if a finding needs them.
        let mut stored: HashMap<String, Vec<DynamicObject>> = HashMap::new();
        for finding in crd_upgrade::compare(&live, &new) {
            let Some(version) = finding.version.clone() else {
                found.push(finding.to_string());
                continue;
            };
            if finding.change == Change::NoLongerServed {
                if crds::has_objects(&ctx.client, &live, &version).await? {
                    found.push(finding.to_string());
                }
                continue;
            }
            if !finding.concerns_values() {
                found.push(finding.to_string());
                continue;
            }
            if !stored.contains_key(&version) {
                let objects = crds::list_objects(&ctx.client, &live, &version).await?;
                stored.insert(version.clone(), objects);
            }
            let holders: Vec<String> = stored[&version]
                .iter()
                .filter(|o| finding.refuses(&o.data))
                .map(|o| match o.namespace() {
                    Some(ns) => format!("{ns}/{}", o.name_any()),
                    None => o.name_any(),
                })
                .collect();
            if !holders.is_empty() {
                found.push(format!("{finding}, held by {}", holders.join(", ")));
            }
        }
        if !found.is_empty() {
            all.push(CrdFindings {
                name: name.to_string(),
                findings: found,
                allowed_by_crd: crd_upgrade::unsafe_allowed(&new),
            });
        }
    }
    Ok(all)
}
