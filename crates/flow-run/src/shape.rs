//! Where a document that is not flow IR goes wrong: serde says what it
//! could not read, the IR's JSON Schema says where (an RFC 6901 pointer),
//! so a flow from a TOML or Lua file or from a request names its place as
//! a JSON file's line and column do.

use std::sync::OnceLock;

use jsonschema::error::ValidationErrorKind;
use jsonschema::{ValidationError, Validator};
use serde::Deserialize;
use serde_json::Value;
use swarmd_flow::Flow;

/// Reads `value` as a flow. The error is the pointer of the deepest place
/// the IR's schema rejects and why; serde's message says why when that
/// place holds an unknown `kind` or `op` (serde lists the known ones), and
/// is the whole error when the place is the document itself (serde names
/// the field) or the schema finds nothing.
///
/// # Errors
/// Why `value` is not a flow.
pub fn flow_from_value(value: &Value) -> Result<Flow, String> {
    Flow::deserialize(value).map_err(|error| match deepest(value) {
        Some(Place {
            at, unknown_tag, ..
        }) if unknown_tag && at != "/" && error.to_string().contains("unknown variant") => {
            unknown_tag_at(value, &at, &error.to_string())
        }
        Some(Place { at, why, .. }) if at != "/" => format!("{at}: {why}"),
        _ if !value.is_object() => format!("/: a flow is a JSON object, not {}", kind(value)),
        _ => serde_path(value).unwrap_or_else(|| error.to_string()),
    })
}

/// What serde refuses where the schema does not (a number past its Rust
/// type), named by the JSON pointer of its place: the field's own, or
/// within a node (read through its `kind` tag) the node's.
fn serde_path(value: &Value) -> Option<String> {
    let error = serde_path_to_error::deserialize::<_, Flow>(value).err()?;
    let mut pointer = String::new();
    for segment in error.path().iter() {
        match segment {
            serde_path_to_error::Segment::Seq { index } => pointer.push_str(&format!("/{index}")),
            serde_path_to_error::Segment::Map { key } => {
                pointer.push('/');
                pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
            }
            serde_path_to_error::Segment::Enum { .. } | serde_path_to_error::Segment::Unknown => {}
        }
    }
    (!pointer.is_empty()).then(|| format!("{pointer}: {}", error.inner()))
}

/// A JSON value's kind, for a message.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
        Value::Object(_) => "an object",
    }
}

/// The IR's schema, compiled once (it is only read when a flow fails).
fn validator() -> Option<&'static Validator> {
    static VALIDATOR: OnceLock<Option<Validator>> = OnceLock::new();
    VALIDATOR
        .get_or_init(|| jsonschema::validator_for(&Flow::json_schema()).ok())
        .as_ref()
}

/// Where the schema rejects a document, and why.
struct Place {
    /// Its depth: the pointer's segments.
    depth: usize,
    at: String,
    why: String,
    /// No branch of the place's `oneOf` has its `kind` or `op`.
    unknown_tag: bool,
}

/// The deepest place the schema rejects in `value`.
fn deepest(value: &Value) -> Option<Place> {
    let mut best = None;
    for error in validator()?.iter_errors(value) {
        consider(&error, &mut best);
    }
    best
}

/// Offers `error` to `best`, looking into the branches of a `oneOf` or
/// `anyOf`: a branch for another node `kind` or expression `op` (its tag
/// is not the document's) says nothing about where the document is wrong.
fn consider(error: &ValidationError<'_>, best: &mut Option<Place>) {
    if let Some(allowed) = allowed_values(error) {
        offer(error, not_one_of(error.instance(), &allowed), false, best);
        return;
    }
    let mut unknown_tag = false;
    if let ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } =
        error.kind()
    {
        let mut looked = false;
        for branch in context.iter().filter(|b| !b.iter().any(is_other_tag)) {
            looked = true;
            for inner in branch {
                consider(inner, best);
            }
        }
        if looked {
            return;
        }
        unknown_tag = true;
    }
    offer(error, error.to_string(), unknown_tag, best);
}

/// Makes `error`'s place, saying `why`, the best when it is deeper.
fn offer(error: &ValidationError<'_>, why: String, unknown_tag: bool, best: &mut Option<Place>) {
    let at = error.instance_path().to_string();
    let depth = at.matches('/').count();
    if best.as_ref().is_none_or(|b| depth > b.depth) {
        let at = if at.is_empty() { "/".to_owned() } else { at };
        *best = Some(Place {
            depth,
            at,
            why,
            unknown_tag,
        });
    }
}

/// The values an `enum`, or a `oneOf` or `anyOf` of `const`s, allows, in
/// the schema's order, when `error` is a value that is none of them: every
/// branch then rejects the value itself with its `const` (and maybe its
/// `type`), not a place inside it.
fn allowed_values(error: &ValidationError<'_>) -> Option<Vec<Value>> {
    let context = match error.kind() {
        ValidationErrorKind::Enum { options } => return options.as_array().cloned(),
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => {
            context
        }
        _ => return None,
    };
    let here = error.instance_path();
    let mut allowed = Vec::with_capacity(context.len());
    for branch in context {
        let mut constant = None;
        for inner in branch {
            if inner.instance_path() != here {
                return None;
            }
            match inner.kind() {
                ValidationErrorKind::Constant { expected_value } if constant.is_none() => {
                    constant = Some(Value::clone(expected_value));
                }
                ValidationErrorKind::Type { .. } => {}
                _ => return None,
            }
        }
        allowed.push(constant?);
    }
    (!allowed.is_empty()).then_some(allowed)
}

