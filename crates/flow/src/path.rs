//! Write paths: where a node puts a value. Reads use full RFC 9535
//! JSONPath (`expr`); a write names one place, so it is the plain
//! `$.name(.name)*` form, each name `[A-Za-z_][A-Za-z0-9_-]*`.

use serde_json::{Map, Value};

/// The most names a write path may have.
pub const MAX_PATH_NAMES: usize = 32;

/// The deepest a run's variables may nest (containers, as the intake's
/// `MAX_JSON_DEPTH` of 64 counts them): a write that would nest deeper
/// fails the run. Room for a flow's input (at most 64 deep) one variable
/// down, and far inside what stored JSON can be read back at (128).
pub const MAX_CONTEXT_DEPTH: usize = 96;

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
        if names.len() > MAX_PATH_NAMES {
            return Err(refuse("it names more than 32 levels"));
        }
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

    /// How many names the path has: the levels it makes.
    pub fn depth(&self) -> usize {
        self.0.len()
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

/// Whether `value` nests containers deeper than `limit` (iteratively, so
/// a deep value cannot exhaust the stack while it is measured).
pub fn deeper_than(value: &Value, limit: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, depth)) = stack.pop() {
        let depth = depth + 1;
        match value {
            Value::Array(_) | Value::Object(_) if depth > limit => return true,
            Value::Array(items) => stack.extend(items.iter().map(|item| (item, depth))),
            Value::Object(fields) => stack.extend(fields.values().map(|field| (field, depth))),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_path_names_at_most_32_levels() {
        let names = |n: usize| format!("$.{}", vec!["a"; n].join("."));
        assert_eq!(WritePath::parse(&names(32)).unwrap().depth(), 32);
        let refused = WritePath::parse(&names(33)).unwrap_err();
        assert_eq!(refused.why, "it names more than 32 levels");
    }

    #[test]
    fn depth_counts_containers() {
        assert!(!deeper_than(&json!(1), 0));
        assert!(deeper_than(&json!([]), 0));
        assert!(!deeper_than(&json!({"a": [[1]]}), 3));
        assert!(deeper_than(&json!({"a": [[1]]}), 2));
    }

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
