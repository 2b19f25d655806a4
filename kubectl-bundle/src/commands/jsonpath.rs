//! kubectl's JSONPath template dialect (`k8s.io/client-go/util/jsonpath`), as `kubectl get -o
//! jsonpath=...` and `-o custom-columns=...` apply it: text between `{...}` actions, `{.a.b}`,
//! `{.items[*].metadata.name}`, `[0]`, `[-1]`, `[1:3]`, `[::2]`, `['key']`, unions `[0,2]`,
//! `.*`, `..name`, filters `[?(@.a == "x")]` and `[?(@.a)]`, literals `{"\n"}`,
//! `{range ...}...{end}`. A port of the parser and evaluator (kept close to the Go code, so
//! that the same template prints the same text), with kubectl's options: missing keys print
//! nothing; several results of one action are joined by spaces; maps and lists print as compact
//! JSON (keys sorted); everything else as Go's `fmt` prints it. Where Go iterates a map (`.*`,
//! `..`), in an order that changes from run to run, this takes the keys in sorted order.

use serde_json::Value;

/// A parsed template.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    blocks: Vec<Block>,
}

#[derive(Clone, Debug, PartialEq)]
enum Block {
    /// Text outside actions, printed as it is (kubectl reads no escapes there).
    Text(String),
    /// `{...}`: its results printed.
    Action(Vec<Node>),
    /// `{range EXPR}BODY{end}`: BODY once for each result of EXPR, with it as the data.
    Range(Vec<Node>, Vec<Block>),
}

