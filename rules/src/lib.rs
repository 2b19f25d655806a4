//! Decisions made from data alone, without a cluster, shared by every part of Gantry: the
//! provisioner, the kubectl plugin (its commands and review page) and the provisioner plugins.
//! Nothing here talks to an API server; every rule is tested without one.

pub mod allowed_images;
pub mod approval;
pub mod class_selection;
pub mod conditions;
pub mod config;
pub mod crd_upgrade;
pub mod duration;
pub mod go_json;
pub mod health;
pub mod health_policy;
pub mod health_rules;
pub mod identity;
pub mod kstatus;
pub mod managed_fields;
pub mod object_policy;
pub mod permissions;
pub mod plan;
pub mod registry_v1;
pub mod version_range;

/// "1 object", "3 objects": counts in messages.
pub fn objects(count: usize) -> String {
    if count == 1 {
        "1 object".to_string()
    } else {
        format!("{count} objects")
    }
}

#[cfg(test)]
mod tests {
    /// The crate stays client-free: no Kubernetes client, HTTP stack, runtime or binary crate
    /// among its dependencies (kube-core's types are all it takes from kube).
    #[test]
    fn depends_on_no_client_runtime_or_binary_crate() {
        let forbidden = |name: &str| {
            [
                "kube",
                "reqwest",
                "tokio",
                "hyper",
                "kubectl-bundle",
                "gantry-tests",
            ]
            .contains(&name)
                || name.starts_with("hyper-")
                || name.starts_with("tokio-")
                || ["gantry-provisioner", "gantry-storage", "gantry-unpack"].contains(&name)
        };
        let mut section = "";
        for line in include_str!("../Cargo.toml").lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.trim_matches(['[', ']']);
                // `[dependencies.kube]` names its crate in the header.
                if let Some((table, name)) = section.split_once('.') {
                    assert!(
                        !(table.ends_with("dependencies") && forbidden(name)),
                        "rules/Cargo.toml [{section}]"
                    );
                }
            } else if section.ends_with("dependencies")
                && !line.is_empty()
                && !line.starts_with('#')
            {
                let name = line.split(['.', '=', ' ']).next().unwrap_or_default();
                assert!(
                    !forbidden(name),
                    "rules/Cargo.toml [{section}] names {name}: gantry-rules takes no Kubernetes client, runtime or binary crate"
                );
            }
        }
    }
}
