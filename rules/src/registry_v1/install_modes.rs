//! Which namespaces an operator watches: its CSV's install modes and the bundle's
//! `spec.config.watchNamespace`.

use serde_json::Value;

use super::RegistryError;

/// A CSV install mode (`spec.installModes[].type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum InstallMode {
    AllNamespaces,
    MultiNamespace,
    OwnNamespace,
    SingleNamespace,
}

impl InstallMode {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "AllNamespaces" => Self::AllNamespaces,
            "MultiNamespace" => Self::MultiNamespace,
            "OwnNamespace" => Self::OwnNamespace,
            "SingleNamespace" => Self::SingleNamespace,
            _ => return None,
        })
    }

    /// The install modes a CSV spec marks supported.
    pub fn supported(spec: &Value) -> Vec<Self> {
        let mut modes: Vec<Self> = spec["installModes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["supported"].as_bool() == Some(true))
            .filter_map(|m| m["type"].as_str().and_then(Self::parse))
            .collect();
        modes.sort();
        modes.dedup();
        modes
    }
}

/// The namespaces the operator watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetNamespaces {
    All,
    Some(Vec<String>),
}

impl TargetNamespaces {
    /// What `watch_namespace` asks for, if the CSV `csv` (its `spec`) supports it: all namespaces when absent
    /// (AllNamespaces), the install namespace (OwnNamespace) or another one (SingleNamespace).
    pub fn resolve(
        csv: &str,
        spec: &Value,
        install_namespace: &str,
        watch_namespace: Option<&str>,
    ) -> Result<Self, RegistryError> {
        let modes = InstallMode::supported(spec);
        let listed = || {
            modes
                .iter()
                .map(|m| format!("{m:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !modes.iter().any(|m| {
            matches!(
                m,
                InstallMode::AllNamespaces
                    | InstallMode::OwnNamespace
                    | InstallMode::SingleNamespace
            )
        }) {
            return Err(RegistryError::Unsupported {
                csv: csv.to_string(),
                field: "spec.installModes".into(),
                message: format!(
                    "supports [{}]; Gantry installs AllNamespaces, OwnNamespace or SingleNamespace",
                    listed()
                ),
            });
        }
        match watch_namespace {
            None | Some("") => {
                if modes.contains(&InstallMode::AllNamespaces) {
                    Ok(Self::All)
                } else {
                    Err(RegistryError::WatchNamespace(format!(
                        "required: the operator supports [{}], not AllNamespaces; name the namespace it watches",
                        listed()
                    )))
                }
            }
            Some(namespace) => {
                if let Err(why) = gantry_image::objects::dns_label(namespace) {
                    return Err(RegistryError::WatchNamespace(format!(
                        "{namespace:?} is not a namespace name: {why}"
                    )));
                }
                let (mode, what) = if namespace == install_namespace {
                    (InstallMode::OwnNamespace, "its own namespace")
                } else {
                    (
                        InstallMode::SingleNamespace,
                        "a namespace other than its own",
                    )
                };
                if modes.contains(&mode) {
                    Ok(Self::Some(vec![namespace.to_string()]))
                } else {
                    Err(RegistryError::WatchNamespace(format!(
                        "{namespace} is {what} ({install_namespace} is the install namespace), which needs {mode:?}; the operator supports [{}]",
                        listed()
                    )))
                }
            }
        }
    }

    /// The value of the pod template annotation `olm.targetNamespaces`.
    pub fn annotation(&self) -> String {
        match self {
            Self::All => String::new(),
            Self::Some(namespaces) => namespaces.join(","),
        }
    }
}