/// An unknown `kind` or `op` at the node or expression `at`, as
/// `not_one_of` words a value outside an enum, at the tag's own pointer;
/// serde's `unknown variant `x`, expected one of `a`, `b`` gives the list.
fn unknown_tag_at(value: &Value, at: &str, serde: &str) -> String {
    let place = value.pointer(at);
    let tag = ["kind", "op"]
        .into_iter()
        .find(|tag| place.and_then(|p| p.get(tag)).is_some());
    let (Some(tag), Some((_, listed))) = (tag, serde.split_once("expected one of ")) else {
        return format!("{at}: {serde}");
    };
    let allowed: Vec<Value> = listed
        .split(", ")
        .map(|name| Value::from(name.trim_matches(|c| c == '`' || c == ' ')))
        .collect();
    let found = place.and_then(|p| p.get(tag)).cloned().unwrap_or_default();
    format!("{at}/{tag}: {}", not_one_of(&found, &allowed))
}

/// `"every" is not one of "all", "any", "race", "all_settled"`.
fn not_one_of(value: &Value, allowed: &[Value]) -> String {
    let allowed: Vec<String> = allowed.iter().map(Value::to_string).collect();
    format!("{value} is not one of {}", allowed.join(", "))
}

/// Whether `error` is a tag mismatch: a `kind` or `op` that is not the
/// branch's.
fn is_other_tag(error: &ValidationError<'_>) -> bool {
    let tag = error.instance_path().as_str();
    matches!(
        error.kind(),
        ValidationErrorKind::Constant { .. } | ValidationErrorKind::Enum { .. }
    ) && (tag.ends_with("/kind") || tag.ends_with("/op"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error_of(flow: Value) -> String {
        flow_from_value(&flow).unwrap_err()
    }

    #[test]
    fn a_wrong_field_deep_in_the_graph_is_named_by_its_pointer() {
        let step = |agent: Value| {
            json!({"kind": "step", "ref": agent,
                "in": {"op": "lit", "value": "x"}, "out": {"op": "path", "at": "$.o"}})
        };
        let flow = json!({"name": "f", "body": {"kind": "seq",
            "children": [step(json!("a")), step(json!(7))]}});
        let error = error_of(flow);
        assert!(error.starts_with("/body/children/1/ref: "), "{error}");
        assert!(error.contains("string"), "{error}");

        let flow = json!({"name": "f", "body": {"kind": "seq",
            "children": [step(json!("a")), {"kind": "wait", "name": "w",
                "out": {"op": "nope", "at": "$.w"}}]}});
        let error = error_of(flow);
        assert!(
            error.starts_with(r#"/body/children/1/out/op: "nope" is not one of "path""#),
            "{error}"
        );
    }

    #[test]
    fn an_unknown_kind_or_field_is_named_where_it_is() {
        let error = error_of(json!({"name": "f", "body": {"kind": "nope"}}));
        assert!(
            error.starts_with(r#"/body/kind: "nope" is not one of "step", "seq","#),
            "{error}"
        );
        let error = error_of(json!({"name": "f", "body": {"kind": "let",
            "at": {"op": "path", "at": "$.x"}, "value": {"op": "nope"}}}));
        assert!(
            error.starts_with(r#"/body/value/op: "nope" is not one of "#)
                && error.contains(r#""lit""#),
            "{error}"
        );
        let error = error_of(json!({"name": "f", "bodyy": {}}));
        assert!(error.contains("unknown field `bodyy`"), "{error}");
        let flow = json!({"name": "f", "body": {"kind": "let", "at": {"op": "path", "at": "$.x"},
            "value": {"op": "lit", "value": 1}}});
        assert!(flow_from_value(&flow).is_ok());
    }

    #[test]
    fn what_only_serde_refuses_is_named_by_its_pointer_too() {
        let why = error_of(json!([{"name": "x"}]));
        assert_eq!(why, "/: a flow is a JSON object, not an array");
        let flow = json!({"name": "x", "body": {"kind": "step", "ref": "a",
            "in": {"op": "lit", "value": 1}, "out": {"op": "path", "at": "$.o"},
            "retry": {"attempts": 2, "backoff_secs": 99_999_999_999_u64}}});
        // A node is read through its `kind` tag, so serde's path ends at
        // the node: the pointer names the node, the message the field.
        let why = error_of(flow);
        assert!(why.starts_with("/body: "), "{why}");
        assert!(why.contains("99999999999") && why.contains("u32"), "{why}");
    }

    #[test]
    fn a_value_outside_an_enum_is_told_every_allowed_value() {
        let step = json!({"kind": "step", "ref": "a",
            "in": {"op": "lit", "value": "x"}, "out": {"op": "path", "at": "$.o"}});
        let fanout = |join: Value| {
            json!({"name": "f", "body": {"kind": "fanout",
                "items": {"op": "lit", "value": [1]}, "bind": {"op": "path", "at": "$.i"},
                "concurrency": 1, "join": join, "out": {"op": "path", "at": "$.all"},
                "body": step}})
        };
        assert_eq!(
            error_of(fanout(json!("every"))),
            r#"/body/join: "every" is not one of "all", "any", "race", "all_settled""#
        );
        assert_eq!(
            error_of(fanout(json!(7))),
            r#"/body/join: 7 is not one of "all", "any", "race", "all_settled""#
        );
        let merge = json!({"name": "f", "body": {"kind": "seq", "children": [step,
            {"kind": "merge", "ref": "m", "strategy": "pick",
             "branches": {"op": "lit", "value": ["b"]}, "out": {"op": "path", "at": "$.m"}}]}});
        assert_eq!(
            error_of(merge),
            r#"/body/children/1/strategy: "pick" is not one of "pick_best", "sequence", "octopus""#
        );
    }
}
