//! Upstream expressions and paths in swarmd's terms. Upstream paths are
//! `$`, `$.a.b` (a name is anything but `.` and `[`) and `$.a["x.y"]`;
//! they become RFC 9535 queries for reads and `$.name…` write paths.
//! Upstream's `not`, `and`, `or` and a loop's `cond` test truthiness
//! (null and false are false, everything else true) where swarmd wants
//! booleans, so a non-boolean operand is tested as `value ≠ null ∧ value ≠
//! false`, which gives the same answer.

use serde_json::{Map, Value};

use super::Conv;
use crate::expr::Expr;

/// The name upstream's top-level variable `input` is renamed to: swarmd's
/// `$.input` is the run's input.
pub(super) const RENAMED_INPUT: &str = "input_";

/// A parsed upstream path: its names from the root (none for `$`).
pub(super) fn parse_path(path: &str) -> Result<Vec<String>, &'static str> {
    let rest = path
        .strip_prefix('$')
        .or_else(|| path.strip_prefix("ctx"))
        .ok_or("a path starts with `$`")?;
    let body = match rest.as_bytes().first() {
        None => return Ok(Vec::new()),
        Some(b'.') => &rest[1..],
        Some(b'[') => rest,
        Some(_) => return Err("`$` is followed by `.`, `[` or nothing"),
    };
    let bytes = body.as_bytes();
    let mut names = Vec::new();
    let mut i = 0;
    loop {
        // A name starts here: plain, bracketed, or plain then bracketed.
        match bytes.get(i) {
            None | Some(b'.') => return Err("an empty name"),
            Some(b'[') => {}
            Some(_) => {
                let end = body[i..].find(['.', '[']).map_or(body.len(), |n| i + n);
                names.push(body[i..end].to_owned());
                i = end;
            }
        }
        while bytes.get(i) == Some(&b'[') {
            if bytes.get(i + 1) != Some(&b'"') {
                return Err("`[` is followed by `\"`");
            }
            let start = i + 2;
            let end = body[start..]
                .find('"')
                .map(|n| start + n)
                .ok_or("a bracket is not closed")?;
            if end == start {
                return Err("a bracketed name is empty");
            }
            if bytes.get(end + 1) != Some(&b']') {
                return Err("a bracketed name is not followed by `]`");
            }
            names.push(body[start..end].to_owned());
            i = end + 2;
        }
        match bytes.get(i) {
            None => break,
            Some(b'.') => i += 1,
            Some(_) => return Err("a bracket is followed by `.`, `[` or nothing"),
        }
    }
    Ok(names)
}

/// Renames upstream's `input` variable (see [`RENAMED_INPUT`]).
fn rename(mut names: Vec<String>) -> Vec<String> {
    if names.first().is_some_and(|n| n == "input") {
        names[0] = RENAMED_INPUT.to_owned();
    }
    names
}

/// An RFC 9535 query reading `names`.
pub(super) fn read_query(names: &[String]) -> String {
    let mut out = String::from("$");
    for name in names {
        let mut chars = name.chars();
        let shorthand = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if shorthand {
            out.push('.');
            out.push_str(name);
        } else {
            out.push_str("['");
            for c in name.chars() {
                match c {
                    '\'' => out.push_str("\\'"),
                    '\\' => out.push_str("\\\\"),
                    c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                    c => out.push(c),
                }
            }
            out.push_str("']");
        }
    }
    out
}

fn is_write_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn path(at: String) -> Expr {
    Expr::Path { at }
}

fn lit(value: Value) -> Expr {
    Expr::Lit { value }
}

/// `value ≠ null ∧ value ≠ false`: upstream's truthiness as a boolean; a
/// boolean expression is kept as it is.
pub(super) fn truthy(expr: Expr) -> Expr {
    let boolean = match &expr {
        Expr::Eq { .. }
        | Expr::Ne { .. }
        | Expr::Lt { .. }
        | Expr::Gt { .. }
        | Expr::And { .. }
        | Expr::Or { .. }
        | Expr::Not { .. }
        | Expr::Exists { .. } => true,
        Expr::Lit { value } => value.is_boolean(),
        _ => false,
    };
    if boolean {
        return expr;
    }
    Expr::And {
        args: vec![
            Expr::Ne {
                lhs: Box::new(expr.clone()),
                rhs: Box::new(lit(Value::Null)),
            },
            Expr::Ne {
                lhs: Box::new(expr),
                rhs: Box::new(lit(Value::Bool(false))),
            },
        ],
    }
}

