//! Printing as kubectl does: `-o json|yaml|name|wide|jsonpath=TEMPLATE|custom-columns=SPEC`,
//! lists as `kind: List`, aligned tables, ages.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, bail};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use super::jsonpath::{Template, go_sprint, relaxed};

/// An `-o` value.
#[derive(Clone, Debug, PartialEq)]
pub enum OutputFormat {
    Wide,
    Json,
    Yaml,
    Name,
    /// kubectl's JSONPath template (`{.status.phase}`, `{range .items[*]}...{end}`, literal
    /// text between actions), parsed.
    JsonPath(Template),
    /// kubectl's `custom-columns=HEADER:EXPRESSION,...`: each column's header and template.
    CustomColumns(Vec<(String, Template)>),
}

/// Parses an `-o` value.
pub fn parse_output(text: &str) -> Result<OutputFormat, String> {
    match text {
        "wide" => Ok(OutputFormat::Wide),
        "json" => Ok(OutputFormat::Json),
        "yaml" => Ok(OutputFormat::Yaml),
        "name" => Ok(OutputFormat::Name),
        _ => match text.split_once('=') {
            // Checked now, so that a bad template is a command-line error.
            Some(("jsonpath", template)) if !template.is_empty() => Template::parse(template)
                .map(OutputFormat::JsonPath)
                .map_err(|e| format!("invalid JSONPath template {template:?}: {e}")),
            Some(("custom-columns", spec)) if !spec.is_empty() => custom_columns(spec),
            _ => Err(format!(
                "unknown output format {text:?}: use json, yaml, name, wide, jsonpath=TEMPLATE or custom-columns=HEADER:EXPRESSION,..."
            )),
        },
    }
}

/// `HEADER:EXPRESSION,...`, as kubectl splits it (at every comma, at the first colon).
fn custom_columns(spec: &str) -> Result<OutputFormat, String> {
    spec.split(',')
        .map(|column| {
            let (header, expression) = column.split_once(':').ok_or_else(|| {
                format!(
                    "unexpected custom-columns spec: {column}, expected <header>:<json-path-expr>"
                )
            })?;
            let template = Template::parse(&relaxed(expression)?)
                .map_err(|e| format!("invalid JSONPath expression {expression:?}: {e}"))?;
            Ok((header.to_string(), template))
        })
        .collect::<Result<Vec<_>, String>>()
        .map(OutputFormat::CustomColumns)
}

/// Applies a JSONPath template as `kubectl get -o jsonpath=...` does.
pub fn jsonpath(template: &Template, value: &Value) -> anyhow::Result<String> {
    template
        .execute(value)
        .map_err(|e| anyhow::anyhow!("error executing jsonpath: {e}"))
}

/// The rows of `custom-columns`: one per item of a `List`, else one for the object; each
/// cell the column's values as Go prints them, joined by commas, `<none>` when there are none.
fn custom_column_rows(
    columns: &[(String, Template)],
    value: &Value,
) -> anyhow::Result<Vec<Vec<String>>> {
    let objects: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        _ => match value.get("items").and_then(Value::as_array) {
            Some(items) if value.get("kind") == Some(&json!("List")) => items.iter().collect(),
            _ => vec![value],
        },
    };
    objects
        .into_iter()
        .map(|object| {
            columns
                .iter()
                .map(|(_, template)| {
                    let results = template
                        .find_results(object)
                        .map_err(|e| anyhow::anyhow!("error executing jsonpath: {e}"))?;
                    let texts: Vec<String> = results.iter().flatten().map(go_sprint).collect();
                    Ok(if results.first().is_none_or(Vec::is_empty) {
                        "<none>".to_string()
                    } else {
                        texts.join(",")
                    })
                })
                .collect()
        })
        .collect()
}

/// Rows aligned as kubectl's tab writer aligns them: every column but the last as wide as its
/// widest cell plus three spaces, and at least six.
pub fn kubectl_table(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = column_widths(rows).map(|w| (w + 3).max(6)).collect();
    let mut out = String::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}", width = widths[i]));
            }
        }
        out.push('\n');
    }
    out
}

