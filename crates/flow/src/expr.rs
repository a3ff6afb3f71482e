//! Expressions: how values are selected, tested and rendered between
//! steps. An expression is JSON tagged by `op`, so there is no grammar to
//! parse; selection is RFC 9535 JSONPath (`serde_json_path`) and prompts
//! are rendered by a bounded subset of minijinja (`template`). Upstream's three operators
//! (`path`, `lit`, `eq`) mean what they mean there.

use std::cmp::Ordering;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json_path::JsonPath;

pub use crate::template::MAX_RENDERED_BYTES;

/// An expression over a run's context (`$.input` and the variables).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Expr {
    /// The one value at an RFC 9535 JSONPath; an error when none or
    /// several match.
    Path {
        /// The query, e.g. `$.plan.steps[0]`.
        at: String,
    },
    /// Every value matching an RFC 9535 JSONPath, as an array (possibly
    /// empty).
    Select {
        /// The query, e.g. `$.results[?@.ok == true].branch`.
        at: String,
    },
    /// Whether a JSONPath matches anything.
    Exists {
        /// The query.
        at: String,
    },
    /// A literal value.
    Lit {
        /// The value.
        value: Value,
    },
    /// Equality of two values (JSON equality; `1` equals `1.0`).
    Eq {
        /// Left.
        lhs: Box<Expr>,
        /// Right.
        rhs: Box<Expr>,
    },
    /// Inequality.
    Ne {
        /// Left.
        lhs: Box<Expr>,
        /// Right.
        rhs: Box<Expr>,
    },
    /// `lhs < rhs` for two numbers or two strings.
    Lt {
        /// Left.
        lhs: Box<Expr>,
        /// Right.
        rhs: Box<Expr>,
    },
    /// `lhs > rhs` for two numbers or two strings.
    Gt {
        /// Left.
        lhs: Box<Expr>,
        /// Right.
        rhs: Box<Expr>,
    },
    /// True when every argument is true (and when there are none).
    And {
        /// The arguments.
        args: Vec<Expr>,
    },
    /// True when one argument is true.
    Or {
        /// The arguments.
        args: Vec<Expr>,
    },
    /// The negation of a boolean.
    Not {
        /// The argument.
        arg: Box<Expr>,
    },
    /// The length of an array, object or string.
    Len {
        /// The argument.
        arg: Box<Expr>,
    },
    /// A string rendered by minijinja with the context's top-level
    /// variables (`{{ input.topic }}`, `{% for r in results %}…`).
    Template {
        /// The template.
        text: String,
    },
}

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExprError {
    #[error("`{at}` is not an RFC 9535 JSONPath: {why}")]
    BadPath { at: String, why: String },
    #[error("`{at}` matched nothing")]
    NotFound { at: String },
    #[error("`{at}` matched {count} values where one was wanted (use `select`)")]
    NotOne { at: String, count: usize },
    #[error("`{op}` wants {wanted}, got {got}")]
    Type {
        op: &'static str,
        wanted: &'static str,
        got: String,
    },
    #[error("template: {0}")]
    Template(String),
}

impl Expr {
    /// Evaluates the expression against `ctx`.
    pub fn eval(&self, ctx: &Value) -> Result<Value, ExprError> {
        match self {
            Expr::Path { at } => {
                let nodes = query(at, ctx)?;
                match nodes.as_slice() {
                    [one] => Ok((*one).clone()),
                    [] => Err(ExprError::NotFound { at: at.clone() }),
                    many => Err(ExprError::NotOne {
                        at: at.clone(),
                        count: many.len(),
                    }),
                }
            }
            Expr::Select { at } => Ok(Value::Array(query(at, ctx)?.into_iter().cloned().collect())),
            Expr::Exists { at } => Ok(Value::Bool(!query(at, ctx)?.is_empty())),
            Expr::Lit { value } => Ok(value.clone()),
            Expr::Eq { lhs, rhs } => Ok(Value::Bool(equal(&lhs.eval(ctx)?, &rhs.eval(ctx)?))),
            Expr::Ne { lhs, rhs } => Ok(Value::Bool(!equal(&lhs.eval(ctx)?, &rhs.eval(ctx)?))),
            Expr::Lt { lhs, rhs } => compare("lt", lhs, rhs, ctx, Ordering::Less),
            Expr::Gt { lhs, rhs } => compare("gt", lhs, rhs, ctx, Ordering::Greater),
            Expr::And { args } => {
                for arg in args {
                    if !boolean("and", &arg.eval(ctx)?)? {
                        return Ok(Value::Bool(false));
                    }
                }
                Ok(Value::Bool(true))
            }
            Expr::Or { args } => {
                for arg in args {
                    if boolean("or", &arg.eval(ctx)?)? {
                        return Ok(Value::Bool(true));
                    }
                }
                Ok(Value::Bool(false))
            }
            Expr::Not { arg } => Ok(Value::Bool(!boolean("not", &arg.eval(ctx)?)?)),
            Expr::Len { arg } => match arg.eval(ctx)? {
                Value::Array(a) => Ok(a.len().into()),
                Value::Object(o) => Ok(o.len().into()),
                Value::String(s) => Ok(s.chars().count().into()),
                other => Err(type_error("len", "an array, object or string", &other)),
            },
            Expr::Template { text } => render(text, ctx).map(Value::String),
        }
    }

    /// Evaluates a condition: it must give a boolean.
    pub fn test(&self, ctx: &Value) -> Result<bool, ExprError> {
        boolean("cond", &self.eval(ctx)?)
    }

