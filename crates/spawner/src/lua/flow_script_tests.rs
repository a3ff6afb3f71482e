//! Flow scripts on real Lua: the helpers' IR, the table rule, the sandbox
//! and the limits.

use std::time::Duration;

use serde_json::{Value, json};

use super::*;

fn small() -> LuaLimits {
    LuaLimits {
        memory_limit_bytes: 4 * 1024 * 1024,
        instruction_limit: 1_000_000,
        timeout: Duration::from_secs(5),
    }
}

fn eval(source: &str) -> Result<Value, LuaError> {
    flow_ir("test.lua", source, &small())
}

fn refused(source: &str) -> String {
    match eval(source) {
        Ok(value) => panic!("accepted: {value}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_helpers_build_the_ir_of_a_flow() {
    let value = eval(
        r#"
        local tries = fanout{items = {1, 2}, bind = "$.n", out = "$.tries",
                             body = step("coder", "try {{ n }}", "$.change", {name = "try"})}
        return {
          name = "best-of-2",
          output = path("$.verdict"),
          body = seq{
            set("$.mode", "fast"),
            tries,
            branch(lit(true), step("judge", select("$.tries[*].value"), "$.verdict"),
                   set("$.verdict", nil)),
          },
        }
        "#,
    )
    .unwrap();
    let expected = json!({
        "name": "best-of-2",
        "output": {"op": "path", "at": "$.verdict"},
        "body": {"kind": "seq", "children": [
            {"kind": "let", "at": {"op": "path", "at": "$.mode"},
             "value": {"op": "lit", "value": "fast"}},
            {"kind": "fanout", "items": {"op": "lit", "value": [1, 2]},
             "bind": {"op": "path", "at": "$.n"}, "out": {"op": "path", "at": "$.tries"},
             "join": "all", "concurrency": 2,
             "body": {"kind": "step", "ref": "coder", "name": "try",
                      "in": {"op": "template", "text": "try {{ n }}"},
                      "out": {"op": "path", "at": "$.change"}}},
            {"kind": "branch", "cond": {"op": "lit", "value": true},
             "then": {"kind": "step", "ref": "judge",
                      "in": {"op": "select", "at": "$.tries[*].value"},
                      "out": {"op": "path", "at": "$.verdict"}},
             "else": {"kind": "let", "at": {"op": "path", "at": "$.verdict"},
                      "value": {"op": "lit", "value": null}}},
        ]},
    });
    assert_eq!(value, expected);
}

#[test]
fn tables_convert_by_keys_and_the_array_mark() {
    let value = eval(
        r#"
        return {
          empty = {}, marked = array(), marked_list = array{1, 2},
          decoded = json.decode("[]"), list = {"a", "b"}, null = json.null,
          nested = {x = {1.5, true}}, seq_empty = seq{},
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        value,
        json!({"empty": {}, "marked": [], "marked_list": [1, 2], "decoded": [],
               "list": ["a", "b"], "null": null, "nested": {"x": [1.5, true]},
               "seq_empty": {"kind": "seq", "children": []}})
    );
}

#[test]
fn a_table_that_is_not_json_is_named_by_its_place() {
    let mixed = refused(r#"return {body = seq{ {1, 2, kind = "x"} }}"#);
    assert!(
        mixed.contains("at /body/children/0: a table mixes list entries and named keys"),
        "{mixed}"
    );
    let hole = refused(r#"return {items = {1, nil, 3}}"#);
    assert!(
        hole.contains("at /items: a list with a hole at 2"),
        "{hole}"
    );
    let function = refused(r#"return {name = "f", body = {run = print or string.len}}"#);
    assert!(
        function.contains("at /body/run: a function is not JSON"),
        "{function}"
    );
    let marked = refused(r#"local t = array{1}; t.x = 2; return {a = t}"#);
    assert!(
        marked.contains("at /a: a table mixes list entries and named keys"),
        "{marked}"
    );
    let keyed = refused(r#"return {a = array{x = 1}}"#);
    assert!(
        keyed.contains("marked by array() has named keys"),
        "{keyed}"
    );
    let cycle = refused(r#"local t = {}; t.self = t; return t"#);
    assert!(cycle.contains("nest deeper than"), "{cycle}");
    let nan = refused(r#"return {x = 0/0}"#);
    assert!(
        nan.contains("at /x:") && nan.contains("not a JSON number"),
        "{nan}"
    );
}

#[test]
fn the_script_must_return_a_table() {
    let nothing = refused("local x = 1");
    assert!(nothing.contains("returned nothing"), "{nothing}");
    let text = refused(r#"return "flow""#);
    assert!(text.contains("returned a string"), "{text}");
}

#[test]
fn helpers_refuse_bad_arguments_at_the_caller() {
    let e = refused("local s = step(42, 'x', '$.y')\nreturn s");
    assert!(
        e.contains("test.lua:1:") && e.contains("step(agent) must be a string"),
        "{e}"
    );
    let e = refused("return {at = path(nil)}");
    assert!(e.contains("path(at) must be a string"), "{e}");
}

#[test]
fn the_sandbox_has_no_io_os_or_code_loading() {
    for escape in [
        "os.execute('touch /tmp/pwned')",
        "io.open('/etc/passwd')",
        "require('os')",
        "load('return 1')()",
        "dofile('/etc/passwd')",
        "debug.getinfo(1)",
    ] {
        let e = refused(&format!("{escape}\nreturn {{}}"));
        assert!(e.starts_with("lua error: test.lua:1:"), "{escape}: {e}");
        assert!(
            e.contains("a nil value"),
            "{escape} was not refused as absent: {e}"
        );
    }
}

#[test]
fn an_endless_loop_is_stopped_by_the_instruction_budget() {
    let e = eval("while true do end").unwrap_err();
    assert!(matches!(e, LuaError::InstructionLimit(1_000_000)), "{e:?}");
    // pcall cannot swallow the limit.
    let e = eval("pcall(function() while true do end end) return {}").unwrap_err();
    assert!(matches!(e, LuaError::InstructionLimit(_)), "{e:?}");
}

#[test]
fn a_script_that_grows_without_bound_hits_the_memory_limit() {
    let e = eval("local t = {} for i = 1, 1e7 do t[i] = string.rep('x', 64) .. i end").unwrap_err();
    assert!(matches!(e, LuaError::MemoryLimit { .. }), "{e:?}");
}

#[test]
fn a_syntax_error_names_the_file_and_line() {
    let e = refused("return {\n  name = \"x\"\n  body = 1 }");
    assert!(e.contains("test.lua:3:"), "{e}");
}

#[test]
fn the_default_limits_stop_an_endless_loop() {
    let e = flow_ir("loop.lua", "while true do end", &FLOW_SCRIPT_LIMITS).unwrap_err();
    assert!(matches!(e, LuaError::InstructionLimit(_)), "{e:?}");
}
