//! Health rules in CEL for custom kinds (`healthCheckExprs` of a class or a bundle), as Flux's:
//! each rule names a kind and up to three expressions evaluated against the live object, whose
//! top-level fields are the expressions' variables. Expressions are parsed when the class or
//! the bundle is accepted, so a typo is refused with its position, not found at runtime.
//!
//! The parser and the interpreter recurse once per level of an expression's syntax tree, and
//! the parser bounds only some kinds of level (brackets, not a chain of `+` or `.`), so an
//! expression is measured before it is parsed ([`check_size`]) and parsed and evaluated on
//! [`gantry_image::on_parse_stack`]: at these bounds it takes 4.9 MiB of stack in an
//! unoptimised build.

use cel::{Context, ParseErrors, Program};
use gantry_api::HealthCheckExpr;
use serde_json::Value;

use super::kstatus::{Assessment, State};

/// An expression that does not parse: where (`spec.healthCheckExprs[0].current`) and why,
/// with the line and column.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {message}")]
pub struct InvalidExpression {
    pub field: String,
    pub message: String,
}

/// The three expressions of a rule, in the order they are tried, with their field names.
fn expressions(rule: &HealthCheckExpr) -> [(&'static str, Option<&str>); 3] {
    [
        ("inProgress", rule.in_progress.as_deref()),
        ("failed", rule.failed.as_deref()),
        ("current", Some(rule.current.as_str())),
    ]
}

/// Parses every expression of `rules` (the field `field`, e.g. `spec.healthCheckExprs`);
/// the first that does not parse, or two rules for one kind, is the error.
pub fn validate(field: &str, rules: &[HealthCheckExpr]) -> Result<(), InvalidExpression> {
    for (i, rule) in rules.iter().enumerate() {
        if let Some(j) = rules[..i]
            .iter()
            .position(|r| r.api_version == rule.api_version && r.kind == rule.kind)
        {
            return Err(InvalidExpression {
                field: format!("{field}[{i}]"),
                message: format!(
                    "a second rule for {} {} ({field}[{j}] is the first)",
                    rule.api_version, rule.kind
                ),
            });
        }
        for (name, source) in expressions(rule) {
            if let Some(source) = source {
                compile(source).map_err(|message| InvalidExpression {
                    field: format!("{field}[{i}].{name}"),
                    message,
                })?;
            }
        }
    }
    Ok(())
}

/// How deeply an expression may nest brackets (`(`, `[`, `{`).
const MAX_NESTING: usize = 24;
/// How many operators an expression may have, brackets and `.` included: each can add a level
/// to its syntax tree.
const MAX_OPERATORS: usize = 128;

/// Refuses an expression whose syntax tree could be deeper than the bounds. Characters inside
/// string literals count too: an over-estimate, so that no expression escapes the bound by a
/// quote the count misreads.
fn check_size(source: &str) -> Result<(), String> {
    let (mut depth, mut operators) = (0usize, 0usize);
    for c in source.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                operators += 1;
                if depth > MAX_NESTING {
                    return Err(format!("nests brackets deeper than {MAX_NESTING} levels"));
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            '.' | '+' | '-' | '*' | '/' | '%' | '<' | '>' | '=' | '!' | '&' | '|' | '?' => {
                operators += 1
            }
            _ => {}
        }
    }
    operators += source
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|word| *word == "in")
        .count();
    if operators > MAX_OPERATORS {
        return Err(format!(
            "has more than {MAX_OPERATORS} operators (brackets and '.' included)"
        ));
    }
    Ok(())
}

fn compile(source: &str) -> Result<Program, String> {
    if source.trim().is_empty() {
        return Err("empty expression".into());
    }
    check_size(source)?;
    gantry_image::on_parse_stack(|| Program::compile(source)).map_err(|errors| describe(&errors))
}

/// Each parse error as `line L, column C: message`, without the parser's own framing.
fn describe(errors: &ParseErrors) -> String {
    let described: Vec<String> = errors
        .errors
        .iter()
        .map(|e| format!("line {}, column {}: {}", e.pos.0, e.pos.1 + 1, e.msg))
        .collect();
    if described.is_empty() {
        "does not parse".into()
    } else {
        described.join("; ")
    }
}

/// The rule of `rules` for objects of `group`, `version` and `kind`, if any.
pub fn rule_for<'a>(
    rules: &'a [HealthCheckExpr],
    group: &str,
    version: &str,
    kind: &str,
) -> Option<&'a HealthCheckExpr> {
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    rules
        .iter()
        .find(|r| r.api_version == api_version && r.kind == kind)
}

