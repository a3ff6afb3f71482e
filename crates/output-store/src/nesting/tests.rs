//! Tests of the nesting bound: the checks, pruning and lenient decoding.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

fn nested_objects(depth: usize) -> String {
    format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
}

#[test]
fn the_bound_is_inclusive() {
    assert_eq!(check_text_depth(nested(64).as_bytes()), Ok(()));
    assert_eq!(
        check_text_depth(nested(65).as_bytes()),
        Err(DepthError { limit: 64 })
    );
    assert!(check_text_depth(nested_objects(64).as_bytes()).is_ok());
    assert!(check_text_depth(nested_objects(65).as_bytes()).is_err());
    let value: Value = serde_json::from_str(&nested(64)).unwrap();
    assert_eq!(check_value_depth(&value), Ok(()));
    let value: Value = serde_json::from_str(&nested(65)).unwrap();
    assert_eq!(check_value_depth(&value), Err(DepthError { limit: 64 }));
    assert_eq!(check_value_depth(&json!(1)), Ok(()));
}

#[test]
fn brackets_inside_strings_do_not_count() {
    let text = format!(r#"{{"a": "{}", "b": "\"[[[\\"}}"#, "[".repeat(500));
    assert!(check_text_depth(text.as_bytes()).is_ok());
    let value: Value = serde_json::from_str(&text).unwrap();
    assert!(check_value_depth(&value).is_ok());
}

#[test]
fn a_million_levels_are_measured_without_recursion() {
    let text = "[".repeat(1_000_000);
    assert!(check_text_depth(text.as_bytes()).is_err());
    assert_eq!(prune(&text, 2), format!("[[\"{PRUNED_PLACEHOLDER}\""));
}

#[test]
fn pruning_replaces_only_what_is_too_deep() {
    let text = r#"{"a":[1,[2,[3]]],"b":{"c":"]"},"d":[[4]]}"#;
    assert!(matches!(prune(text, 4), Cow::Borrowed(_)));
    let pruned = prune(text, 2);
    let value: Value = serde_json::from_str(&pruned).unwrap();
    assert_eq!(
        value,
        json!({"a": [1, PRUNED_PLACEHOLDER], "b": {"c": "]"}, "d": [PRUNED_PLACEHOLDER]})
    );
}

#[test]
fn a_row_too_deep_for_serde_decodes_pruned() {
    let deep = format!(r#"{{"ok":true,"value":{}}}"#, nested(200));
    assert!(serde_json::from_str::<Value>(&deep).is_err());
    let value: Value = decode_stored("outputs", &"t/1/1", &deep).unwrap();
    assert_eq!(value["ok"], json!(true));
    assert!(
        check_value_depth(&value).is_err(),
        "kept up to READABLE_DEPTH"
    );
    let mut cursor = &value["value"];
    let mut depth = 0;
    while let Value::Array(items) = cursor {
        cursor = &items[0];
        depth += 1;
    }
    assert_eq!(depth, READABLE_DEPTH - 1);
    assert_eq!(cursor, &json!(PRUNED_PLACEHOLDER));
}

#[test]
fn a_corrupt_row_still_fails_to_decode() {
    assert!(decode_stored::<Value>("tasks", &"x", "{not json").is_err());
    assert!(decode_stored::<Value>("tasks", &"x", &nested(300)[1..]).is_err());
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::from),
        "[\\[\\]{}\"\\\\]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(8, 64, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("\\PC{0,4}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// The depth of a value, recursively (test oracle; inputs are shallow).
fn depth_of(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth_of).max().unwrap_or(0),
        Value::Object(fields) => 1 + fields.values().map(depth_of).max().unwrap_or(0),
        _ => 0,
    }
}

/// Wraps `value` in `levels` arrays.
fn wrap(mut value: Value, levels: usize) -> Value {
    for _ in 0..levels {
        value = Value::Array(vec![value]);
    }
    value
}

/// The depth check one byte at a time, as the pruning scanner reads text
/// (test oracle for the check that skips through strings).
fn check_bytewise(text: &[u8]) -> Result<(), DepthError> {
    let limit = MAX_JSON_DEPTH;
    let mut scanner = Scanner::default();
    for &byte in text {
        if scanner.step(byte) == Some(Bracket::Open) && scanner.depth > limit {
            return Err(DepthError { limit });
        }
    }
    Ok(())
}

#[test]
fn brackets_in_strings_and_escapes_do_not_count() {
    let deep_in_a_string = format!(r#"["{}"]"#, "[".repeat(100));
    assert!(check_text_depth(deep_in_a_string.as_bytes()).is_ok());
    let escaped_quote = format!(r#"["a\"{}"]"#, "[".repeat(100));
    assert!(check_text_depth(escaped_quote.as_bytes()).is_ok());
    let closed_after_backslashes = format!(r#"["a\\\\"{}1{}]"#, nested(64), "");
    assert!(check_text_depth(closed_after_backslashes.as_bytes()).is_err());
    let unterminated = format!(r#"["{}"#, "[".repeat(100));
    assert!(check_text_depth(unterminated.as_bytes()).is_ok());
    let trailing_backslash = br#"["abc"#;
    assert!(check_text_depth(trailing_backslash).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_check_skipping_strings_agrees_with_the_bytewise_one(
        text in proptest::collection::vec(
            prop_oneof![
                Just(b'['), Just(b']'), Just(b'{'), Just(b'}'),
                Just(b'"'), Just(b'\\'), Just(b'a'),
            ],
            0..400,
        ),
        deep in 0usize..80,
    ) {
        let mut text = text;
        text.extend(std::iter::repeat_n(b'[', deep));
        prop_assert_eq!(check_text_depth(&text), check_bytewise(&text));
    }

    #[test]
    fn text_and_value_checks_agree_with_the_depth(value in arb_json(), extra in 0usize..80) {
        let value = wrap(value, extra);
        let text = serde_json::to_string(&value).unwrap();
        let expected = depth_of(&value) <= MAX_JSON_DEPTH;
        prop_assert_eq!(check_text_depth(text.as_bytes()).is_ok(), expected);
        prop_assert_eq!(check_value_depth(&value).is_ok(), expected);
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        prop_assert_eq!(check_text_depth(pretty.as_bytes()).is_ok(), expected);
    }

    #[test]
    fn pruned_text_stays_valid_and_bounded(value in arb_json(), max in 1usize..10) {
        let text = serde_json::to_string(&value).unwrap();
        let pruned: Value = serde_json::from_str(&prune(&text, max)).unwrap();
        prop_assert!(depth_of(&pruned) <= max);
        if depth_of(&value) <= max {
            prop_assert_eq!(pruned, value);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = check_text_depth(&bytes);
        let text = String::from_utf8_lossy(&bytes);
        let _ = prune(&text, 3);
        let _ = decode_stored::<Value>("t", &"r", &text);
    }
}