impl Conv {
    /// The object at `at`, its fields checked against `allowed`.
    pub(super) fn fields<'v>(
        &mut self,
        value: &'v Value,
        at: &str,
        allowed: &[&str],
    ) -> Option<&'v Map<String, Value>> {
        let Some(map) = value.as_object() else {
            self.problem(at, "not_an_object", "an object is wanted here".into(), "");
            return None;
        };
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                self.problem(
                    &format!("{at}/{}", escape(key)),
                    "unknown_field",
                    format!("`{key}` is not a field here"),
                    &format!("the fields are: {}", allowed.join(", ")),
                );
            }
        }
        Some(map)
    }

    /// The field `key` of `map`, reported when missing.
    pub(super) fn field<'v>(
        &mut self,
        map: &'v Map<String, Value>,
        at: &str,
        key: &str,
    ) -> Option<&'v Value> {
        let found = map.get(key);
        if found.is_none() {
            self.problem(
                at,
                "missing_field",
                format!("`{key}` is missing"),
                "see docs/flows.md, Upstream Blueprints",
            );
        }
        found
    }

    fn sub(&mut self, map: &Map<String, Value>, at: &str, key: &str) -> Option<Box<Expr>> {
        let value = self.field(map, at, key)?;
        self.expr(value, &format!("{at}/{key}")).map(Box::new)
    }

    /// An upstream path's names, reported when it does not parse.
    fn names(&mut self, value: &Value, at: &str) -> Option<Vec<String>> {
        let Some(text) = value.as_str() else {
            self.problem(at, "bad_path", "a path is a string".into(), "");
            return None;
        };
        match parse_path(text) {
            Ok(names) => Some(rename(names)),
            Err(why) => {
                self.problem(
                    at,
                    "bad_path",
                    format!("`{text}` is not an upstream path: {why}"),
                    "write `$.name`, `$.a.b` or `$.a[\"x.y\"]`",
                );
                None
            }
        }
    }

    /// A write target: an upstream `path` expression (or, as flow-ir 0.3's
    /// `let` writes it, a bare path string).
    pub(super) fn target(&mut self, value: &Value, at: &str) -> Option<Expr> {
        let (text, at) = match value {
            Value::String(_) => (value, at.to_owned()),
            _ => {
                let map = self.fields(value, at, &["op", "at"])?;
                if map.get("op").and_then(Value::as_str) != Some("path") {
                    self.problem(
                        &format!("{at}/op"),
                        "bad_write_path",
                        "a write target is a `path` expression".into(),
                        "",
                    );
                    return None;
                }
                (self.field(map, at, "at")?, format!("{at}/at"))
            }
        };
        let names = self.names(text, &at)?;
        if names.is_empty() || !names.iter().all(|n| is_write_name(n)) {
            self.problem(
                &at,
                "bad_write_path",
                format!("swarmd cannot write to {}", read_query(&names)),
                "swarmd writes `$.name(.name)*`, each name a letter or `_`, then letters, digits, `_`, `-`",
            );
            return None;
        }
        Some(path(format!("$.{}", names.join("."))))
    }

    /// An upstream expression in swarmd's terms.
    pub(super) fn expr(&mut self, value: &Value, at: &str) -> Option<Expr> {
        let op = value.get("op").and_then(Value::as_str).unwrap_or("");
        let binary = |conv: &mut Conv, make: fn(Box<Expr>, Box<Expr>) -> Expr| {
            let map = conv.fields(value, at, &["op", "lhs", "rhs"])?;
            let lhs = conv.sub(map, at, "lhs");
            let rhs = conv.sub(map, at, "rhs");
            Some(make(lhs?, rhs?))
        };
        match op {
            "path" => {
                let map = self.fields(value, at, &["op", "at"])?;
                let text = self.field(map, at, "at")?;
                let names = self.names(text, &format!("{at}/at"))?;
                Some(path(read_query(&names)))
            }
            "lit" => {
                let map = self.fields(value, at, &["op", "value"])?;
                Some(lit(self.field(map, at, "value")?.clone()))
            }
            "eq" => binary(self, |lhs, rhs| Expr::Eq { lhs, rhs }),
            "ne" => binary(self, |lhs, rhs| Expr::Ne { lhs, rhs }),
            "lt" => binary(self, |lhs, rhs| Expr::Lt { lhs, rhs }),
            "gt" => binary(self, |lhs, rhs| Expr::Gt { lhs, rhs }),
            // Both sides must be two numbers or two strings, so `a ≤ b` is
            // `¬(a > b)` and `a ≥ b` is `¬(a < b)`, errors included.
            "lte" => binary(self, |lhs, rhs| Expr::Not {
                arg: Box::new(Expr::Gt { lhs, rhs }),
            }),
            "gte" => binary(self, |lhs, rhs| Expr::Not {
                arg: Box::new(Expr::Lt { lhs, rhs }),
            }),
            "not" | "len" | "exists" => {
                let map = self.fields(value, at, &["op", "arg"])?;
                let arg = self.sub(map, at, "arg")?;
                match op {
                    "not" => Some(Expr::Not {
                        arg: Box::new(truthy(*arg)),
                    }),
                    "len" => Some(Expr::Len { arg }),
                    _ => self.exists(*arg, at),
                }
            }
            "and" | "or" => {
                let map = self.fields(value, at, &["op", "args"])?;
                let Some(list) = self.field(map, at, "args")?.as_array() else {
                    self.problem(
                        &format!("{at}/args"),
                        "not_an_array",
                        "`args` is an array".into(),
                        "",
                    );
                    return None;
                };
                let args: Vec<Option<Expr>> = list
                    .iter()
                    .enumerate()
                    .map(|(i, a)| self.expr(a, &format!("{at}/args/{i}")).map(truthy))
                    .collect();
                let args = args.into_iter().collect::<Option<Vec<_>>>()?;
                Some(if op == "and" {
                    Expr::And { args }
                } else {
                    Expr::Or { args }
                })
            }
            "in" => {
                let map = self.fields(value, at, &["op", "needle", "haystack"])?;
                let needle = self.sub(map, at, "needle");
                let haystack = self.sub(map, at, "haystack");
                self.member(*needle?, *haystack?, at)
            }
            "add" | "sub" | "mul" | "div" | "mod" | "call_extern" => {
                self.problem(
                    &format!("{at}/op"),
                    "unsupported_op",
                    format!("swarmd has no `{op}` expression"),
                    "compute the value in a step, or drop the operation",
                );
                None
            }
            _ => {
                self.problem(
                    &format!("{at}/op"),
                    "unknown_op",
                    format!("`{op}` is not an upstream expression"),
                    "see flow-ir-core's Expr",
                );
                None
            }
        }
    }

    /// Upstream `exists`: the argument resolves to a value other than null.
    fn exists(&mut self, arg: Expr, at: &str) -> Option<Expr> {
        match arg {
            Expr::Path { at: query } => Some(Expr::And {
                args: vec![
                    Expr::Exists { at: query.clone() },
                    Expr::Ne {
                        lhs: Box::new(path(query)),
                        rhs: Box::new(lit(Value::Null)),
                    },
                ],
            }),
            Expr::Lit { value } => Some(lit(Value::Bool(!value.is_null()))),
            _ => {
                self.problem(
                    &format!("{at}/arg"),
                    "unsupported_op",
                    "swarmd's `exists` tests a path; this one tests another expression".into(),
                    "test a path, or compare the expression with `ne` null",
                );
                None
            }
        }
    }

    /// Upstream `in`: whether `needle` equals an element of the array
    /// `haystack`.
    fn member(&mut self, needle: Expr, haystack: Expr, at: &str) -> Option<Expr> {
        match (needle, haystack) {
            (
                needle,
                Expr::Lit {
                    value: Value::Array(items),
                },
            ) => Some(Expr::Or {
                args: items
                    .into_iter()
                    .map(|item| Expr::Eq {
                        lhs: Box::new(needle.clone()),
                        rhs: Box::new(lit(item)),
                    })
                    .collect(),
            }),
            (Expr::Path { at: needle }, Expr::Path { at: hay }) => Some(Expr::Exists {
                at: format!("{hay}[?@ == {needle}]"),
            }),
            (Expr::Lit { value }, Expr::Path { at: hay })
                if !value.is_array() && !value.is_object() =>
            {
                Some(Expr::Exists {
                    at: format!("{hay}[?@ == {value}]"),
                })
            }
            _ => {
                self.problem(
                    at,
                    "unsupported_op",
                    "swarmd expresses `in` over a literal array, or a path with a path or a literal number, string, boolean or null".into(),
                    "move the test into a step",
                );
                None
            }
        }
    }
}

/// RFC 6901 escaping of one pointer token.
pub(super) fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}
