//! The content hash a run is pinned to: SHA-256 of the flow's canonical
//! JSON (object keys sorted, no whitespace), so the same flow written with
//! other spacing or key order has the same hash, and any change of meaning
//! gives another.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::ir::Flow;

/// `sha256:` and 64 hex digits.
pub fn content_hash(flow: &Flow) -> String {
    let value = serde_json::to_value(flow).unwrap_or(Value::Null);
    let mut canonical = String::new();
    write_canonical(&value, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOW: &str = r#"{"name": "f", "body": {"kind": "step", "ref": "coder",
        "in": {"op": "lit", "value": {"b": 1, "a": 2}}, "out": {"op": "path", "at": "$.r"}}}"#;

    #[test]
    fn spacing_and_key_order_do_not_change_the_hash_and_meaning_does() {
        let a = Flow::from_json(FLOW).unwrap();
        let reordered = FLOW.replace(r#"{"b": 1, "a": 2}"#, r#"{ "a":2,"b":1 }"#);
        let b = Flow::from_json(&reordered).unwrap();
        assert_eq!(content_hash(&a), content_hash(&b));
        let changed = Flow::from_json(&FLOW.replace("coder", "tester")).unwrap();
        assert_ne!(content_hash(&a), content_hash(&changed));
        let hash = content_hash(&a);
        assert!(hash.starts_with("sha256:") && hash.len() == 71, "{hash}");
    }
}
