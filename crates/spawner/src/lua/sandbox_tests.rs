//! Tests of the sandbox's guards against a hostile script: nesting through
//! the Rust callbacks and pattern matches that could backtrack for minutes.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::sandbox::{self, classify, new_state};
use super::*;

fn limits() -> LuaLimits {
    LuaLimits {
        memory_limit_bytes: 16 * 1024 * 1024,
        instruction_limit: 50_000_000,
        timeout: Duration::from_secs(20),
    }
}

/// Runs `source` in a fresh sandbox on the calling thread.
fn run(source: &str) -> Result<serde_json::Value, LuaError> {
    let limits = limits();
    let lua = new_state(&limits, CancellationToken::new())?;
    let value: mlua::Value = lua
        .load(source)
        .set_name("=test")
        .call(())
        .map_err(|e| classify(&e, &limits))?;
    super::convert::from_lua(&lua, value).map_err(|e| classify(&e, &limits))
}

fn runtime_error(r: Result<serde_json::Value, LuaError>) -> String {
    match r {
        Err(LuaError::Runtime(message)) => message,
        other => panic!("expected a script error, got {other:?}"),
    }
}

/// Recursion through the sandbox's `pcall` and `xpcall` ends the run with a
/// clear reason, whatever the script catches on its way (it aborted the
/// process on Lua's stack check before).
#[test]
fn recursion_through_pcall_or_xpcall_fails_the_run_cleanly() {
    let nested = format!("nest at most {} levels deep", sandbox::MAX_PCALL_NESTING);
    for source in [
        "local function f() return pcall(f) end return {f()}",
        "local function f() return xpcall(f, function(m) return m end) end return {f()}",
        "local function f() local ok, e = pcall(f) return e end return f()",
        "local function f(...) return pcall(f, 1, 2, 3, ...) end return {f()}",
    ] {
        let message = runtime_error(run(source));
        assert!(message.contains(&nested), "{source}: {message}");
    }
    // Nesting below the bound works and returns every level's results.
    let depth = sandbox::MAX_PCALL_NESTING - 5;
    let source = format!(
        "local function f(n) if n == 0 then return 'bottom' end return pcall(f, n - 1) end
         return select('#', f({depth}))"
    );
    assert_eq!(run(&source).unwrap(), serde_json::json!(depth + 1));
}

/// A protected call or a handler returning hundreds of values: the results
/// never pass through a C function that did not make room for them.
#[test]
fn protected_calls_return_many_values() {
    let source = r##"
        local t = {}
        for i = 1, 500 do t[i] = "v" .. i end
        local n1 = select("#", pcall(table.unpack, t))
        local r = { pcall(table.unpack, t) }
        local n2 = select("#", xpcall(error, function() return table.unpack(t) end, "x"))
        local n3 = select("#", xpcall(table.unpack, tostring, t))
        return { n1, r[501], n2, n3 }
    "##;
    assert_eq!(
        run(source).unwrap(),
        serde_json::json!([501, "v500", 501, 501])
    );
}