/// The state of `object` (a whole live object) by `rule`.
pub fn assess(rule: &HealthCheckExpr, object: &Value) -> Assessment {
    assess_with(rule, object)
}

fn in_progress(message: String) -> Assessment {
    Assessment {
        state: State::InProgress,
        message,
    }
}

fn assess_with(rule: &HealthCheckExpr, object: &Value) -> Assessment {
    if object.pointer("/metadata/deletionTimestamp").is_some() {
        return in_progress("resource is being deleted".into());
    }
    // As kstatus: a status written for an older spec says nothing about this one.
    if let (Some(generation), Some(observed)) = crate::kstatus::generations(object)
        && observed != generation
    {
        return in_progress(format!(
            "status is of generation {observed}, the object is at {generation}"
        ));
    }
    let mut context = Context::default();
    if let Some(fields) = object.as_object() {
        for (name, value) in fields {
            if let Ok(value) = cel::to_value(value) {
                context.add_variable_from_value(name.as_str(), value);
            }
        }
    }
    // A rule may name `status` before the object has one: an empty status reads as absent
    // fields, not as an undeclared variable.
    if object.get("status").is_none() {
        context.add_variable_from_value(
            "status",
            cel::to_value(serde_json::json!({})).unwrap_or(cel::Value::Null),
        );
    }
    for (name, source) in expressions(rule) {
        let Some(source) = source else { continue };
        match evaluate(source, &context) {
            Ok(false) => continue,
            Ok(true) => {
                return match name {
                    "inProgress" => {
                        in_progress(format!("healthCheckExprs inProgress is true: {source}"))
                    }
                    "failed" => Assessment {
                        state: State::Failed,
                        message: format!("healthCheckExprs failed is true: {source}"),
                    },
                    _ => Assessment {
                        state: State::Current,
                        message: format!("healthCheckExprs current is true: {source}"),
                    },
                };
            }
            Err(error) => {
                return in_progress(format!("healthCheckExprs {name} ({source}): {error}"));
            }
        }
    }
    in_progress(format!(
        "healthCheckExprs current is not yet true: {}",
        rule.current
    ))
}

