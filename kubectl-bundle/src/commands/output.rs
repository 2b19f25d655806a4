//! Printing as kubectl does: `-o json|yaml|name|wide|jsonpath=TEMPLATE`, lists as `kind: List`,
//! aligned tables, ages.

use std::io::Write;

use anyhow::{Context, bail};
use jsonpath_rust::JsonPath;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

/// An `-o` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Wide,
    Json,
    Yaml,
    Name,
    /// kubectl's JSONPath template: `{.status.phase}`, `{.items[*].metadata.name}`, literal text
    /// between expressions.
    JsonPath(String),
}

/// Parses an `-o` value.
pub fn parse_output(text: &str) -> Result<OutputFormat, String> {
    match text {
        "wide" => Ok(OutputFormat::Wide),
        "json" => Ok(OutputFormat::Json),
        "yaml" => Ok(OutputFormat::Yaml),
        "name" => Ok(OutputFormat::Name),
        _ => match text.split_once('=') {
            Some(("jsonpath", template)) if !template.is_empty() => {
                // Checked now, so a bad template is a command-line error.
                expressions(template)?;
                Ok(OutputFormat::JsonPath(template.to_string()))
            }
            _ => Err(format!(
                "unknown output format {text:?}: use json, yaml, name, wide or jsonpath=TEMPLATE"
            )),
        },
    }
}

/// The parts of a JSONPath template: literal text, and expressions as RFC 9535 queries.
enum Part {
    Text(String),
    /// An RFC 9535 query, checked.
    Query(String),
}

fn expressions(template: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            parts.push(Part::Text(rest[..open].to_string()));
        }
        let close = rest[open..]
            .find('}')
            .map(|i| open + i)
            .ok_or_else(|| format!("unclosed {{ in JSONPath template {template:?}"))?;
        let expression = rest[open + 1..close].trim();
        // kubectl's `.a.b` is `$.a.b`; `@` in filters is the same in both.
        let query = if expression.starts_with('$') {
            expression.to_string()
        } else {
            format!("${expression}")
        };
        jsonpath_rust::parser::parse_json_path(&query)
            .map_err(|e| format!("invalid JSONPath expression {{{expression}}}: {e}"))?;
        parts.push(Part::Query(query));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.to_string()));
    }
    Ok(parts)
}

/// Applies a JSONPath template as kubectl does: several matches are joined by spaces, strings
/// are printed bare, other values as JSON.
pub fn jsonpath(template: &str, value: &Value) -> anyhow::Result<String> {
    let mut out = String::new();
    for part in expressions(template).map_err(anyhow::Error::msg)? {
        match part {
            Part::Text(text) => out.push_str(&text.replace("\\n", "\n").replace("\\t", "\t")),
            Part::Query(query) => {
                let found: Vec<String> = value
                    .query(&query)
                    .map_err(|e| anyhow::anyhow!("JSONPath {query}: {e}"))?
                    .into_iter()
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect();
                out.push_str(&found.join(" "));
            }
        }
    }
    Ok(out)
}

/// An error and its causes on one line, `a: b: c`, each cause said once. Many error types
/// (kube's configuration errors, `std::io` wrappers) put their source's text into their own
/// message *and* return the source as `source()`, so anyhow's `{:#}` would print it twice
/// (`...: environment variable not found: environment variable not found`): a cause whose text
/// the line already ends with is left out.
pub fn causes(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// An API object as JSON, without `metadata.managedFields` (as kubectl prints it).
pub fn clean(object: &impl Serialize) -> anyhow::Result<Value> {
    let mut value = serde_json::to_value(object).context("encoding an object")?;
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    Ok(value)
}

/// Objects as kubectl prints several: a `v1 List`.
pub fn list_of<T: Serialize>(items: &[T]) -> anyhow::Result<Value> {
    let items = items
        .iter()
        .map(clean)
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": { "resourceVersion": "" },
        "items": items,
    }))
}

/// `kind.group/name` of an object, as `-o name` prints it.
fn resource_name(object: &Value) -> Option<String> {
    let kind = object.get("kind")?.as_str()?.to_lowercase();
    let name = object.pointer("/metadata/name")?.as_str()?;
    let group = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.split_once('/'))
        .map(|(group, _)| format!(".{group}"))
        .unwrap_or_default();
    Some(format!("{kind}{group}/{name}"))
}

