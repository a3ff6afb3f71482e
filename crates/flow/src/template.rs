//! Templates: the subset of minijinja a flow's `template` expression may
//! use, and its rendering, bounded in instructions, in output and in the
//! memory its values can take.
//!
//! minijinja's fuel counts instructions, not bytes: one `~`, `+` or `*`
//! builds a string as large as its operands, so a few instructions can
//! double a value again and again, and a `set` block, a macro, a `filter`
//! block or a recursive loop captures output in memory rather than writing
//! it. A template that reached the daemon with any of those could exhaust
//! its memory on every evaluation, recovery included. So a template is
//! checked before it is stored and again before each rendering: it may
//! write values, test them, loop over them and branch, with the filters of
//! [`FILTERS`] (none of which makes a value more than a few times larger
//! than its input, and `join` bounded), and the output is written through
//! a writer that stops at [`MAX_RENDERED_BYTES`]. What one instruction can
//! cost over a large value is bounded by `meter` (template_meter.rs).

use std::io;

use minijinja::machinery::{Span, Token, WhitespaceConfig, tokenize};
use minijinja::syntax::SyntaxConfig;
use minijinja::{Error, ErrorKind, Value as Jinja};
use serde_json::Value;

use meter::Meter;

#[path = "template_meter.rs"]
mod meter;

/// Template instructions one rendering may spend.
const TEMPLATE_FUEL: u64 = 100_000;
/// Bytes one rendering may produce.
pub const MAX_RENDERED_BYTES: usize = 256 * 1024;

/// The filters a template may use. Every one returns a value at most a
/// few times the size of what it is given, or only part of it; `join` is
/// replaced by one that stops at [`MAX_RENDERED_BYTES`].
pub const FILTERS: &[&str] = &[
    "abs",
    "attr",
    "bool",
    "capitalize",
    "count",
    "d",
    "default",
    "dictsort",
    "first",
    "float",
    "groupby",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lower",
    "map",
    "max",
    "min",
    "reject",
    "rejectattr",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "string",
    "sum",
    "title",
    "trim",
    "unique",
    "upper",
];

/// minijinja's default filters a template may not use: each can make a
/// value many times larger than its input (`replace`, `indent`, `format`,
/// `pprint`, `escape` chained, `split`, `lines` and `list` into one value
/// per byte), or builds what `batch` pads.
const REMOVED_FILTERS: &[&str] = &[
    "batch",
    "chain",
    "e",
    "escape",
    "format",
    "indent",
    "lines",
    "list",
    "pprint",
    "replace",
    "split",
    "tojson",
    "urlencode",
    "zip",
];

/// The statements a template may open (`{% … %}`).
const STATEMENTS: &[&str] = &[
    "if",
    "elif",
    "else",
    "endif",
    "for",
    "endfor",
    "with",
    "endwith",
    "autoescape",
    "endautoescape",
];

/// The functions a template may call: names a template reads without a
/// run's variable behind them.
pub const FUNCTIONS: &[&str] = &["range", "dict"];

