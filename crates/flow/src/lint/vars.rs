//! The variables an expression reads, split into those it needs bound
//! (a `path`, a `select`, a template's use of a name) and those it only
//! tests for (an `exists`, a template's `is defined` / `is undefined`),
//! and the variables a graph writes anywhere.

use std::collections::BTreeSet;

use minijinja::machinery::Token;
use serde_json::Value;

use crate::expr::Expr;
use crate::ir::Node;
use crate::path::WritePath;
use crate::template::{self, FUNCTIONS};

/// The top-level variables an expression reads.
#[derive(Debug, Default)]
pub(super) struct Reads {
    /// Read for their value: bound on every path before the expression.
    pub(super) needed: BTreeSet<String>,
    /// Only tested for (and not in `needed`): an `exists` never fails on
    /// a missing variable, nor a template's `is defined` test, so these
    /// need only be written somewhere in the flow.
    pub(super) tested: BTreeSet<String>,
}

impl Reads {
    /// Every variable read, needed or tested.
    pub(super) fn all(&self) -> impl Iterator<Item = &String> {
        self.needed.iter().chain(&self.tested)
    }
}

/// The top-level variables `expr` reads: the first name of each query,
/// and a template's undeclared variables (its functions are not).
pub(super) fn read_variables(expr: &Expr) -> Reads {
    let mut reads = Reads::default();
    collect(expr, &mut reads);
    let needed = &reads.needed;
    reads.tested.retain(|name| !needed.contains(name));
    reads
}

fn collect(expr: &Expr, out: &mut Reads) {
    match expr {
        Expr::Template { text } => template_variables(text, out),
        Expr::Exists { at } => out.tested.extend(first_name(at)),
        Expr::Path { at } | Expr::Select { at } => out.needed.extend(first_name(at)),
        Expr::Lit { .. } => {}
        Expr::Eq { lhs, rhs }
        | Expr::Ne { lhs, rhs }
        | Expr::Lt { lhs, rhs }
        | Expr::Gt { lhs, rhs } => {
            collect(lhs, out);
            collect(rhs, out);
        }
        Expr::And { args } | Expr::Or { args } => args.iter().for_each(|a| collect(a, out)),
        Expr::Not { arg } | Expr::Len { arg } => collect(arg, out),
    }
}

/// A template's undeclared variables; a name the template tests with
/// `is defined` or `is undefined` (`is not defined`) is tested, wherever
/// else the template uses it, as the test is how it guards those uses.
fn template_variables(text: &str, out: &mut Reads) {
    let env = minijinja::Environment::new();
    let Ok(template) = env.template_from_str(text) else {
        return;
    };
    let tested = defined_tests(text);
    for name in template.undeclared_variables(false) {
        if FUNCTIONS.contains(&name.as_str()) {
            continue;
        }
        if tested.contains(&name) {
            out.tested.insert(name);
        } else {
            out.needed.insert(name);
        }
    }
}

/// The names `text` tests as `NAME is [not] defined` or `NAME is [not]
/// undefined`, NAME a top-level name (not an attribute or a filter).
fn defined_tests(text: &str) -> BTreeSet<String> {
    let tokens: Vec<Token<'_>> = template::tokens(text)
        .map_while(Result::ok)
        .map(|(token, _)| token)
        .collect();
    let mut tested = BTreeSet::new();
    for (i, token) in tokens.iter().enumerate() {
        let Token::Ident(name) = token else {
            continue;
        };
        let top_level = i == 0 || !matches!(tokens[i - 1], Token::Dot | Token::Pipe);
        let mut next = tokens[i + 1..].iter();
        if !top_level || !matches!(next.next(), Some(Token::Ident("is"))) {
            continue;
        }
        let test = match next.next() {
            Some(Token::Ident("not")) => next.next(),
            other => other,
        };
        if matches!(test, Some(Token::Ident("defined" | "undefined"))) {
            tested.insert((*name).to_owned());
        }
    }
    tested
}

