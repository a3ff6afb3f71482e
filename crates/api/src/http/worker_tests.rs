//! Unit tests of the worker routes' body parsing: submit values, output
//! events, and a property test that no body panics or escapes a 4xx.

use super::*;
use axum::http::header::CONTENT_TYPE;
use swarmd_engine::ErrorCode;

fn headers(content_type: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, content_type.parse().unwrap());
    h
}

#[test]
fn submit_keeps_json_only_when_declared_and_valid() {
    let json = headers("application/json; charset=utf-8");
    assert_eq!(
        submitted_value(&json, b"{\"a\":1}").unwrap(),
        serde_json::json!({"a": 1})
    );
    assert_eq!(
        submitted_value(&json, b"not json \n").unwrap(),
        Value::from("not json")
    );
    let text = headers("text/plain");
    assert_eq!(
        submitted_value(&text, b"{\"a\":1}\n\n").unwrap(),
        Value::from("{\"a\":1}")
    );
    assert_eq!(
        submitted_value(&HeaderMap::new(), b"  hi  ").unwrap(),
        Value::from("  hi")
    );
    assert_eq!(
        submitted_value(&text, &[0xff, 0xfe]).unwrap_err().code(),
        ErrorCode::BadRequest
    );
}

#[test]
fn output_bodies_single_or_ndjson() {
    let progress = r#"{"type":"progress","stage":"a"}"#;
    let one = parse_events(&HeaderMap::new(), progress.as_bytes()).unwrap();
    assert_eq!(one.len(), 1);
    let many = format!("{progress}\n\n{progress}\r\n");
    assert_eq!(
        parse_events(&HeaderMap::new(), many.as_bytes())
            .unwrap()
            .len(),
        2
    );
    let declared = headers("application/x-ndjson");
    assert_eq!(
        parse_events(&declared, progress.as_bytes()).unwrap().len(),
        1
    );
    let bad = format!("{progress}\n{{\"type\":\"nope\"}}\n");
    let error = parse_events(&HeaderMap::new(), bad.as_bytes()).unwrap_err();
    assert_eq!(error.code(), ErrorCode::BadRequest);
    assert!(error.message().contains("line 2"), "{}", error.message());
    assert!(parse_events(&HeaderMap::new(), b"\n\n").is_err());
}

fn bodies() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300),
        "\\PC{0,200}".prop_map(String::into_bytes),
        r#"[\[\]{}",:a-z_0-9\\ \n]{0,200}"#.prop_map(String::into_bytes),
        (0usize..300, 0usize..3).prop_map(|(depth, shape)| {
            let value = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            match shape {
                0 => format!(r#"{{"value":{value}}}"#),
                1 => format!(r#"{{"type":"partial","chunk":{{"kind":"inline","value":{value}}}}}"#),
                _ => value,
            }
            .into_bytes()
        }),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Worker bodies never panic; what they refuse is a 4xx, and what
    /// they accept is within the depth bound.
    #[test]
    fn worker_bodies_are_parsed_or_refused_with_a_4xx(body in bodies()) {
        let within = |value: &Value| swarmd_output_store::check_value_depth(value).is_ok();
        for headers in [HeaderMap::new(), headers("application/json")] {
            match parse_json::<ResultBody>(&body) {
                Ok(parsed) => proptest::prop_assert!(within(&parsed.value)),
                Err(e) => proptest::prop_assert!(e.status().is_client_error()),
            }
            match submitted_value(&headers, &body) {
                Ok(value) => proptest::prop_assert!(within(&value)),
                Err(e) => proptest::prop_assert!(e.status().is_client_error()),
            }
            match parse_events(&headers, &body) {
                Ok(events) => {
                    for event in events {
                        let text = serde_json::to_vec(&event).unwrap();
                        proptest::prop_assert!(
                            swarmd_output_store::check_text_depth(&text).is_ok()
                        );
                    }
                }
                Err(e) => proptest::prop_assert!(e.status().is_client_error()),
            }
        }
    }
}