/// `custom-columns` output: the header, then the rows (`header` false: the rows alone, as a
/// watch prints each change).
pub fn custom_columns_text(
    columns: &[(String, Template)],
    value: &Value,
    header: bool,
) -> anyhow::Result<String> {
    let mut rows = Vec::new();
    if header {
        rows.push(columns.iter().map(|(h, _)| h.clone()).collect());
    }
    rows.extend(custom_column_rows(columns, value)?);
    Ok(kubectl_table(&rows))
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

/// The end of a command that printed its errors as they came, as kubectl prints
/// `Error from server (NotFound): ...` for each name it cannot read: exit status 1, nothing
/// more said.
#[derive(Debug)]
pub struct Reported;

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("errors were printed above")
    }
}

impl std::error::Error for Reported {}

/// Whether `error` is a write to a closed pipe (`kubectl bundle list -o json | head -1`).
fn is_broken_pipe(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::BrokenPipe
}

/// Whether a panic is the standard library's `println!` failing on a closed standard output:
/// its message is `failed printing to stdout: ERROR`, and ERROR ends in `(os error N)`.
fn is_broken_pipe_panic(payload: &(dyn std::any::Any + Send)) -> bool {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    message.starts_with("failed printing to stdout: ")
        && message
            .rsplit_once("(os error ")
            .and_then(|(_, code)| code.strip_suffix(')')?.parse().ok())
            .is_some_and(|code| is_broken_pipe(&std::io::Error::from_raw_os_error(code)))
}

/// Keeps the panic hook quiet about a `println!` to a closed standard output, which
/// [`exit_code`] turns into success.
pub fn quiet_broken_pipe_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_broken_pipe_panic(info.payload()) {
            default(info);
        }
    }));
}

/// The exit status of a command (run under `catch_unwind`), its error printed. A closed
/// standard output ends the command quietly with success, as it ends kubectl: whoever closed
/// it has read what they wanted.
pub fn exit_code(outcome: std::thread::Result<anyhow::Result<ExitCode>>) -> ExitCode {
    match outcome {
        Ok(Ok(code)) => code,
        Ok(Err(e))
            if e.chain()
                .any(|c| c.downcast_ref().is_some_and(is_broken_pipe)) =>
        {
            ExitCode::SUCCESS
        }
        Ok(Err(e)) if e.chain().any(|c| c.is::<Reported>()) => ExitCode::FAILURE,
        Ok(Err(e)) => {
            eprintln!("error: {}", causes(&e));
            ExitCode::FAILURE
        }
        Err(panic) if is_broken_pipe_panic(panic.as_ref()) => ExitCode::SUCCESS,
        Err(panic) => std::panic::resume_unwind(panic),
    }
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
        Some(OutputFormat::CustomColumns(columns)) => {
            write!(out, "{}", custom_columns_text(columns, value, true)?)?
        }
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

/// "1 object", "3 objects": a count and its noun, in English.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Whether standard output takes colours: a terminal, and `NO_COLOR` unset (no-color.org).
pub fn colours() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stdout())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A table's header row: its column names.
pub fn header(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

/// Prints rows as an aligned table (the first row is the header).
pub fn print_table(rows: &[Vec<String>]) {
    let _ = write!(std::io::stdout().lock(), "{}", table(rows));
}

/// The width of each column of `rows`, in characters: its widest cell's.
fn column_widths(rows: &[Vec<String>]) -> impl Iterator<Item = usize> + '_ {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    (0..columns).map(|i| {
        let cells = rows.iter().filter_map(|r| r.get(i));
        cells.map(|c| c.chars().count()).max().unwrap_or(0)
    })
}

/// Rows as an aligned table, columns three spaces apart.
pub fn table(rows: &[Vec<String>]) -> String {
    styled_table(rows, |_, _, _| None)
}