/// Every variable a node or a node under it writes (`out`, `at`, `bind`,
/// `counter`, `err_at`, `changes`, `session`).
pub(super) fn written(node: &Node, out: &mut BTreeSet<String>) {
    let mut add = |target: &Expr| {
        if let Expr::Path { at } = target
            && let Ok(path) = WritePath::parse(at)
        {
            out.insert(path.variable().to_owned());
        }
    };
    match node {
        Node::Step {
            out: target,
            changes,
            session,
            ..
        } => {
            add(target);
            changes.iter().chain(session).for_each(&mut add);
        }
        Node::Merge { out: target, .. }
        | Node::Wait { out: target, .. }
        | Node::Call { out: target, .. } => add(target),
        Node::Let { at, .. } => add(at),
        Node::Fanout {
            bind, out: target, ..
        } => {
            add(bind);
            add(target);
        }
        Node::Loop { counter, .. } => add(counter),
        Node::Try { err_at, .. } => err_at.iter().for_each(&mut add),
        Node::Seq { .. } | Node::Branch { .. } => {}
    }
    for (_, child) in node.children() {
        written(child, out);
    }
}

/// Whether a loop's body runs at least once whatever the run's variables:
/// its `cond` reads nothing but its counter (a plain `$.name`, 0 before the
/// first test) and holds there, and `max` is not 0.
pub(super) fn runs_once(counter: &Expr, cond: &Expr, max: Option<u32>) -> bool {
    let Expr::Path { at } = counter else {
        return false;
    };
    let Ok(path) = WritePath::parse(at) else {
        return false;
    };
    let counter_only = cond.reads().iter().all(|read| *read == at.as_str())
        && read_variables(cond)
            .all()
            .all(|variable| variable == path.variable());
    if max == Some(0) || path.depth() != 1 || !counter_only {
        return false;
    }
    let mut ctx = Value::Object(serde_json::Map::new());
    path.write(&mut ctx, Value::from(0));
    matches!(cond.test(&ctx), Ok(true))
}

/// `plan` of `$.plan.steps[0]` or `$['plan']…`; none for `$` or `$..x`.
fn first_name(at: &str) -> Option<String> {
    if let Some(rest) = at.strip_prefix("$.") {
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        return (!rest.is_empty() && !rest.starts_with('.')).then(|| rest[..end].to_owned());
    }
    let rest = at.strip_prefix("$['")?;
    rest.find('\'').map(|end| rest[..end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(text: &str) -> (Vec<String>, Vec<String>) {
        let reads = read_variables(&Expr::Template {
            text: text.to_owned(),
        });
        (
            reads.needed.into_iter().collect(),
            reads.tested.into_iter().collect(),
        )
    }

    #[test]
    fn a_template_tests_a_name_only_through_is_defined_or_is_undefined() {
        assert_eq!(
            template("{% if maybe is defined %}{{ maybe }}{% endif %}{{ sure }}"),
            (vec!["sure".to_owned()], vec!["maybe".to_owned()])
        );
        assert_eq!(
            template("{{ a is not defined }} {{ b is undefined }} {{ c is none }}"),
            (vec!["c".to_owned()], vec!["a".to_owned(), "b".to_owned()])
        );
        // An attribute's test reads its object.
        assert_eq!(
            template("{{ plan.step is defined }}"),
            (vec!["plan".to_owned()], vec![])
        );
    }

    #[test]
    fn exists_tests_and_a_path_beside_it_needs() {
        let exists = |at: &str| Expr::Exists { at: at.to_owned() };
        let path = Expr::Path {
            at: "$.b".to_owned(),
        };
        let reads = read_variables(&Expr::And {
            args: vec![exists("$.a.x"), exists("$.b"), path],
        });
        assert_eq!(reads.needed, BTreeSet::from(["b".to_owned()]));
        assert_eq!(reads.tested, BTreeSet::from(["a".to_owned()]));
    }
}
