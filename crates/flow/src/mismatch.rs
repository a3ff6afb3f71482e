//! How a value that does not match a JSON Schema is named: at most
//! [`MAX_MISMATCHES`] mismatches, each with the JSON pointer of its place,
//! as a run's input, a call's input and a wait's answer are refused.

use serde_json::Value;

/// The most mismatches one refusal names.
pub const MAX_MISMATCHES: usize = 10;

/// Why `value` does not match `validator`'s schema, each mismatch as
/// `<what> at <pointer>: <why>`, joined by `; `; `None` when it matches.
pub fn mismatches(validator: &jsonschema::Validator, value: &Value, what: &str) -> Option<String> {
    let errors: Vec<String> = validator
        .iter_errors(value)
        .take(MAX_MISMATCHES)
        .map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            format!("{what} at {at}: {e}")
        })
        .collect();
    (!errors.is_empty()).then(|| errors.join("; "))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_mismatch_is_named_by_its_pointer_up_to_the_bound() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert_eq!(mismatches(&validator, &json!({"a": "x"}), "input"), None);
        let why = mismatches(&validator, &json!({"a": 1}), "input").unwrap();
        assert!(why.starts_with("input at /a: "), "{why}");
        let root = mismatches(&validator, &json!(3), "answer").unwrap();
        assert!(root.starts_with("answer at /: "), "{root}");
        let many = json!({"type": "array", "items": {"type": "string"}});
        let validator = jsonschema::validator_for(&many).unwrap();
        let why = mismatches(&validator, &Value::from(vec![1; 20]), "input").unwrap();
        assert_eq!(why.matches("; ").count(), MAX_MISMATCHES - 1);
    }
}
