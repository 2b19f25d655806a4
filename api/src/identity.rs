//! The identity the provisioner takes on for a bundle's objects.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A ServiceAccount, by namespace and name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountReference {
    /// Namespace of the ServiceAccount.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub namespace: String,
    /// Name of the ServiceAccount.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

impl ServiceAccountReference {
    /// The user name the API server knows the ServiceAccount by:
    /// `system:serviceaccount:<namespace>:<name>`.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

impl std::fmt::Display for ServiceAccountReference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Parses `namespace/name` (or `namespace:name`), as flags write a ServiceAccount.
impl std::str::FromStr for ServiceAccountReference {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (namespace, name) = text
            .split_once(['/', ':'])
            .ok_or_else(|| format!("{text:?}: expected NAMESPACE/NAME"))?;
        if namespace.is_empty() || name.is_empty() || name.contains(['/', ':']) {
            return Err(format!("{text:?}: expected NAMESPACE/NAME"));
        }
        Ok(Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_names_a_service_account() {
        let sa: ServiceAccountReference = "gantry-system/gantry-applier".parse().unwrap();
        assert_eq!(sa.namespace, "gantry-system");
        assert_eq!(
            sa.username(),
            "system:serviceaccount:gantry-system:gantry-applier"
        );
        assert_eq!(sa.to_string(), "gantry-system/gantry-applier");
        assert!("nonamespace".parse::<ServiceAccountReference>().is_err());
        assert!("a/b/c".parse::<ServiceAccountReference>().is_err());
        assert!("/b".parse::<ServiceAccountReference>().is_err());
    }
}