    /// The JSONPath queries this expression reads, for lint.
    pub fn reads(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_reads(&mut out);
        out
    }

    fn collect_reads<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Expr::Path { at } | Expr::Select { at } | Expr::Exists { at } => out.push(at),
            Expr::Lit { .. } | Expr::Template { .. } => {}
            Expr::Eq { lhs, rhs }
            | Expr::Ne { lhs, rhs }
            | Expr::Lt { lhs, rhs }
            | Expr::Gt { lhs, rhs } => {
                lhs.collect_reads(out);
                rhs.collect_reads(out);
            }
            Expr::And { args } | Expr::Or { args } => {
                for arg in args {
                    arg.collect_reads(out);
                }
            }
            Expr::Not { arg } | Expr::Len { arg } => arg.collect_reads(out),
        }
    }

    /// Checks the expression's queries and template without a context.
    pub fn check(&self) -> Result<(), ExprError> {
        for at in self.reads() {
            parse_path(at)?;
        }
        self.check_templates()
    }

    fn check_templates(&self) -> Result<(), ExprError> {
        match self {
            Expr::Template { text } => crate::template::check(text).map_err(ExprError::Template),
            Expr::Eq { lhs, rhs }
            | Expr::Ne { lhs, rhs }
            | Expr::Lt { lhs, rhs }
            | Expr::Gt { lhs, rhs } => {
                lhs.check_templates()?;
                rhs.check_templates()
            }
            Expr::And { args } | Expr::Or { args } => {
                args.iter().try_for_each(Expr::check_templates)
            }
            Expr::Not { arg } | Expr::Len { arg } => arg.check_templates(),
            Expr::Path { .. } | Expr::Select { .. } | Expr::Exists { .. } | Expr::Lit { .. } => {
                Ok(())
            }
        }
    }
}

/// The deepest a JSONPath may nest brackets and parentheses: the parser
/// recurses once per level, so a path of thousands would exhaust the stack.
pub const MAX_PATH_NESTING: usize = 32;

/// The most descendant segments (`..`) one JSONPath may hold: each one
/// multiplies what the path matches by the depth of the value it searches,
/// so two or more make a query's work (and the list of matches it builds)
/// grow as a power of the run's variables. One keeps a query linear in them.
pub const MAX_PATH_DESCENTS: usize = 1;

fn parse_path(at: &str) -> Result<JsonPath, ExprError> {
    let (deepest, descents) = shape(at);
    if deepest > MAX_PATH_NESTING {
        return Err(ExprError::BadPath {
            at: at.to_owned(),
            why: format!("it nests brackets and parentheses deeper than {MAX_PATH_NESTING}"),
        });
    }
    if descents > MAX_PATH_DESCENTS {
        return Err(ExprError::BadPath {
            at: at.to_owned(),
            why: format!(
                "it holds {descents} descendant segments (`..`), at most {MAX_PATH_DESCENTS} is \
                 allowed: name the way to the values after the first"
            ),
        });
    }
    JsonPath::parse(at).map_err(|e| ExprError::BadPath {
        at: at.to_owned(),
        why: e.to_string(),
    })
}

/// The deepest nesting of `(` and `[` in a JSONPath and the number of its
/// descendant segments (`..`), both outside its quoted strings (`'…'` or
/// `"…"`, with `\` escapes).
fn shape(at: &str) -> (usize, usize) {
    let (mut depth, mut deepest, mut descents) = (0usize, 0usize, 0usize);
    let mut quote: Option<char> = None;
    let mut chars = at.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(_), '\\') => {
                chars.next();
            }
            (None, '.') if chars.peek() == Some(&'.') => {
                chars.next();
                descents += 1;
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(' | '[') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (None, ')' | ']') => depth = depth.saturating_sub(1),
            (None, _) => {}
        }
    }
    (deepest, descents)
}

fn query<'v>(at: &str, ctx: &'v Value) -> Result<Vec<&'v Value>, ExprError> {
    Ok(parse_path(at)?.query(ctx).all())
}

/// JSON equality, with numbers compared by value.
fn equal(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x == y,
        _ => a == b,
    }
}

fn compare(
    op: &'static str,
    lhs: &Expr,
    rhs: &Expr,
    ctx: &Value,
    wanted: Ordering,
) -> Result<Value, ExprError> {
    let (a, b) = (lhs.eval(ctx)?, rhs.eval(ctx)?);
    let order = match (&a, &b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64().partial_cmp(&y.as_f64()),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    };
    match order {
        Some(order) => Ok(Value::Bool(order == wanted)),
        None => Err(type_error(
            op,
            "two numbers or two strings",
            &json_pair(&a, &b),
        )),
    }
}

fn json_pair(a: &Value, b: &Value) -> Value {
    Value::Array(vec![a.clone(), b.clone()])
}

fn boolean(op: &'static str, value: &Value) -> Result<bool, ExprError> {
    value
        .as_bool()
        .ok_or_else(|| type_error(op, "a boolean", value))
}

fn type_error(op: &'static str, wanted: &'static str, got: &Value) -> ExprError {
    let mut got = got.to_string();
    if got.len() > 80 {
        let cut = (0..=80)
            .rev()
            .find(|i| got.is_char_boundary(*i))
            .unwrap_or(0);
        got.truncate(cut);
        got.push('…');
    }
    ExprError::Type { op, wanted, got }
}

fn render(text: &str, ctx: &Value) -> Result<String, ExprError> {
    crate::template::render(text, ctx).map_err(ExprError::Template)
}

#[cfg(test)]
#[path = "expr_tests.rs"]
mod tests;