/// Why a template is refused before it runs, in words for the flow's
/// author: a statement, operator, filter or function outside the subset,
/// or a syntax error.
pub fn check(text: &str) -> Result<(), String> {
    allowed(text)?;
    environment(&Meter::default())
        .template_from_str(text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// `text`'s tokens as minijinja's own lexer reads them (default syntax).
pub(crate) fn tokens(text: &str) -> impl Iterator<Item = Result<(Token<'_>, Span), Error>> {
    // `SyntaxConfig` is a unit struct only without minijinja's
    // `custom_syntax` feature; `default()` builds it either way.
    #[allow(clippy::default_constructed_unit_structs)]
    tokenize(
        text,
        false,
        SyntaxConfig::default(),
        WhitespaceConfig::default(),
    )
}

/// Whether `text` keeps to the subset, token by token.
fn allowed(text: &str) -> Result<(), String> {
    let mut previous: Option<Token<'_>> = None;
    let mut peekable = tokens(text).peekable();
    while let Some(next) = peekable.next() {
        let (token, _) = next.map_err(|e| e.to_string())?;
        let opens_call = matches!(peekable.peek(), Some(Ok((Token::ParenOpen, _))));
        match &token {
            Token::Plus | Token::Mul | Token::Pow | Token::Tilde => {
                return Err(format!(
                    "`{}` is not allowed in a flow's template: it builds values without a bound; write the parts one after the other instead",
                    operator(&token)
                ));
            }
            Token::Ident(word) => match &previous {
                Some(Token::BlockStart) if !STATEMENTS.contains(word) => {
                    return Err(format!(
                        "`{{% {word} %}}` is not allowed in a flow's template (allowed: {})",
                        STATEMENTS.join(", ")
                    ));
                }
                Some(Token::Pipe) if !FILTERS.contains(word) => {
                    return Err(format!(
                        "the filter `{word}` is not allowed in a flow's template (allowed: {})",
                        FILTERS.join(", ")
                    ));
                }
                _ if *word == "recursive" => {
                    return Err("recursive loops are not allowed in a flow's template".to_owned());
                }
                Some(Token::Dot | Token::Pipe) => {}
                Some(Token::Ident("is" | "not")) => {}
                _ if opens_call && !FUNCTIONS.contains(word) && !is_keyword(word) => {
                    return Err(format!(
                        "the function `{word}` is not allowed in a flow's template (allowed: {})",
                        FUNCTIONS.join(", ")
                    ));
                }
                _ => {}
            },
            _ => {}
        }
        previous = Some(token);
    }
    Ok(())
}

fn is_keyword(word: &str) -> bool {
    matches!(word, "not" | "and" | "or" | "in" | "is" | "if" | "else")
}

fn operator(token: &Token<'_>) -> &'static str {
    match token {
        Token::Plus => "+",
        Token::Mul => "*",
        Token::Pow => "**",
        _ => "~",
    }
}

/// Renders `text` with the context's top-level variables, checked first,
/// within the fuel and the output bound.
pub fn render(text: &str, ctx: &Value) -> Result<String, String> {
    allowed(text)?;
    let mut env = environment(&Meter::default());
    let names = env
        .template_from_str(text)
        .map_err(|e| e.to_string())?
        .undeclared_variables(false);
    env.set_fuel(Some(meter::fuel(TEMPLATE_FUEL, ctx, names)));
    let template = env.template_from_str(text).map_err(|e| e.to_string())?;
    let mut out = Bounded(Vec::new());
    match template.render_captured_to(ctx, &mut out) {
        Ok(_) => String::from_utf8(out.0).map_err(|e| e.to_string()),
        Err(_) if out.0.len() > MAX_RENDERED_BYTES => Err(over()),
        Err(e) => Err(e.to_string()),
    }
}

fn over() -> String {
    format!("the rendering is more than {MAX_RENDERED_BYTES} bytes")
}

/// minijinja's environment with only the allowed filters and functions,
/// each filter charging `meter` for its input.
fn environment(meter: &Meter) -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    for name in REMOVED_FILTERS {
        env.remove_filter(name);
    }
    env.remove_global("namespace");
    meter::meter_filters(&mut env, FILTERS, meter);
    let meter = meter.clone();
    env.add_filter(
        "join",
        move |values: Jinja, separator: Option<&str>| -> Result<String, Error> {
            meter::charge_join(&meter, &values)?;
            join(&values, separator)
        },
    );
    env
}

/// `join`, stopping once its result would pass [`MAX_RENDERED_BYTES`].
fn join(values: &Jinja, separator: Option<&str>) -> Result<String, Error> {
    let separator = separator.unwrap_or("");
    let mut joined = String::new();
    for (i, item) in values.try_iter()?.enumerate() {
        if i > 0 {
            joined.push_str(separator);
        }
        match item.as_str() {
            Some(text) => joined.push_str(text),
            None => joined.push_str(&item.to_string()),
        }
        if joined.len() > MAX_RENDERED_BYTES {
            return Err(Error::new(ErrorKind::InvalidOperation, over()));
        }
    }
    Ok(joined)
}

/// An output that refuses to grow past [`MAX_RENDERED_BYTES`] (it keeps
/// one byte more, so the caller can tell the bound from another error).
struct Bounded(Vec<u8>);

impl io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = (MAX_RENDERED_BYTES + 1).saturating_sub(self.0.len());
        if room == 0 {
            return Err(io::Error::other(over()));
        }
        let n = buf.len().min(room);
        self.0.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
#[path = "template_tests.rs"]
mod tests;