/// One step of an action, applied to the values the previous steps produced.
#[derive(Clone, Debug, PartialEq)]
enum Node {
    /// A literal: `"text"`, `'text'`.
    Text(String),
    /// `.name`; `""` (`{.}`) is the values themselves.
    Field(String),
    /// `.*` (or `[*]` on a map): every value of a map, every element of a list.
    Wildcard,
    /// `..`: every map and list below, the values themselves first.
    Recursive,
    /// `[start:end:step]`.
    Array([Param; 3]),
    /// `[?(LEFT OP RIGHT)]`, or `[?(LEFT)]` (op `exists`).
    Filter {
        left: Vec<Node>,
        right: Vec<Node>,
        op: String,
    },
    /// `[a,b]`: the results of each, in order.
    Union(Vec<Vec<Node>>),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// `range`, `end`: structure, handled when the blocks are built.
    Range,
    End,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Param {
    value: i64,
    known: bool,
    /// The end of `[i]`: `i + 1`.
    derived: bool,
}

/// The parser's state over the template's characters, as Go's (`pos`, `start`).
struct Parser {
    input: Vec<char>,
    pos: usize,
    start: usize,
}

/// What an action or the template is made of before ranges are nested.
enum Item {
    Text(String),
    Action(Vec<Node>),
}

const EOF: char = '\0';

fn is_terminator(c: char) -> bool {
    c == ' '
        || c == '\t'
        || c == '\r'
        || c == '\n'
        || matches!(c, EOF | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}')
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

impl Parser {
    fn new(text: &str) -> Self {
        Parser {
            input: text.chars().collect(),
            pos: 0,
            start: 0,
        }
    }

    fn next(&mut self) -> char {
        match self.input.get(self.pos) {
            Some(&c) => {
                self.pos += 1;
                c
            }
            None => {
                // Go's parser moves past the end too, so `backup` after EOF stays at the end.
                self.pos += 1;
                EOF
            }
        }
    }

    fn peek(&self) -> char {
        self.input.get(self.pos).copied().unwrap_or(EOF)
    }

    fn backup(&mut self) {
        self.pos -= 1;
    }

    fn rest_starts_with(&self, prefix: &str) -> bool {
        let rest = &self.input[self.pos.min(self.input.len())..];
        let prefix: Vec<char> = prefix.chars().collect();
        rest.starts_with(&prefix)
    }

    fn consume(&mut self) -> String {
        let end = self.pos.min(self.input.len());
        let text: String = self.input[self.start.min(end)..end].iter().collect();
        self.start = self.pos;
        text
    }

    /// The whole template: text and actions.
    fn parse_template(&mut self) -> Result<Vec<Item>, String> {
        let mut items = Vec::new();
        loop {
            if self.rest_starts_with("{") {
                if self.pos > self.start {
                    items.push(Item::Text(self.consume()));
                }
                self.pos += 1;
                self.consume();
                let mut nodes = Vec::new();
                self.parse_inside_action(&mut nodes)?;
                items.push(Item::Action(nodes));
                continue;
            }
            if self.next() == EOF {
                self.backup();
                break;
            }
        }
        if self.pos > self.start {
            items.push(Item::Text(self.consume()));
        }
        Ok(items)
    }

    /// One action, up to and including its `}`.
    fn parse_inside_action(&mut self, nodes: &mut Vec<Node>) -> Result<(), String> {
        loop {
            if self.rest_starts_with("}") {
                self.pos += 1;
                self.consume();
                return Ok(());
            }
            if self.rest_starts_with("[?(") {
                self.parse_filter(nodes)?;
                continue;
            }
            if self.rest_starts_with("..") {
                if nodes.last() == Some(&Node::Recursive) {
                    return Err("invalid multiple recursive descent".into());
                }
                self.pos += 2;
                self.consume();
                nodes.push(Node::Recursive);
                if is_alphanumeric(self.peek()) {
                    self.parse_field(nodes);
                }
                continue;
            }
            match self.next() {
                EOF | '\r' | '\n' => return Err("unclosed action".into()),
                ' ' | '@' | '$' => {
                    // `@` and `$` stand for the current data: nothing to do.
                    self.consume();
                }
                '[' => self.parse_array(nodes)?,
                quote @ ('"' | '\'') => self.parse_quote(nodes, quote)?,
                '.' => self.parse_field(nodes),
                c if c == '+' || c == '-' || c.is_ascii_digit() => {
                    self.backup();
                    self.parse_number(nodes)?;
                }
                c if is_alphanumeric(c) => {
                    self.backup();
                    self.parse_identifier(nodes)?;
                }
                c => return Err(format!("unrecognized character in action: {c:?}")),
            }
        }
    }

    fn parse_field(&mut self, nodes: &mut Vec<Node>) {
        self.consume();
        loop {
            let c = self.next();
            if c == '\\' {
                self.next();
            } else if is_terminator(c) {
                self.backup();
                break;
            }
        }
        let value = self.consume();
        if value == "*" {
            nodes.push(Node::Wildcard);
        } else {
            nodes.push(Node::Field(value.replace('\\', "")));
        }
    }

    fn parse_identifier(&mut self, nodes: &mut Vec<Node>) -> Result<(), String> {
        loop {
            let c = self.next();
            if is_terminator(c) || c == ' ' {
                self.backup();
                break;
            }
        }
        let value = self.consume();
        nodes.push(match value.as_str() {
            "range" => Node::Range,
            "end" => Node::End,
            "true" => Node::Bool(true),
            "false" => Node::Bool(false),
            other => return Err(format!("unrecognized identifier {other}")),
        });
        Ok(())
    }

    fn parse_number(&mut self, nodes: &mut Vec<Node>) -> Result<(), String> {
        if matches!(self.peek(), '+' | '-') {
            self.next();
        }
        loop {
            let c = self.next();
            if c != '.' && !c.is_ascii_digit() {
                self.backup();
                break;
            }
        }
        let value = self.consume();
        if let Ok(i) = value.parse::<i64>() {
            nodes.push(Node::Int(i));
        } else if let Ok(f) = value.parse::<f64>() {
            nodes.push(Node::Float(f));
        } else {
            return Err(format!("cannot parse number {value}"));
        }
        Ok(())
    }

    fn parse_quote(&mut self, nodes: &mut Vec<Node>, quote: char) -> Result<(), String> {
        loop {
            match self.next() {
                EOF | '\n' => return Err("unterminated quoted string".into()),
                '\\' => {
                    let c = self.next();
                    if c == EOF || c == '\n' {
                        return Err("unterminated quoted string".into());
                    }
                }
                c if c == quote => break,
                _ => {}
            }
        }
        let value = self.consume();
        nodes.push(Node::Text(unquote(&value)?));
        Ok(())
    }

    fn parse_array(&mut self, nodes: &mut Vec<Node>) -> Result<(), String> {
        loop {
            match self.next() {
                EOF | '\n' => return Err("unterminated array".into()),
                ']' => break,
                _ => {}
            }
        }
        let text = self.consume();
        let mut text = text[1..text.len() - 1].to_string();
        if text == "*" {
            text = ":".into();
        }
        // A union: each part an array expression of its own.
        let parts: Vec<&str> = text.split(',').collect();
        if parts.len() > 1 {
            let union = parts
                .iter()
                .map(|part| parse_action(&format!("[{}]", part.trim_matches(' '))))
                .collect::<Result<Vec<_>, _>>()?;
            nodes.push(Node::Union(union));
            return Ok(());
        }
        // A key: `['name']` is `.name`.
        if text.len() >= 2 && text.starts_with('\'') && text.ends_with('\'') {
            let key = &text[1..text.len() - 1];
            if !key.contains('\'') {
                nodes.extend(parse_action(&format!(".{key}"))?);
                return Ok(());
            }
        }
        nodes.push(Node::Array(slice_params(&text)?));
        Ok(())
    }

    fn parse_filter(&mut self, nodes: &mut Vec<Node>) -> Result<(), String> {
        self.pos += 3;
        self.consume();
        let (mut begin, mut end) = (false, false);
        let mut pair = EOF;
        loop {
            let c = self.next();
            match c {
                EOF | '\n' => return Err("unterminated filter".into()),
                '"' | '\'' => {
                    if !begin {
                        begin = true;
                        pair = c;
                        continue;
                    }
                    if self.input.get(self.pos.wrapping_sub(2)) != Some(&'\\') && c == pair {
                        end = true;
                    }
                }
                ')' if begin == end => break,
                _ => {}
            }
        }
        if self.next() != ']' {
            return Err("unclosed array expect ]".into());
        }
        let text = self.consume();
        let text = &text[..text.len() - 2];
        // `^([^!<>=]+)([!<>=]+)(.+?)$`
        let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
        let split = text.find(is_op).filter(|&i| i > 0).and_then(|i| {
            let rest = &text[i..];
            let op_len = rest.find(|c| !is_op(c))?;
            Some((&text[..i], &rest[..op_len], &rest[op_len..]))
        });
        match split {
            Some((left, op, right)) if !right.is_empty() => nodes.push(Node::Filter {
                left: parse_action(left)?,
                right: parse_action(right)?,
                op: op.to_string(),
            }),
            _ => nodes.push(Node::Filter {
                left: parse_action(text)?,
                right: Vec::new(),
                op: "exists".into(),
            }),
        }
        Ok(())
    }
}

/// `text` as the inside of one action (`{text}`): its nodes.
fn parse_action(text: &str) -> Result<Vec<Node>, String> {
    let mut parser = Parser::new(&format!("{{{text}}}"));
    match parser.parse_template()?.into_iter().next() {
        Some(Item::Action(nodes)) => Ok(nodes),
        _ => Err(format!("invalid expression {text:?}")),
    }
}

/// `[start:end:step]`, as `^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$` reads it.
fn slice_params(text: &str) -> Result<[Param; 3], String> {
    let invalid = || format!("invalid array index {text}");
    let mut parts = text.splitn(3, ':');
    let first = parts.next().unwrap_or("");
    let rest: Vec<Option<&str>> = vec![parts.next(), parts.next()];
    let number = |s: &str| -> Result<(), String> {
        let digits = s.strip_prefix('-').unwrap_or(s);
        if digits.chars().all(|c| c.is_ascii_digit()) {
            Ok(())
        } else {
            Err(invalid())
        }
    };
    number(first)?;
    for part in rest.iter().flatten() {
        number(part)?;
    }
    let parse = |s: &str| {
        s.parse::<i64>()
            .map_err(|_| format!("array index {s} is not a number"))
    };
    let mut params = [Param::default(); 3];
    if first.is_empty() {
        params[0] = Param::default();
    } else {
        params[0] = Param {
            value: parse(first)?,
            known: true,
            derived: false,
        };
    }
    for (i, part) in rest.iter().enumerate() {
        let at = i + 1;
        params[at] = match part {
            // `[i]`: the end is i + 1.
            None if at == 1 => Param {
                value: params[0].value + 1,
                known: true,
                derived: true,
            },
            None | Some("") => Param::default(),
            Some(number) => Param {
                value: parse(number)?,
                known: true,
                derived: false,
            },
        };
    }
    Ok(params)
}

/// Go's `strconv.Unquote`, for double or single quotes (kubectl's `UnquoteExtend`).
fn unquote(quoted: &str) -> Result<String, String> {
    let bad = || format!("unquote string {quoted} error invalid syntax");
    let chars: Vec<char> = quoted.chars().collect();
    if chars.len() < 2 || chars[0] != chars[chars.len() - 1] {
        return Err(bad());
    }
    let quote = chars[0];
    let mut out = String::new();
    let mut inner = chars[1..chars.len() - 1].iter().copied().peekable();
    while let Some(c) = inner.next() {
        if c == quote {
            return Err(bad());
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let escaped = inner.next().ok_or_else(bad)?;
        let mut hex = |n: usize| -> Result<char, String> {
            let digits: String = (0..n).filter_map(|_| inner.next()).collect();
            u32::from_str_radix(&digits, 16)
                .ok()
                .filter(|_| digits.len() == n)
                .and_then(char::from_u32)
                .ok_or_else(bad)
        };
        out.push(match escaped {
            'a' => '\x07',
            'b' => '\x08',
            'f' => '\x0c',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\x0b',
            '\\' => '\\',
            'x' => hex(2)?,
            'u' => hex(4)?,
            'U' => hex(8)?,
            c if c == quote => c,
            c @ '0'..='7' => {
                let mut digits = c.to_string();
                for _ in 0..2 {
                    digits.push(inner.next().ok_or_else(bad)?);
                }
                u32::from_str_radix(&digits, 8)
                    .ok()
                    .filter(|v| *v < 256)
                    .and_then(char::from_u32)
                    .ok_or_else(bad)?
            }
            _ => return Err(bad()),
        });
    }
    Ok(out)
}

/// Nests `{range}`/`{end}`: the blocks up to the `{end}` closing `depth` ranges.
fn nest(items: &mut std::vec::IntoIter<Item>, depth: usize) -> Result<Vec<Block>, String> {
    let mut blocks = Vec::new();
    while let Some(item) = items.next() {
        match item {
            Item::Text(text) => blocks.push(Block::Text(text)),
            Item::Action(nodes) if nodes.contains(&Node::End) => {
                if depth == 0 {
                    return Err("not in range, nothing to end".into());
                }
                return Ok(blocks);
            }
            Item::Action(nodes) if nodes.contains(&Node::Range) => {
                let expression = nodes.into_iter().filter(|n| *n != Node::Range).collect();
                blocks.push(Block::Range(expression, nest(items, depth + 1)?));
            }
            Item::Action(nodes) => blocks.push(Block::Action(nodes)),
        }
    }
    // A range without `{end}` runs to the end of the template, as kubectl's does.
    Ok(blocks)
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, String> {
        let items = Parser::new(text).parse_template()?;
        Ok(Template {
            blocks: nest(&mut items.into_iter(), 0)?,
        })
    }

    /// The results of each action, in order (kubectl's `FindResults`): what `custom-columns`
    /// prints, joined by commas. Text outside actions is a result too.
    pub fn find_results(&self, data: &Value) -> Result<Vec<Vec<Value>>, String> {
        let mut all = Vec::new();
        find(&self.blocks, data, &mut all)?;
        Ok(all)
    }

    /// The template applied to `data`, as `kubectl get -o jsonpath=...` prints it.
    pub fn execute(&self, data: &Value) -> Result<String, String> {
        let mut out = String::new();
        for results in self.find_results(data)? {
            let texts: Vec<String> = results
                .iter()
                .map(|v| match v {
                    Value::Object(_) | Value::Array(_) => gantry_rules::go_json::to_string(v),
                    other => go_print(other),
                })
                .collect();
            out.push_str(&texts.join(" "));
        }
        Ok(out)
    }
}

fn find(blocks: &[Block], data: &Value, all: &mut Vec<Vec<Value>>) -> Result<(), String> {
    for block in blocks {
        match block {
            Block::Text(text) => all.push(vec![Value::String(text.clone())]),
            Block::Action(nodes) => all.push(eval_list(vec![data.clone()], nodes)?),
            Block::Range(nodes, body) => {
                for value in eval_list(vec![data.clone()], nodes)? {
                    find(body, &value, all)?;
                }
            }
        }
    }
    Ok(())
}

fn eval_list(mut values: Vec<Value>, nodes: &[Node]) -> Result<Vec<Value>, String> {
    for node in nodes {
        values = eval(values, node)?;
    }
    Ok(values)
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// A map's values, its keys sorted.
fn sorted_values(map: &serde_json::Map<String, Value>) -> Vec<Value> {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    keys.into_iter().map(|k| map[k].clone()).collect()
}

fn eval(input: Vec<Value>, node: &Node) -> Result<Vec<Value>, String> {
    Ok(match node {
        Node::Text(text) => vec![Value::String(text.clone())],
        Node::Int(i) => vec![Value::from(*i)],
        Node::Float(f) => vec![Value::from(*f)],
        Node::Bool(b) => vec![Value::Bool(*b)],
        Node::Range | Node::End => input,
        Node::Field(name) if name.is_empty() => input,
        // A missing key gives nothing (kubectl allows missing keys); so does a field of
        // anything but a map.
        Node::Field(name) => input
            .iter()
            .filter_map(|v| v.as_object()?.get(name).cloned())
            .collect(),
        Node::Wildcard => input
            .iter()
            .flat_map(|v| match v {
                Value::Object(map) => sorted_values(map),
                Value::Array(items) => items.clone(),
                _ => Vec::new(),
            })
            .collect(),
        Node::Recursive => {
            let mut out = Vec::new();
            for value in input {
                recurse(value, &mut out);
            }
            out
        }
        Node::Array(params) => {
            let mut out = Vec::new();
            for value in &input {
                if value.is_null() {
                    continue;
                }
                let Value::Array(items) = value else {
                    return Err(format!("{} is not array or slice", type_name(value)));
                };
                out.extend(slice(items, *params)?);
            }
            out
        }
        Node::Filter { left, right, op } => {
            let mut out = Vec::new();
            for value in &input {
                let Value::Array(items) = value else {
                    return Err(format!(
                        "{} is not array or slice and cannot be filtered",
                        go_print(value)
                    ));
                };
                for item in items {
                    if keep(item, left, right, op)? {
                        out.push(item.clone());
                    }
                }
            }
            out
        }
        Node::Union(parts) => {
            let mut out = Vec::new();
            for part in parts {
                out.extend(eval_list(input.clone(), part)?);
            }
            out
        }
    })
}

fn recurse(value: Value, out: &mut Vec<Value>) {
    let children = match &value {
        Value::Object(map) => sorted_values(map),
        Value::Array(items) => items.clone(),
        _ => Vec::new(),
    };
    if !children.is_empty() {
        out.push(value);
        for child in children {
            recurse(child, out);
        }
    }
}

fn slice(items: &[Value], params: [Param; 3]) -> Result<Vec<Value>, String> {
    let len = items.len() as i64;
    let mut start = if params[0].known { params[0].value } else { 0 };
    if start < 0 {
        start += len;
    }
    let mut end = if params[1].known {
        params[1].value
    } else {
        len
    };
    if end < 0 || (end == 0 && params[1].derived) {
        end += len;
    }
    if end == start {
        return Ok(Vec::new());
    }
    if start >= len || start < 0 {
        return Err(format!(
            "array index out of bounds: index {start}, length {len}"
        ));
    }
    if end > len || end < 0 {
        return Err(format!(
            "array index out of bounds: index {}, length {len}",
            end - 1
        ));
    }
    if start > end {
        return Err(format!(
            "starting index {start} is greater than ending index {end}"
        ));
    }
    let step = if params[2].known {
        if params[2].value <= 0 {
            return Err("step must be > 0".into());
        }
        params[2].value as usize
    } else {
        1
    };
    Ok(items[start as usize..end as usize]
        .iter()
        .step_by(step)
        .cloned()
        .collect())
}

/// Whether a filter keeps `item`.
fn keep(item: &Value, left: &[Node], right: &[Node], op: &str) -> Result<bool, String> {
    let lefts = eval_list(vec![item.clone()], left)?;
    if op == "exists" {
        return Ok(!lefts.is_empty());
    }
    let one = |values: Vec<Value>| match values.len() {
        0 => Ok(None),
        1 => Ok(values.into_iter().next()),
        _ => Err("can only compare one element at a time".to_string()),
    };
    let Some(l) = one(lefts)? else {
        return Ok(false);
    };
    let Some(r) = one(eval_list(vec![item.clone()], right)?)? else {
        return Ok(false);
    };
    use std::cmp::Ordering;
    let incompatible = || "incompatible types for comparison".to_string();
    let order: Option<Ordering> = match (&l, &r) {
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (Value::Number(a), Value::Number(b)) => match (a.as_i64(), b.as_i64()) {
            (Some(a), Some(b)) if !a_is_float(&l) && !a_is_float(&r) => Some(a.cmp(&b)),
            _ if a.is_f64() && b.is_f64() => a.as_f64().partial_cmp(&b.as_f64()),
            _ => return Err(incompatible()),
        },
        (Value::Bool(a), Value::Bool(b)) => {
            return match op {
                "==" => Ok(a == b),
                "!=" => Ok(a != b),
                _ => Err("invalid type for comparison".into()),
            };
        }
        _ => return Err(incompatible()),
    };
    let Some(order) = order else {
        return Ok(false);
    };
    Ok(match op {
        "==" => order == Ordering::Equal,
        "!=" => order != Ordering::Equal,
        "<" => order == Ordering::Less,
        ">" => order == Ordering::Greater,
        "<=" => order != Ordering::Greater,
        ">=" => order != Ordering::Less,
        other => return Err(format!("unrecognized filter operator {other}")),
    })
}

fn a_is_float(value: &Value) -> bool {
    matches!(value, Value::Number(n) if n.is_f64())
}

/// A scalar as Go's `fmt.Fprint` prints the value kubectl decoded: strings bare, integers,
/// floats in `%v`, `true`/`false`, `null` for a JSON null (kubectl's own rule).
pub fn go_print(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => gantry_rules::go_json::number(n, go_float_v),
        other => gantry_rules::go_json::to_string(other),
    }
}

/// Any value as Go's `fmt.Sprint` prints it: maps as `map[k:v ...]` (keys sorted), lists as
/// `[a b]`, null as `<nil>` (what `custom-columns` prints for a map or a list).
pub fn go_sprint(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".into(),
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}:{}", go_sprint(&map[k])))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(go_sprint).collect();
            format!("[{}]", parts.join(" "))
        }
        other => go_print(other),
    }
}

