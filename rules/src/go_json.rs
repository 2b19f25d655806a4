//! JSON text as Go's `encoding/json` writes it, where another tool's output or hash depends on
//! the exact bytes: kubectl's `-o jsonpath` and OLM's generated names.

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

#[cfg(test)]
mod tests {
    #[test]
    fn html_characters_and_controls_are_escaped_as_go_does() {
        let mut out = String::new();
        super::write_string("a<b>&\u{1}\n\"\u{2028}é", &mut out);
        assert_eq!(out, "\"a\\u003cb\\u003e\\u0026\\u0001\\n\\\"\\u2028é\"");
    }
}