/// Rows as an aligned table, each cell wrapped in the ANSI style `style(row, column, cell)`
/// gives it (e.g. `"32"`, green), after padding, so that styles do not upset the alignment.
pub fn styled_table(
    rows: &[Vec<String>],
    style: impl Fn(usize, usize, &str) -> Option<&'static str>,
) -> String {
    let widths: Vec<usize> = column_widths(rows).collect();
    let mut out = String::new();
    for (r, row) in rows.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                let padded = format!("{cell:<width$}", width = widths[i]);
                match style(r, i, cell) {
                    Some(code) => {
                        let text = padded.trim_end();
                        format!("\x1b[{code}m{text}\x1b[0m{}", &padded[text.len()..])
                    }
                    None => padded,
                }
            })
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
    fn styled_cells_keep_the_columns_aligned() {
        let rows: Vec<Vec<String>> = [
            ["A", "HEALTH", "Z"],
            ["a", "Healthy", "z"],
            ["b", "Failed", "z"],
        ]
        .iter()
        .map(|r| r.iter().map(|c| c.to_string()).collect())
        .collect();
        let styled = styled_table(&rows, |row, column, cell| {
            (row > 0 && column == 1).then_some(if cell == "Failed" { "31" } else { "32" })
        });
        let plain = table(&rows);
        assert_eq!(
            styled
                .replace("\x1b[31m", "")
                .replace("\x1b[32m", "")
                .replace("\x1b[0m", ""),
            plain
        );
        assert!(styled.contains("\x1b[31mFailed\x1b[0m "), "{styled:?}");
    }

    #[test]
    fn output_formats_parse_as_kubectl_names_them() {
        assert_eq!(parse_output("json"), Ok(OutputFormat::Json));
        assert_eq!(parse_output("name"), Ok(OutputFormat::Name));
        assert_eq!(
            parse_output("jsonpath={.a}"),
            Ok(OutputFormat::JsonPath(Template::parse("{.a}").unwrap()))
        );
        assert!(parse_output("jsonpath={.a").is_err());
        assert!(parse_output("table").is_err());
        assert!(matches!(
            parse_output("custom-columns=NAME:.metadata.name,P:status.phase"),
            Ok(OutputFormat::CustomColumns(c)) if c.len() == 2
        ));
        assert!(parse_output("custom-columns=NAME").is_err());
    }

    #[test]
    fn jsonpath_templates_print_as_kubectl_does() {
        let list = json!({"kind": "List", "items": [
            {"metadata": {"name": "a"}, "status": {"phase": "Installed"}},
            {"metadata": {"name": "b"}, "status": {"phase": "Failing"}},
        ]});
        let run = |t: &str| jsonpath(&Template::parse(t).unwrap(), &list).unwrap();
        assert_eq!(run("{.items[*].metadata.name}"), "a b");
        assert_eq!(
            run("{range .items[*]}{.metadata.name}={.status.phase}{\"\\n\"}{end}"),
            "a=Installed\nb=Failing\n"
        );
        assert_eq!(
            run("{.items[?(@.status.phase=='Failing')].metadata.name}"),
            "b"
        );
    }

    #[test]
    fn custom_columns_print_as_kubectl_does() {
        let list = json!({"kind": "List", "items": [
            {"metadata": {"name": "hello", "finalizers": ["f"]}, "spec": {"image": "i"}},
            {"metadata": {"name": "b"}},
        ]});
        let Ok(OutputFormat::CustomColumns(columns)) = parse_output(
            "custom-columns=NAME:.metadata.name,F:metadata.finalizers,SPEC:{.spec},NONE:.x",
        ) else {
            panic!("custom-columns parse");
        };
        let expected = [
            "NAME    F        SPEC           NONE",
            "hello   [f]      map[image:i]   <none>",
            "b       <none>   <none>         <none>",
        ];
        assert_eq!(
            custom_columns_text(&columns, &list, true).unwrap(),
            format!("{}\n", expected.join("\n"))
        );
        // One object: one row; without the header, as a watch prints a change.
        let one = custom_columns_text(&columns, &list["items"][1], false).unwrap();
        assert_eq!(one, "b     <none>   <none>   <none>\n");
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
    fn a_closed_standard_output_ends_the_command_with_success() {
        let closed = || {
            let (reader, mut writer) = std::io::pipe().unwrap();
            drop(reader);
            writer.write_all(b"{}\n").unwrap_err()
        };
        assert!(is_broken_pipe(&closed()));
        // A write that returned its error, under the command's context.
        let returned = anyhow::Error::new(closed()).context("printing bundles");
        assert_eq!(exit_code(Ok(Err(returned))), ExitCode::SUCCESS);
        // `println!`'s panic, with the error of the same write.
        let printed: Box<dyn std::any::Any + Send> =
            Box::new(format!("failed printing to stdout: {}", closed()));
        assert_eq!(exit_code(Err(printed)), ExitCode::SUCCESS);
        // Other failures still fail.
        let full = format!(
            "failed printing to stdout: {}",
            std::io::Error::from_raw_os_error(28)
        );
        assert!(!is_broken_pipe_panic(&full));
        assert!(!is_broken_pipe_panic(&"index out of bounds"));
        assert_eq!(
            exit_code(Ok(Err(anyhow::anyhow!("bundle x not found")))),
            ExitCode::FAILURE
        );
        // Errors printed already are not said again.
        assert_eq!(exit_code(Ok(Err(Reported.into()))), ExitCode::FAILURE);
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