fn evaluate(source: &str, context: &Context) -> Result<bool, String> {
    let program = compile(source)?;
    // The interpreter recurses as the parser does; the program is dropped there too.
    gantry_image::on_parse_stack(move || match program.execute(context) {
        Ok(cel::Value::Bool(value)) => Ok(value),
        Ok(other) => Err(format!("evaluates to {other:?}, not a bool")),
        Err(error) => Err(error.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// As the health step finds the rule: by the object's own apiVersion and kind.
    fn judged(rules: &[HealthCheckExpr], object: &Value) -> Option<Assessment> {
        let (group, version) = match object["apiVersion"].as_str()?.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", object["apiVersion"].as_str()?),
        };
        let rule = rule_for(rules, group, version, object["kind"].as_str()?)?;
        Some(assess(rule, object))
    }

    /// Asserts that `object` is judged `state`, with a message that says `part`.
    #[track_caller]
    fn assert_judged(rules: &[HealthCheckExpr], object: &Value, state: State, part: &str) {
        let assessment = judged(rules, object).unwrap();
        assert_eq!(assessment.state, state);
        assert!(assessment.message.contains(part), "{}", assessment.message);
    }

    fn rule(in_progress: Option<&str>, failed: Option<&str>, current: &str) -> HealthCheckExpr {
        HealthCheckExpr {
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            in_progress: in_progress.map(str::to_string),
            failed: failed.map(str::to_string),
            current: current.into(),
        }
    }

    const READY: &str = "status.conditions.filter(c, c.type == 'Ready').all(c, c.status == 'True')";
    const NOT_READY: &str =
        "status.conditions.filter(c, c.type == 'Ready').all(c, c.status == 'False')";

    fn widget(status: Value) -> Value {
        json!({
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "generation": 2},
            "spec": {"size": 3},
            "status": status,
        })
    }

    #[test]
    fn expressions_decide_in_their_order() {
        let rules = [rule(
            Some("has(status.phase) && status.phase == 'Pending'"),
            Some(NOT_READY),
            READY,
        )];
        let ready = widget(
            json!({"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True"}]}),
        );
        assert_eq!(judged(&rules, &ready).unwrap().state, State::Current);
        let failed = widget(
            json!({"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "False"}]}),
        );
        assert_judged(&rules, &failed, State::Failed, "failed is true");
        // inProgress is tried first, even when current would be true.
        let pending = widget(
            json!({"phase": "Pending", "observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True"}]}),
        );
        assert_eq!(judged(&rules, &pending).unwrap().state, State::InProgress);
        // None true: in progress, naming current.
        let unknown = widget(
            json!({"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "Unknown"}]}),
        );
        assert_judged(&rules, &unknown, State::InProgress, "not yet true");
    }

    #[test]
    fn a_status_of_an_older_generation_is_progress() {
        let rules = [rule(None, None, READY)];
        let stale = widget(
            json!({"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}),
        );
        assert_judged(&rules, &stale, State::InProgress, "generation 1");
    }

    #[test]
    fn an_object_without_status_or_with_missing_fields_is_in_progress_not_an_error_of_gantry() {
        let rules = [rule(None, None, READY)];
        let mut bare = widget(json!(null));
        bare.as_object_mut().unwrap().remove("status");
        assert_judged(&rules, &bare, State::InProgress, "conditions");
        let guarded = [rule(
            None,
            None,
            "has(status.conditions) && status.conditions.size() > 0",
        )];
        assert_eq!(judged(&guarded, &bare).unwrap().state, State::InProgress);
    }

    #[test]
    fn a_non_boolean_result_is_named() {
        let rules = [rule(None, None, "spec.size")];
        assert_judged(&rules, &widget(json!({})), State::InProgress, "not a bool");
    }

    #[test]
    fn other_kinds_have_no_rule() {
        let rules = [rule(None, None, READY)];
        let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert!(judged(&rules, &other).is_none());
        assert!(judged(&rules, &json!("not an object")).is_none());
    }

    #[test]
    fn invalid_expressions_are_refused_with_their_field_and_position() {
        let error = validate(
            "spec.healthCheckExprs",
            &[rule(None, None, READY), {
                let mut r = rule(None, Some("status.phase == "), READY);
                r.kind = "Gadget".into();
                r
            }],
        )
        .unwrap_err();
        assert_eq!(error.field, "spec.healthCheckExprs[1].failed");
        assert!(
            error.message.contains("line 1, column"),
            "{}",
            error.message
        );
        let empty = validate("spec.healthCheckExprs", &[rule(None, None, "  ")]).unwrap_err();
        assert_eq!(empty.field, "spec.healthCheckExprs[0].current");
        let twice = validate(
            "spec.healthCheckExprs",
            &[rule(None, None, READY), rule(None, None, READY)],
        )
        .unwrap_err();
        assert_eq!(twice.field, "spec.healthCheckExprs[1]");
        assert!(
            validate(
                "spec.healthCheckExprs",
                &[rule(Some("true"), Some(NOT_READY), READY)]
            )
            .is_ok()
        );
    }

    #[test]
    fn expressions_past_the_bounds_are_refused_before_parsing() {
        for (source, says) in [
            (
                format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000)),
                "nests brackets deeper than 24 levels",
            ),
            (
                format!("[{}]", "[1],".repeat(1000)),
                "more than 128 operators",
            ),
            (
                format!("1{}", "+1".repeat(100_000)),
                "more than 128 operators",
            ),
            (
                format!("self{}", ".a".repeat(200)),
                "more than 128 operators",
            ),
            (
                format!("1{}", " in [1]".repeat(65)),
                "more than 128 operators",
            ),
        ] {
            let error =
                validate("spec.healthCheckExprs", &[rule(None, Some(&source), READY)]).unwrap_err();
            assert_eq!(error.field, "spec.healthCheckExprs[0].failed");
            assert!(error.message.contains(says), "{}", error.message);
        }
        // At the bounds, an expression parses and evaluates (on the parse stack, whichever
        // thread the caller is on: a test's runs on 2 MiB).
        let deepest = format!("{}true{}", "(".repeat(24), ")".repeat(24));
        let longest = format!("1{} == 127", "+1".repeat(126));
        let object = widget(json!({"ready": true}));
        for source in [deepest, longest] {
            assert!(validate("spec.healthCheckExprs", &[rule(None, None, &source)]).is_ok());
            let assessed = judged(&[rule(None, None, &source)], &object).unwrap();
            assert_eq!(assessed.state, State::Current, "{}", assessed.message);
        }
    }
}
