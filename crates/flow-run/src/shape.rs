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
            format!("{at}: {error}")
        }
        Some(Place { at, why, .. }) if at != "/" => format!("{at}: {why}"),
        _ => error.to_string(),
    })
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
    let at = error.instance_path().to_string();
    let depth = at.matches('/').count();
    if best.as_ref().is_none_or(|b| depth > b.depth) {
        let at = if at.is_empty() { "/".to_owned() } else { at };
        *best = Some(Place {
            depth,
            at,
            why: error.to_string(),
            unknown_tag,
        });
    }
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
            error.starts_with("/body/children/1/out: ") && error.contains("`nope`"),
            "{error}"
        );
    }

    #[test]
    fn an_unknown_kind_or_field_is_named_where_it_is() {
        let error = error_of(json!({"name": "f", "body": {"kind": "nope"}}));
        assert!(
            error.starts_with("/body: ") && error.contains("unknown variant `nope`"),
            "{error}"
        );
        let error = error_of(json!({"name": "f", "bodyy": {}}));
        assert!(error.contains("unknown field `bodyy`"), "{error}");
        let flow = json!({"name": "f", "body": {"kind": "let", "at": {"op": "path", "at": "$.x"},
            "value": {"op": "lit", "value": 1}}});
        assert!(flow_from_value(&flow).is_ok());
    }
}
