//! The JSON Schemas of the tools: standard JSON Schema only, and typed
//! shapes for what the tools take as plain JSON at run time.
//!
//! schemars marks integers with formats of its own (`uint32`, `int64`,
//! `double`, …) that no JSON Schema validator knows and the MCP Inspector
//! warns about; [`standard`] drops every `format` outside the JSON Schema
//! vocabulary and keeps what an unsigned one said as `minimum: 0`, and
//! writes boolean subschemas (`"input": true`) as objects, the one form
//! every MCP client's SDK accepts.
//! [`PolicySchema`] types the `policy` argument of `spawn` and
//! `spawn_many`: its fields and bounds are those of the engine's
//! `PolicyOverrides`, which decodes (and checks) the argument.

use std::sync::Arc;

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde_json::{Value, json};
use swarmd_engine::task::{MAX_ATTEMPTS, MAX_BACKOFF_MS, MAX_POLICY_SECS};

/// The formats of the JSON Schema 2020-12 vocabulary.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// `schema` with standard JSON Schema only (see the module's comment).
pub(super) fn standard(schema: &JsonObject) -> Arc<JsonObject> {
    let mut value = Value::Object(schema.clone());
    clean(&mut value);
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(schema.clone()),
    }
}

/// Keywords whose value maps names to subschemas.
const SUBSCHEMA_MAPS: &[&str] = &["properties", "patternProperties", "$defs", "definitions"];
/// Keywords whose value is a subschema or a list of them (`additionalProperties`
/// stays a boolean where it is one: every client reads that form).
const SUBSCHEMA_PLACES: &[&str] = &["items", "prefixItems", "anyOf", "oneOf", "allOf"];

/// A boolean subschema as the object that means the same: `true` is `{}`,
/// `false` is `{"not": {}}`. JSON Schema allows both forms, but the
/// TypeScript MCP SDK (Claude Code's, the MCP Inspector's) refuses a tool
/// list in which any property's schema is not an object.
fn object_form(schema: &mut Value) {
    if let Value::Bool(allows) = schema {
        *schema = if *allows {
            json!({})
        } else {
            json!({"not": {}})
        };
    }
}

/// Drops non-standard `format`s everywhere under `value` (an unsigned one
/// leaves `minimum: 0` unless a minimum is set) and writes boolean
/// subschemas in their object form.
fn clean(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in SUBSCHEMA_MAPS {
                if let Some(Value::Object(named)) = map.get_mut(*key) {
                    named.values_mut().for_each(object_form);
                }
            }
            for key in SUBSCHEMA_PLACES {
                match map.get_mut(*key) {
                    Some(Value::Array(list)) => list.iter_mut().for_each(object_form),
                    Some(one) => object_form(one),
                    None => {}
                }
            }
            let format = map.get("format").and_then(Value::as_str).map(str::to_owned);
            if let Some(format) = format
                && !STANDARD_FORMATS.contains(&format.as_str())
            {
                map.remove("format");
                if format.starts_with("uint") && !map.contains_key("minimum") {
                    map.insert("minimum".into(), json!(0));
                }
            }
            map.values_mut().for_each(clean);
        }
        Value::Array(items) => items.iter_mut().for_each(clean),
        _ => {}
    }
}

/// Policy overrides; unset fields take the agent's or the configured
/// defaults.
#[derive(Debug, JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code, reason = "only its schema is used")]
pub(super) struct PolicySchema {
    /// Attempts before the task ends with its last outcome.
    #[schemars(range(min = 1, max = MAX_ATTEMPTS))]
    max_attempts: Option<u32>,
    /// Outcomes that start another attempt.
    #[schemars(length(max = 2))]
    retry_on: Option<Vec<RetryOnSchema>>,
    /// Milliseconds between attempts.
    #[schemars(range(max = MAX_BACKOFF_MS))]
    retry_backoff_ms: Option<u64>,
    /// Seconds one attempt may run.
    #[schemars(range(min = 1, max = MAX_POLICY_SECS))]
    attempt_timeout_secs: Option<u64>,
    /// Seconds the task may wait in the queue.
    #[schemars(range(min = 1, max = MAX_POLICY_SECS))]
    queue_timeout_secs: Option<u64>,
    /// Seconds an operator attempt may hold its lease before a warning.
    #[schemars(range(max = MAX_POLICY_SECS))]
    long_hold_warn_secs: Option<u64>,
    /// Tokens the task may spend.
    #[schemars(range(min = 1))]
    max_tokens: Option<u64>,
    /// US dollars the task may spend (more than 0).
    max_cost_usd: Option<f64>,
}

/// An outcome a policy retries on.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code, reason = "only its schema is used")]
enum RetryOnSchema {
    Failed,
    Blocked,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::handler::server::common::schema_for_input;
    use swarmd_engine::task::{PolicyOverrides, RetryOn};

    #[test]
    fn boolean_subschemas_are_written_as_objects() {
        let schema = json!({
            "type": "object",
            "properties": {"input": true, "never": false, "list": {"type": "array", "items": true}},
            "additionalProperties": false,
            "$defs": {"any": true},
            "anyOf": [true, {"type": "object"}]
        });
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        let cleaned = Value::Object((*standard(&schema)).clone());
        assert_eq!(
            cleaned,
            json!({
                "type": "object",
                "properties": {
                    "input": {},
                    "never": {"not": {}},
                    "list": {"type": "array", "items": {}}
                },
                "additionalProperties": false,
                "$defs": {"any": {}},
                "anyOf": [{}, {"type": "object"}]
            })
        );
    }

    #[test]
    fn the_policy_schema_names_every_field_the_engine_takes() {
        let full = PolicyOverrides {
            max_attempts: Some(1),
            retry_on: Some(vec![RetryOn::Failed, RetryOn::Blocked]),
            retry_backoff_ms: Some(1),
            attempt_timeout_secs: Some(1),
            queue_timeout_secs: Some(1),
            long_hold_warn_secs: Some(1),
            max_tokens: Some(1),
            max_cost_usd: Some(1.0),
        };
        let Value::Object(taken) = serde_json::to_value(&full).unwrap() else {
            panic!("an object")
        };
        let schema = schema_for_input::<PolicySchema>().unwrap();
        let properties = schema["properties"].as_object().unwrap();
        let mut named: Vec<_> = properties.keys().collect();
        let mut fields: Vec<_> = taken.keys().collect();
        named.sort();
        fields.sort();
        assert_eq!(named, fields);
        let retry_on = serde_json::to_string(&schema["$defs"]).unwrap();
        assert!(retry_on.contains("failed") && retry_on.contains("blocked"));
    }

    #[test]
    fn non_standard_formats_go_and_unsigned_ones_leave_a_minimum() {
        let schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "format": "uint32", "minimum": 1},
                "m": {"type": ["integer", "null"], "format": "uint64"},
                "x": {"type": "number", "format": "double"},
                "at": {"type": "string", "format": "date-time"},
                "format": {"type": "string"},
                "list": {"type": "array", "items": {"type": "integer", "format": "int64"}}
            }
        });
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        let cleaned = Value::Object(standard(&schema).as_ref().clone());
        let properties = &cleaned["properties"];
        assert_eq!(properties["n"], json!({"type": "integer", "minimum": 1}));
        assert_eq!(
            properties["m"],
            json!({"type": ["integer", "null"], "minimum": 0})
        );
        assert_eq!(properties["x"], json!({"type": "number"}));
        assert_eq!(properties["at"]["format"], "date-time");
        assert_eq!(properties["format"], json!({"type": "string"}));
        assert_eq!(properties["list"]["items"], json!({"type": "integer"}));
    }
}