/// `fmt.Sprint(f)` (`%v`, that is `%g` with the shortest precision): exponent form below 1e-4
/// and from 1e6 on (`1e+06`).
fn go_float_v(f: f64) -> String {
    if f == 0.0 || !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f.is_infinite() {
            if f > 0.0 { "+Inf" } else { "-Inf" }.into()
        } else {
            "0".into()
        };
    }
    let (_, exponent) = gantry_rules::go_json::digits(f);
    if !(-4..6).contains(&exponent) {
        gantry_rules::go_json::exponent_form(f)
    } else {
        format!("{f}")
    }
}

/// A column expression as kubectl's `custom-columns` takes it (`RelaxedJSONPathExpression`):
/// `.a.b`, `a.b`, `{.a.b}` or `{a.b}` are all `{.a.b}`.
pub fn relaxed(expression: &str) -> Result<String, String> {
    if expression.is_empty() {
        return Ok(String::new());
    }
    let inner = match expression
        .strip_prefix('{')
        .and_then(|e| e.strip_suffix('}'))
    {
        Some(inner) => inner,
        None => expression,
    };
    let inner = inner.strip_prefix('.').unwrap_or(inner);
    if inner.is_empty() || inner.contains(['{', '}']) {
        return Err(
            "unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{name1.name2}' or '{.name1.name2}'"
                .into(),
        );
    }
    Ok(format!("{{.{inner}}}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(template: &str, data: &Value) -> String {
        Template::parse(template)
            .unwrap_or_else(|e| panic!("{template}: {e}"))
            .execute(data)
            .unwrap_or_else(|e| panic!("{template}: {e}"))
    }

    fn list() -> Value {
        json!({"kind": "List", "items": [
            {"metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "x"}},
             "status": {"phase": "Installed", "n": 3, "conditions": [
                {"type": "Ready", "status": "True"}, {"type": "Healthy", "status": "False"}]}},
            {"metadata": {"name": "b"}, "status": {"phase": "Failing", "n": 7}},
        ]})
    }

    #[test]
    fn fields_lists_and_literals() {
        let data = list();
        assert_eq!(run("{.items[*].metadata.name}", &data), "a b");
        assert_eq!(run("{.items[0].metadata.name}{\"\\n\"}", &data), "a\n");
        assert_eq!(run("{.items[-1].metadata.name}", &data), "b");
        assert_eq!(run("{.items[0:1].metadata.name}", &data), "a");
        assert_eq!(run("{.items[::2].metadata.name}", &data), "a");
        assert_eq!(run("{.items[0,1].status.n}", &data), "3 7");
        assert_eq!(run("{.items[0]['metadata']['name']}", &data), "a");
        assert_eq!(
            run(
                "{.items[0].metadata.labels.app\\.kubernetes\\.io/name}",
                &data
            ),
            "x"
        );
        // Text outside actions is printed as it is: kubectl reads no `\n` there.
        assert_eq!(run("n={.items[1].status.n}\\n", &data), "n=7\\n");
        assert_eq!(
            run("{.nothing.here}", &data),
            "",
            "missing keys print nothing"
        );
        assert_eq!(run("{.items[0].status.phase} {'x'}", &data), "Installed x");
        assert_eq!(run("{$.kind}{@.kind}", &data), "ListList");
    }

    #[test]
    fn ranges_nest_and_filters_select() {
        let data = list();
        assert_eq!(
            run(
                "{range .items[*]}{.metadata.name}{\"\\t\"}{.status.phase}{\"\\n\"}{end}",
                &data
            ),
            "a\tInstalled\nb\tFailing\n"
        );
        assert_eq!(
            run(
                "{range .items[*]}{.metadata.name}:{range .status.conditions[*]}[{.type}]{end};{end}",
                &data
            ),
            "a:[Ready][Healthy];b:;"
        );
        assert_eq!(
            run(
                "{.items[?(@.status.phase=='Failing')].metadata.name}",
                &data
            ),
            "b"
        );
        assert_eq!(run("{.items[?(@.status.n > 5)].metadata.name}", &data), "b");
        assert_eq!(
            run(
                "{.items[*].status.conditions[?(@.type==\"Ready\")].status}",
                &data
            ),
            "True"
        );
        assert_eq!(
            run("{.items[?(@.status.conditions)].metadata.name}", &data),
            "a"
        );
        assert!(Template::parse("{end}").is_err());
        assert!(Template::parse("{.a").is_err());
        assert!(Template::parse("{nonsense}").is_err());
    }

    #[test]
    fn values_print_as_kubectl_prints_them() {
        let data = json!({"m": {"b": 1, "a": "<x>"}, "l": [1, "s"], "f": 1.5, "big": 1e21,
            "whole": 2.0, "t": true, "z": null});
        assert_eq!(run("{.m}", &data), r#"{"a":"\u003cx\u003e","b":1}"#);
        assert_eq!(run("{.l}", &data), r#"[1,"s"]"#);
        assert_eq!(
            run("{.f} {.big} {.whole} {.t} {.z}", &data),
            "1.5 1e+21 2 true null"
        );
        assert_eq!(go_sprint(&data["m"]), "map[a:<x> b:1]");
        assert_eq!(go_sprint(&data["l"]), "[1 s]");
        assert_eq!(go_float_v(1e-5), "1e-05");
        assert_eq!(go_float_v(123456.5), "123456.5");
        assert_eq!(go_float_v(1234567.0), "1.234567e+06");
        assert_eq!(gantry_rules::go_json::json_float(1e-7), "1e-7");
        assert!(
            Template::parse("{.items[5]}")
                .unwrap()
                .execute(&list())
                .unwrap_err()
                .contains("out of bounds")
        );
    }

    #[test]
    fn column_expressions_are_relaxed() {
        for e in [".a.b", "a.b", "{.a.b}", "{a.b}"] {
            assert_eq!(relaxed(e).unwrap(), "{.a.b}", "{e}");
        }
        assert!(relaxed("{.a}{.b}").is_err());
    }
}
