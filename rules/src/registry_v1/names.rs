//! The names OLM v1 gives the Roles and ClusterRoles it makes from a CSV's permissions, so that
//! Gantry's objects carry the same names: `<csv>-<service account>-<hash>`, the hash the SHA-224
//! of the permission as Go's `encoding/json` writes it, in base 36, the base cut so the whole
//! fits in 63 characters.

use serde_json::Value;
use sha2::{Digest, Sha224};

/// The longest object name the hash suffix is fitted into.
const MAX_NAME: usize = 63;

/// The name for `permission` (a CSV `permissions[]` or `clusterPermissions[]` entry) of the
/// CSV `csv`.
pub fn permission_name(csv: &str, permission: &Value) -> String {
    let base = format!("{csv}-{}", service_account(permission));
    let hash = base36(&Sha224::digest(go_json(permission).as_bytes()));
    with_suffix(&base, &hash)
}

/// The service account a permission entry is for: `default` when it names none.
pub fn service_account(permission: &Value) -> &str {
    permission["serviceAccountName"]
        .as_str()
        .filter(|a| !a.is_empty())
        .unwrap_or("default")
}

/// `base-suffix`, `base` cut (at a byte) so the whole is at most 63 bytes.
pub fn with_suffix(base: &str, suffix: &str) -> String {
    let mut base = base;
    if base.len() + suffix.len() > MAX_NAME {
        let keep = MAX_NAME.saturating_sub(suffix.len() + 1);
        let mut cut = keep.min(base.len());
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base = &base[..cut];
    }
    format!("{base}-{suffix}")
}

/// The permission as Go's `json.Encoder` writes OLM's struct: fields in the struct's order,
/// `verbs` always, the other rule fields only when not empty, a newline at the end.
fn go_json(permission: &Value) -> String {
    let mut out = String::from("{\"serviceAccountName\":");
    crate::go_json::write_string(
        permission["serviceAccountName"].as_str().unwrap_or(""),
        &mut out,
    );
    out.push_str(",\"rules\":");
    match permission["rules"].as_array() {
        None => out.push_str("null"),
        Some(rules) => {
            out.push('[');
            for (i, rule) in rules.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("{\"verbs\":");
                match rule["verbs"].as_array() {
                    Some(verbs) => go_strings(verbs, &mut out),
                    None => out.push_str("null"),
                }
                for field in ["apiGroups", "resources", "resourceNames", "nonResourceURLs"] {
                    if let Some(values) = rule[field].as_array().filter(|v| !v.is_empty()) {
                        out.push_str(",\"");
                        out.push_str(field);
                        out.push_str("\":");
                        go_strings(values, &mut out);
                    }
                }
                out.push('}');
            }
            out.push(']');
        }
    }
    out.push_str("}\n");
    out
}

fn go_strings(values: &[Value], out: &mut String) {
    out.push('[');
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        crate::go_json::write_string(value.as_str().unwrap_or(""), out);
    }
    out.push(']');
}

/// `bytes` as one big-endian number, in base 36 (`0-9a-z`), without leading zeros.
fn base36(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut number: Vec<u8> = bytes.iter().copied().skip_while(|b| *b == 0).collect();
    let mut digits = Vec::new();
    while !number.is_empty() {
        let mut remainder = 0u32;
        let mut quotient = Vec::with_capacity(number.len());
        for byte in &number {
            let value = (remainder << 8) | u32::from(*byte);
            let digit = value / 36;
            remainder = value % 36;
            if !(quotient.is_empty() && digit == 0) {
                quotient.push(digit as u8);
            }
        }
        digits.push(DIGITS[remainder as usize]);
        number = quotient;
    }
    if digits.is_empty() {
        digits.push(b'0');
    }
    digits.reverse();
    String::from_utf8(digits).expect("ASCII digits")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn base36_is_the_number_in_base_36() {
        assert_eq!(base36(&[0]), "0");
        assert_eq!(base36(&[35]), "z");
        assert_eq!(base36(&[36]), "10");
        assert_eq!(base36(&[1, 0]), "74"); // 256
        assert_eq!(base36(&[0, 0, 1, 0]), "74");
    }

    #[test]
    fn go_json_keeps_the_struct_order_and_leaves_out_empty_fields() {
        let permission = json!({
            "serviceAccountName": "sa",
            "rules": [
                {"resources": ["pods"], "apiGroups": [""], "verbs": ["get"], "resourceNames": []},
                {"nonResourceURLs": ["/metrics"]}
            ]
        });
        assert_eq!(
            go_json(&permission),
            "{\"serviceAccountName\":\"sa\",\"rules\":[{\"verbs\":[\"get\"],\"apiGroups\":[\"\"],\
             \"resources\":[\"pods\"]},{\"verbs\":null,\"nonResourceURLs\":[\"/metrics\"]}]}\n"
        );
    }

    #[test]
    fn a_long_base_is_cut_to_fit_63_characters() {
        let name = with_suffix(&"a".repeat(60), "hash");
        assert_eq!(name.len(), 63);
        assert!(name.ends_with("a-hash"));
        assert_eq!(with_suffix("csv-sa", "h"), "csv-sa-h");
    }
}
