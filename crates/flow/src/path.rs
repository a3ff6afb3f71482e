//! Write paths: where a node puts a value. Reads use full RFC 9535
//! JSONPath (`expr`); a write names one place, so it is the plain
//! `$.name(.name)*` form, each name `[A-Za-z_][A-Za-z0-9_-]*`.

use serde_json::{Map, Value};

/// A parsed write path: its names from the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritePath(Vec<String>);

/// Why a write path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{path}` is not a write path ($.name or $.name.name…): {why}")]
pub struct PathError {
    pub path: String,
    pub why: &'static str,
}

impl WritePath {
    /// Parses `$.a.b`.
    pub fn parse(path: &str) -> Result<WritePath, PathError> {
        let refuse = |why| PathError {
            path: path.to_owned(),
            why,
        };
        let rest = path
            .strip_prefix("$.")
            .ok_or_else(|| refuse("it must start with `$.`"))?;
        let names: Vec<String> = rest.split('.').map(str::to_owned).collect();
        for name in &names {
            let mut chars = name.chars();
            let first_ok = chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
            if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return Err(refuse(
                    "each name is a letter or `_`, then letters, digits, `_`, `-`",
                ));
            }
        }
        Ok(WritePath(names))
    }

    /// The first name: the variable the path writes.
    pub fn variable(&self) -> &str {
        &self.0[0]
    }

    /// Writes `value` into `root` at this path, making objects on the way
    /// (a non-object on the way is replaced).
    pub fn write(&self, root: &mut Value, value: Value) {
        let mut at = root;
        for name in &self.0 {
            if !at.is_object() {
                *at = Value::Object(Map::new());
            }
            let Value::Object(map) = at else {
                unreachable!("made an object above")
            };
            at = map.entry(name.clone()).or_insert(Value::Null);
        }
        *at = value;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn writes_make_their_way_and_replace_what_they_meet() {
        let mut root = json!({"a": 1});
        WritePath::parse("$.a.b")
            .unwrap()
            .write(&mut root, json!(2));
        WritePath::parse("$.c")
            .unwrap()
            .write(&mut root, json!("x"));
        assert_eq!(root, json!({"a": {"b": 2}, "c": "x"}));
    }

    #[test]
    fn only_plain_names_are_write_paths() {
        for bad in [
            "a", "$", "$.", "$.a..b", "$.a[0]", "$.1a", "$['a']", "$.a b",
        ] {
            assert!(WritePath::parse(bad).is_err(), "{bad}");
        }
        let ok = WritePath::parse("$.plan_2.best-pick").unwrap();
        assert_eq!(ok.variable(), "plan_2");
    }
}
