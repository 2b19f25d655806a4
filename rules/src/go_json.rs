//! JSON text as Go's `encoding/json` writes it, where another tool's output or hash depends on
//! the exact bytes: kubectl's `-o jsonpath`, OLM's generated names and a configuration's
//! digest.

use serde_json::Value;

/// `text` as a JSON string the way Go writes it: `<`, `>`, `&` and the line and paragraph
/// separators escaped too, control characters as `\u00XX` but for `\n`, `\r` and `\t`.
pub fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A number as Go prints it: integers as integers, other numbers by `float`.
pub fn number(n: &serde_json::Number, float: fn(f64) -> String) -> String {
    if let Some(i) = n.as_i64().filter(|_| !n.is_f64()) {
        i.to_string()
    } else if let Some(u) = n.as_u64().filter(|_| !n.is_f64()) {
        u.to_string()
    } else {
        float(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// The shortest digits of `f` and its decimal exponent: `1.5` is ("15", 0).
pub fn digits(f: f64) -> (String, i32) {
    let text = format!("{:e}", f.abs());
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    (
        mantissa.replace('.', ""),
        exponent.parse::<i32>().unwrap_or(0),
    )
}

/// `strconv.FormatFloat(f, 'e', -1, 64)` with Go's two-digit exponent.
pub fn exponent_form(f: f64) -> String {
    let (digits, exponent) = digits(f);
    let sign = if f < 0.0 { "-" } else { "" };
    let mantissa = if digits.len() > 1 {
        format!("{}.{}", &digits[..1], &digits[1..])
    } else {
        digits
    };
    let exp_sign = if exponent < 0 { '-' } else { '+' };
    format!("{sign}{mantissa}e{exp_sign}{:02}", exponent.abs())
}

/// A float as `encoding/json` writes it: plain decimals, exponent form below 1e-6 and from 1e21
/// on (`1e-7`, `1e+21`).
pub fn json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let text = exponent_form(f);
        // encoding/json trims `e-07` to `e-7`.
        match text.split_once("e-0") {
            Some((mantissa, exponent)) => format!("{mantissa}e-{exponent}"),
            None => text,
        }
    } else {
        format!("{f}")
    }
}

/// Compact JSON as Go's `encoding/json` writes it: keys sorted, `<`, `>` and `&` escaped.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    write_value(value, &mut out);
    out
}

/// [`to_string`] into `out`.
pub fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n, json_float)),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(&Value::String(key.clone()), out);
                out.push(':');
                write_value(&map[key], out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn html_characters_and_controls_are_escaped_as_go_does() {
        let mut out = String::new();
        super::write_string("a<b>&\u{1}\n\"\u{2028}é", &mut out);
        assert_eq!(out, "\"a\\u003cb\\u003e\\u0026\\u0001\\n\\\"\\u2028é\"");
    }
}