/// A script, a middleware hook or a flow script returning hundreds of
/// values: only the first is read.
#[tokio::test]
async fn a_script_returning_many_values_keeps_the_first() {
    let source = r#"
        local t = {}
        for i = 1, 500 do t[i] = "v" .. i end
        return table.unpack(t)
    "#;
    let script = LuaScript::from_source("many", source).unwrap();
    let pool = LuaPool::new(1, limits()).unwrap();
    let (tx, _rx) = tokio::sync::mpsc::channel(8);
    let run = AgentRun {
        task_id: "T-1".into(),
        attempt: 1,
        agent: "many".into(),
        prompt: String::new(),
        system: None,
        input: None,
    };
    let final_ = pool
        .run_agent(&script, run, tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(final_.value, serde_json::json!("v1"));

    let hooks = r#"
        local t = {}
        for i = 1, 500 do t[i] = "v" .. i end
        function before(ctx) return nil, table.unpack(t) end
        function after(ctx, result) return nil, table.unpack(t) end
    "#;
    let script = LuaScript::from_source("many", hooks).unwrap();
    let decision = pool
        .run_before(&script, serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(
        decision,
        BeforeDecision::Proceed {
            meta: serde_json::Map::new()
        }
    );
    let after = pool
        .run_after(&script, serde_json::json!({}), serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(after, None);

    let flow = r#"
        local t = {}
        for i = 1, 500 do t[i] = "v" .. i end
        return { name = "many" }, table.unpack(t)
    "#;
    let ir = flow_ir("many", flow, &FLOW_SCRIPT_LIMITS).unwrap();
    assert_eq!(ir, serde_json::json!({"name": "many"}));
}

/// `pcall` keeps its meaning: errors are caught with their value, a limit
/// is not, an error raised in Rust is its message.
#[test]
fn pcall_catches_script_errors_but_not_limits() {
    let source = r#"
        local a = { pcall(error, "boom") }
        local b = { pcall(error, { code = 7 }) }
        local c = { pcall(json.decode, "{") }
        local d = { pcall(nil) }
        local e = { xpcall(error, function(m) return "handled: " .. m end, "boom") }
        local f = { pcall(function(...) return ... end, 1, nil, 3) }
        return { a[1], a[2], b[2].code, type(c[2]), d[1], e[2], #f, f[4] }
    "#;
    let value = run(source).unwrap();
    assert_eq!(value[0], false);
    assert_eq!(value[1], "boom");
    assert_eq!(value[2], 7);
    assert_eq!(value[3], "string");
    assert_eq!(value[4], false);
    assert_eq!(value[5], "handled: boom");
    assert_eq!(value[7], 3);

    let tight = LuaLimits {
        memory_limit_bytes: 2 * 1024 * 1024,
        ..limits()
    };
    let lua = new_state(&tight, CancellationToken::new()).unwrap();
    let r: mlua::Result<mlua::Value> = lua
        .load(r#"return pcall(string.rep, "x", 100000000)"#)
        .call(());
    let e = r.unwrap_err();
    assert!(
        matches!(classify(&e, &tight), LuaError::MemoryLimit { .. }),
        "{e}"
    );
    let r: mlua::Result<mlua::Value> = lua
        .load(r#"local t = {} return pcall(function() while true do t[#t + 1] = {} end end)"#)
        .call(());
    let e = r.unwrap_err();
    assert!(
        matches!(classify(&e, &tight), LuaError::MemoryLimit { .. }),
        "{e}"
    );
}

/// The audit's patterns are refused with a clear message before they run;
/// everyday ones run as before, `string` methods included.
#[test]
fn costly_patterns_are_refused_before_they_run() {
    let trim = runtime_error(run(
        r#"local s = "a" .. (" "):rep(200000) .. "a" return string.find(s, "^%s*(.-)%s*$")"#,
    ));
    assert!(
        trim.contains("string.find: the pattern could backtrack for too long on 200002 bytes"),
        "{trim}"
    );
    let lazy = runtime_error(run(
        r#"return (("a"):rep(40000)):find(("a-"):rep(40) .. "b")"#,
    ));
    assert!(lazy.contains("40 backtracking items"), "{lazy}");
    for source in [
        r#"return (("a"):rep(100000)):match("a*a*b")"#,
        r#"for w in (("a"):rep(100000)):gmatch("a*a*b") do end"#,
        r#"return (("a"):rep(100000)):gsub("a-a-b", "")"#,
    ] {
        let message = runtime_error(run(source));
        assert!(message.contains("could backtrack"), "{source}: {message}");
    }
    // A script may catch the refusal.
    let caught = r#"return (pcall(string.match, ("a"):rep(100000), "a*a*b"))"#;
    assert_eq!(run(caught).unwrap(), serde_json::json!(false));

    let everyday = r#"
        local s = ("word "):rep(20000)
        local n = 0
        for w in s:gmatch("%a+") do n = n + 1 end
        local squeezed, k = s:gsub("%s+", "_")
        local text = "  " .. ("an answer\n"):rep(800) .. "\n  "
        return { n, k, ("  hi  "):match("^%s*(.-)%s*$"), s:find("word", 50001, true),
                 string.find("k=v", "(%w+)=(%w+)"), ("x"):rep(3):gsub("x", "y"),
                 string.match(12345, "%d%d", 2), #squeezed,
                 #text:match("^%s*(.-)%s*$") }
    "#;
    assert_eq!(
        run(everyday).unwrap(),
        serde_json::json!([20000, 20000, "hi", 50001, 1, "yyy", "23", 100000, 7999])
    );
}

#[test]
#[ignore = "a timing bench: cargo test --release -p swarmd-spawner --lib pattern_bench -- --ignored --nocapture"]
fn pattern_bench() {
    let lua = mlua::Lua::new();
    let cases: &[(&str, &str)] = &[
        (
            "k3 n=300",
            r#"return string.find(("a"):rep(300), "^a*a*a*b")"#,
        ),
        (
            "k3 n=600",
            r#"return string.find(("a"):rep(600), "^a*a*a*b")"#,
        ),
        (
            "k2 n=3000",
            r#"return string.find(("a"):rep(3000), "a*a*b")"#,
        ),
        (
            "k2 n=6000 anch",
            r#"return string.find(("a"):rep(6000), "^a*a*b")"#,
        ),
        (
            "k2 n=20000 anch",
            r#"return string.find(("a"):rep(20000), "^a*a*b")"#,
        ),
        (
            "k1 n=1e5 a*b",
            r#"return string.find(("a"):rep(100000), "a*b")"#,
        ),
        (
            "k1 n=1e6 m=100",
            r#"return string.match(("a"):rep(1000000), ("a"):rep(100).."b")"#,
        ),
        (
            "plain 2e5/1e5",
            r#"return string.find(("a"):rep(200000), ("a"):rep(100000).."b", 1, true)"#,
        ),
        (
            "trim n=11500",
            r#"return string.find("a"..(" "):rep(11500).."a", "^%s*(.-)%s*$")"#,
        ),
        (
            "trim n=20000",
            r#"return string.find("a"..(" "):rep(20000).."a", "^%s*(.-)%s*$")"#,
        ),
        (
            "gsub %s+ 1e7",
            r#"return select(2, string.gsub((" "):rep(10000000), "%s+", ""))"#,
        ),
        (
            "k8 n=24",
            r#"return string.find(("a"):rep(24), "^a*a*a*a*a*a*a*a*b")"#,
        ),
        (
            "k4 n=100",
            r#"return string.find(("a"):rep(100), "^a*a*a*a*b")"#,
        ),
        (
            "k4 n=200",
            r#"return string.find(("a"):rep(200), "^a*a*a*a*b")"#,
        ),
    ];
    for (name, src) in cases {
        let t = std::time::Instant::now();
        let _: mlua::MultiValue = lua.load(*src).call(()).unwrap();
        eprintln!("{name}: {:?}", t.elapsed());
    }
}