/// Prints `value` in a machine format; `false` when the format is a table (none or `wide`),
/// which the caller prints.
pub fn print_structured(value: &Value, format: Option<&OutputFormat>) -> anyhow::Result<bool> {
    let mut out = std::io::stdout().lock();
    match format {
        None | Some(OutputFormat::Wide) => return Ok(false),
        Some(OutputFormat::Json) => writeln!(out, "{}", serde_json::to_string_pretty(value)?)?,
        Some(OutputFormat::Yaml) => write!(out, "{}", serde_saphyr::to_string(value)?)?,
        Some(OutputFormat::JsonPath(template)) => write!(out, "{}", jsonpath(template, value)?)?,
        Some(OutputFormat::Name) => {
            let objects = match value.get("items").and_then(Value::as_array) {
                Some(items) if value.get("kind") == Some(&json!("List")) => items.iter().collect(),
                _ => vec![value],
            };
            for object in objects {
                match resource_name(object) {
                    Some(name) => writeln!(out, "{name}")?,
                    None => bail!("-o name needs API objects; this output has none"),
                }
            }
        }
    }
    Ok(true)
}

/// Prints rows as an aligned table (the first row is the header).
/// "1 object", "3 objects": a count and its noun, in English.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

pub fn print_table(rows: &[Vec<String>]) {
    let _ = write!(std::io::stdout().lock(), "{}", table(rows));
}

/// Rows as an aligned table, columns three spaces apart.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| format!("{cell:<width$}", width = widths[i]))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

/// Time since `then`, as kubectl shows ages: `45s`, `12m`, `5h`, `3d`.
pub fn age(then: Timestamp) -> String {
    let seconds = Timestamp::now()
        .as_second()
        .saturating_sub(then.as_second())
        .max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 120 * 60 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_formats_parse_as_kubectl_names_them() {
        assert_eq!(parse_output("json"), Ok(OutputFormat::Json));
        assert_eq!(parse_output("name"), Ok(OutputFormat::Name));
        assert_eq!(
            parse_output("jsonpath={.a}"),
            Ok(OutputFormat::JsonPath("{.a}".into()))
        );
        assert!(parse_output("jsonpath={.a").is_err());
        assert!(parse_output("table").is_err());
    }

    #[test]
    fn jsonpath_templates_print_as_kubectl_does() {
        let list = json!({"kind": "List", "items": [
            {"metadata": {"name": "a"}, "status": {"phase": "Installed"}},
            {"metadata": {"name": "b"}, "status": {"phase": "Failing"}},
        ]});
        assert_eq!(jsonpath("{.items[*].metadata.name}", &list).unwrap(), "a b");
        assert_eq!(
            jsonpath("first={.items[0].status.phase}\\n", &list).unwrap(),
            "first=Installed\n"
        );
        assert_eq!(
            jsonpath(
                "{.items[?(@.status.phase=='Failing')].metadata.name}",
                &list
            )
            .unwrap(),
            "b"
        );
    }

    #[test]
    fn each_cause_is_said_once() {
        #[derive(Debug)]
        struct Wrapper(std::io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "failed to read file: {}", self.0)
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let io_text = io.to_string();
        let error = anyhow::Error::new(Wrapper(io)).context("reading the CA file ca.pem");
        assert_eq!(
            causes(&error),
            format!("reading the CA file ca.pem: failed to read file: {io_text}")
        );
        assert_eq!(
            format!("{error:#}").matches(&io_text).count(),
            2,
            "anyhow's own"
        );
        // Causes that do not repeat are all kept.
        let plain = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(causes(&plain), "outer: middle: inner");
    }

    #[test]
    fn lists_drop_managed_fields() {
        let list = list_of(&[
            json!({"apiVersion": "gantry.dev/v1alpha1", "kind": "Bundle",
            "metadata": {"name": "a", "managedFields": [{}]}}),
        ])
        .unwrap();
        assert_eq!(list["kind"], "List");
        assert_eq!(list["apiVersion"], "v1");
        assert!(list["items"][0]["metadata"].get("managedFields").is_none());
        assert_eq!(
            resource_name(&list["items"][0]).as_deref(),
            Some("bundle.gantry.dev/a")
        );
    }
}
