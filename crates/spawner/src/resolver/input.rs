//! An agent's `input_schema` (docs/tasks.md, Agents): a JSON Schema compiled
//! once when the configuration is read, against which every task's `input`
//! is checked when the task is created, whichever way it arrives.

use std::fmt;

use serde_json::Value;
use swarmd_engine::SpawnError;

/// Longest validation message kept: it may quote the offending value.
const MAX_REASON_CHARS: usize = 256;

/// A compiled `input_schema`.
pub struct InputSchema {
    validator: jsonschema::Validator,
}

impl fmt::Debug for InputSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InputSchema").finish_non_exhaustive()
    }
}

impl InputSchema {
    /// Compiles `schema`. References are resolved within the schema only:
    /// nothing is fetched over the network or read from files.
    pub fn compile(schema: &Value) -> Result<InputSchema, String> {
        if !schema.is_object() && !schema.is_boolean() {
            return Err("input_schema must be a JSON Schema object".to_owned());
        }
        jsonschema::validator_for(schema)
            .map(|validator| InputSchema { validator })
            .map_err(|error| format!("input_schema is not a valid JSON Schema: {error}"))
    }

    /// Checks a task's input; a task without one is checked as `null`. The
    /// error names the JSON pointer of the first failing value (`""` for the
    /// input itself).
    pub fn check(&self, agent: &str, input: Option<&Value>) -> Result<(), SpawnError> {
        let input = input.unwrap_or(&Value::Null);
        let Err(error) = self.validator.validate(input) else {
            return Ok(());
        };
        let mut reason = error.to_string();
        if let Some((cut, _)) = reason.char_indices().nth(MAX_REASON_CHARS) {
            reason.truncate(cut);
            reason.push('…');
        }
        Err(SpawnError::InvalidInput {
            agent: agent.to_owned(),
            pointer: error.instance_path().to_string(),
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> InputSchema {
        InputSchema::compile(&json!({
            "type": "object",
            "required": ["files"],
            "properties": {
                "files": {"type": "array", "items": {"type": "string"}, "maxItems": 3}
            }
        }))
        .unwrap()
    }

    fn refusal(input: Option<Value>) -> (String, String) {
        match schema().check("fixer", input.as_ref()) {
            Err(SpawnError::InvalidInput {
                pointer, reason, ..
            }) => (pointer, reason),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_matching_input_passes() {
        let input = json!({"files": ["a.rs", "b.rs"]});
        assert!(schema().check("fixer", Some(&input)).is_ok());
    }

    #[test]
    fn the_refusal_names_the_pointer_of_the_failing_value() {
        let (pointer, reason) = refusal(Some(json!({"files": ["a.rs", 7]})));
        assert_eq!(pointer, "/files/1");
        assert!(reason.contains("string"), "{reason}");
        let (pointer, reason) = refusal(Some(json!({"other": 1})));
        assert_eq!(pointer, "");
        assert!(reason.contains("files"), "{reason}");
    }

    #[test]
    fn a_missing_input_is_checked_as_null() {
        let (pointer, reason) = refusal(None);
        assert_eq!(pointer, "");
        assert!(reason.contains("object"), "{reason}");
    }

    #[test]
    fn a_long_reason_is_cut() {
        let input = json!({"files": ["x".repeat(5000), "y", "z", "w"]});
        let (_, reason) = refusal(Some(input));
        assert!(reason.chars().count() <= MAX_REASON_CHARS + 1, "{reason}");
    }

    #[test]
    fn a_schema_that_is_not_one_is_refused() {
        assert!(InputSchema::compile(&json!("string")).is_err());
        assert!(InputSchema::compile(&json!({"type": "no-such-type"})).is_err());
        let remote = json!({"$ref": "https://example.com/schema.json"});
        assert!(InputSchema::compile(&remote).is_err(), "nothing is fetched");
    }
}
