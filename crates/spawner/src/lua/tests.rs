//! Real-Lua tests of the sandbox, the limits and both script kinds.

use std::time::Duration;

use serde_json::{Value, json};
use swarmd_output_store::{ContentRef, OutputEvent};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;

fn pool(limits: LuaLimits) -> LuaPool {
    LuaPool::new(2, limits).unwrap()
}

fn small() -> LuaLimits {
    LuaLimits {
        memory_limit_bytes: 4 * 1024 * 1024,
        instruction_limit: 2_000_000,
        timeout: Duration::from_secs(5),
    }
}

fn run() -> AgentRun {
    AgentRun {
        task_id: "T-1".into(),
        attempt: 3,
        agent: "lua-echo".into(),
        prompt: "say hi".into(),
        system: Some("be brief".into()),
        input: Some(json!({"n": 2, "tags": ["a", "b"], "none": null})),
    }
}

async fn agent(limits: LuaLimits, source: &str) -> (Result<LuaFinal, LuaError>, Vec<OutputEvent>) {
    let script = LuaScript::from_source("test-agent", source).unwrap();
    let (tx, mut rx) = mpsc::channel(64);
    let result = pool(limits)
        .run_agent(&script, run(), tx, CancellationToken::new())
        .await;
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    (result, events)
}

fn inline(value: Value) -> ContentRef {
    ContentRef::Inline { value }
}

#[tokio::test]
async fn an_agent_sees_the_task_and_emits_events() {
    let source = r#"
        emit_progress("start", "reading " .. agent)
        emit_partial({ n = input.n * 2 })
        emit_artifact("tags", input.tags)
        return { prompt = prompt, system = system, task = task_id, attempt = attempt,
                 null_kept = input.none == json.null }
    "#;
    let (result, events) = agent(small(), source).await;
    let final_ = result.unwrap();
    assert_eq!(
        final_,
        LuaFinal {
            value: json!({"prompt": "say hi", "system": "be brief", "task": "T-1",
                          "attempt": 3, "null_kept": true}),
            ok: true
        }
    );
    assert_eq!(
        events,
        vec![
            OutputEvent::Progress {
                stage: "start".into(),
                note: Some("reading lua-echo".into())
            },
            OutputEvent::Partial {
                chunk: inline(json!({"n": 4}))
            },
            OutputEvent::Artifact {
                name: "tags".into(),
                content: inline(json!(["a", "b"]))
            },
        ]
    );
}

#[tokio::test]
async fn value_ok_tables_are_unpacked_and_others_are_not() {
    let (r, _) = agent(small(), r#"return { value = "no", ok = false }"#).await;
    assert_eq!(
        r.unwrap(),
        LuaFinal {
            value: json!("no"),
            ok: false
        }
    );
    let (r, _) = agent(small(), r#"return { value = 1, extra = 2 }"#).await;
    assert_eq!(
        r.unwrap(),
        LuaFinal {
            value: json!({"value": 1, "extra": 2}),
            ok: true
        }
    );
    let (r, _) = agent(small(), "return 42").await;
    assert_eq!(
        r.unwrap(),
        LuaFinal {
            value: json!(42),
            ok: true
        }
    );
    let (r, _) = agent(small(), "local x = 1").await;
    assert_eq!(
        r.unwrap(),
        LuaFinal {
            value: Value::Null,
            ok: true
        }
    );
    let (r, _) = agent(small(), "return function() end").await;
    assert!(matches!(r, Err(LuaError::Value(_))), "{r:?}");
}

#[tokio::test]
async fn dangerous_globals_are_absent() {
    let source = r#"
        local names = { "io", "os", "require", "debug", "load", "loadfile", "dofile",
                        "print", "warn", "collectgarbage", "package", "coroutine" }
        local present = {}
        for _, name in ipairs(names) do
            if _G[name] ~= nil then present[#present + 1] = name end
        end
        if string.dump ~= nil then present[#present + 1] = "string.dump" end
        return { present = table.concat(present, ","), math = type(math.floor),
                 utf8 = type(utf8.char), json = type(json.encode) }
    "#;
    let (r, _) = agent(small(), source).await;
    assert_eq!(
        r.unwrap().value,
        json!({"present": "", "math": "function", "utf8": "function", "json": "function"})
    );
}

#[tokio::test]
async fn a_string_rep_bomb_hits_the_memory_limit() {
    let (r, _) = agent(small(), r#"local s = string.rep("x", 100000000) return #s"#).await;
    assert!(matches!(r, Err(LuaError::MemoryLimit { .. })), "{r:?}");
    let grow = "local t = {} local i = 0 while true do i = i + 1 t[i] = tostring(i) end";
    let (r, _) = agent(small(), grow).await;
    assert!(matches!(r, Err(LuaError::MemoryLimit { .. })), "{r:?}");
}

#[tokio::test]
async fn an_endless_loop_hits_the_instruction_budget_even_under_pcall() {
    let (r, _) = agent(small(), "while true do end").await;
    assert!(
        matches!(r, Err(LuaError::InstructionLimit(2_000_000))),
        "{r:?}"
    );
    let sneaky = "while true do pcall(function() while true do end end) end";
    let (r, _) = agent(small(), sneaky).await;
    assert!(matches!(r, Err(LuaError::InstructionLimit(_))), "{r:?}");
    let caught = r#"local ok, err = pcall(error, "boom") return { ok = ok, err = err }"#;
    let (r, _) = agent(small(), caught).await;
    assert_eq!(r.unwrap().value, json!({"ok": false, "err": "boom"}));
}

#[tokio::test]
async fn the_wall_clock_deadline_and_cancel_stop_a_run() {
    let slow = LuaLimits {
        instruction_limit: u64::MAX,
        timeout: Duration::from_millis(150),
        ..small()
    };
    let (r, _) = agent(slow, "while true do end").await;
    assert!(matches!(r, Err(LuaError::TimedOut(_))), "{r:?}");

    let script = LuaScript::from_source("spin", "while true do end").unwrap();
    let cancel = CancellationToken::new();
    let limits = LuaLimits {
        instruction_limit: u64::MAX,
        ..small()
    };
    let pool = pool(limits);
    let (tx, _rx) = mpsc::channel(1);
    let running = tokio::spawn({
        let (pool, script, cancel) = (pool.clone(), script.clone(), cancel.clone());
        async move { pool.run_agent(&script, run(), tx, cancel).await }
    });
    cancel.cancel();
    assert!(matches!(running.await.unwrap(), Err(LuaError::Cancelled)));
}

#[tokio::test]
async fn lua_errors_fail_the_run_with_their_message() {
    let (r, _) = agent(small(), r#"error("cannot do it")"#).await;
    let err = r.unwrap_err();
    assert!(
        matches!(&err, LuaError::Runtime(m) if m.contains("cannot do it")),
        "{err}"
    );
}

#[tokio::test]
async fn json_helper_round_trips() {
    let source = r#"
        local v = json.decode('{"a":[1,2,{"b":null}],"e":[]}')
        return { text = json.encode(v.a), empty = json.encode(v.e), b_null = v.a[3].b == json.null }
    "#;
    let (r, _) = agent(small(), source).await;
    assert_eq!(
        r.unwrap().value,
        json!({"text": "[1,2,{\"b\":null}]", "empty": "[]", "b_null": true})
    );
}

#[test]
fn bad_scripts_are_refused_at_load() {
    let err = LuaScript::from_source("broken", "return (").unwrap_err();
    assert!(
        matches!(&err, LuaError::Syntax { name, .. } if name == "broken"),
        "{err}"
    );
    let binary = "\x1bLua\x54\x00";
    assert!(matches!(
        LuaScript::from_source("bin", binary),
        Err(LuaError::Syntax { .. })
    ));
    let missing = LuaScript::from_file("gone", std::path::Path::new("/no/such.lua"));
    assert!(matches!(missing, Err(LuaError::Read { .. })));
}

#[tokio::test]
async fn middleware_before_rejects_or_adds_metadata() {
    let pool = pool(small());
    let script = LuaScript::from_source(
        "gate",
        r#"
        function before(ctx)
            if ctx.agent == "forbidden" then return { reject = "agent is not allowed" } end
            if ctx.agent == "explode" then error("gate broke") end
            return { meta = { checked_by = "gate", attempt = ctx.attempt } }
        end
        "#,
    )
    .unwrap();
    let decide = |agent: &str| json!({"agent": agent, "attempt": 1, "task_id": "T-1"});
    assert_eq!(
        pool.run_before(&script, decide("forbidden")).await.unwrap(),
        BeforeDecision::Reject("agent is not allowed".into())
    );
    let BeforeDecision::Reject(reason) = pool.run_before(&script, decide("explode")).await.unwrap()
    else {
        panic!("an error must reject");
    };
    assert!(reason.contains("gate broke"), "{reason}");
    let BeforeDecision::Proceed { meta } = pool.run_before(&script, decide("ok")).await.unwrap()
    else {
        panic!("must proceed");
    };
    assert_eq!(
        Value::Object(meta),
        json!({"checked_by": "gate", "attempt": 1})
    );
    // No `after`: the outcome stands.
    assert_eq!(
        pool.run_after(&script, decide("ok"), json!({}))
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn middleware_after_may_override() {
    let pool = pool(small());
    let script = LuaScript::from_source(
        "fixer",
        r#"
        function after(ctx, result)
            if not result.ok then return { value = { fixed = result.value }, ok = true } end
        end
        "#,
    )
    .unwrap();
    let found = pool.check_middleware(&script).unwrap();
    assert_eq!(
        found,
        MiddlewareHooks {
            before: false,
            after: true
        }
    );
    let over = pool
        .run_after(&script, json!({}), json!({"ok": false, "value": "bad"}))
        .await
        .unwrap();
    assert_eq!(
        over,
        Some(LuaFinal {
            value: json!({"fixed": "bad"}),
            ok: true
        })
    );
    let kept = pool
        .run_after(&script, json!({}), json!({"ok": true, "value": "good"}))
        .await
        .unwrap();
    assert_eq!(kept, None);
    let idle = LuaScript::from_source("idle", "local x = 1").unwrap();
    assert!(matches!(
        pool.check_middleware(&idle),
        Err(LuaError::NoHooks { .. })
    ));
}

#[tokio::test]
async fn a_deep_table_fails_the_run_with_a_clear_reason() {
    let limits = LuaLimits {
        memory_limit_bytes: 64 * 1024 * 1024,
        instruction_limit: 50_000_000,
        timeout: Duration::from_secs(20),
    };
    let deep = r#"
        local t = {}
        for _ = 1, 100000 do t = { t } end
        return t
    "#;
    let (result, _) = agent(limits, deep).await;
    let Err(LuaError::Value(message)) = result else {
        panic!("a 100 000-deep table must fail the run: {result:?}");
    };
    assert!(message.contains("64 levels"), "{message}");

    let at_the_bound = "local t = 1; for _ = 1, 64 do t = { t } end; return t";
    assert!(agent(small(), at_the_bound).await.0.is_ok());
    let past_it = "local t = 1; for _ = 1, 65 do t = { t } end; return { value = t }";
    assert!(matches!(
        agent(small(), past_it).await.0,
        Err(LuaError::Value(_))
    ));
}

#[tokio::test]
async fn self_referencing_tables_fail_the_run() {
    let sources = [
        "local t = {}; t.me = t; return t",
        "local a, b = {}, {}; a.b = b; b.a = a; return { value = a, ok = true }",
        "local t = {}; t[1] = t; emit_partial(t); return 1",
        "local t = {}; t.me = t; return json.encode(t)",
    ];
    for source in sources {
        let (result, _) = agent(small(), source).await;
        let Err(LuaError::Value(message) | LuaError::Runtime(message)) = result else {
            panic!("{source}: a cycle must fail the run: {result:?}");
        };
        assert!(message.contains("64 levels"), "{source}: {message}");
    }
}

#[tokio::test]
async fn a_wide_shared_table_is_bounded_too() {
    // 2^40 leaves once expanded, in a few hundred bytes of Lua.
    let source = r#"
        local t = { 1 }
        for _ = 1, 40 do t = { t, t } end
        return t
    "#;
    let (result, _) = agent(small(), source).await;
    let Err(LuaError::Value(message)) = result else {
        panic!("a table that expands past the element budget must fail: {result:?}");
    };
    assert!(message.contains("elements"), "{message}");
}

#[tokio::test]
async fn a_finalizer_is_refused_so_nothing_runs_outside_the_limits() {
    let spin = r#"setmetatable({}, {__gc = function() while true do end end}) return 1"#;
    let (r, _) = agent(small(), spin).await;
    let err = r.unwrap_err();
    assert!(
        matches!(&err, LuaError::Runtime(m) if m.contains("__gc")),
        "{err}"
    );
    // Other metatables still work, and `__gc` added later marks nothing.
    let fine = r#"
        local mt = {__index = function() return 7 end}
        local t = setmetatable({}, mt)
        mt.__gc = function() while true do end end
        return t.anything
    "#;
    let (r, _) = agent(small(), fine).await;
    assert_eq!(r.unwrap().value, json!(7));
}

#[tokio::test]
async fn a_value_repeating_one_big_string_is_refused_before_it_is_copied() {
    // 1 MiB held once by Lua, repeated 64 times in the value: past the
    // bytes a converted value may hold, though inside the memory limit.
    let repeated = r#"
        local s = string.rep("x", 1048576)
        local t = {}
        for i = 1, 64 do t[i] = s end
        return t
    "#;
    let (r, _) = agent(small(), repeated).await;
    let err = r.unwrap_err();
    assert!(err.to_string().contains("bytes of strings"), "{err}");
    let decode = r#"return json.decode("[" .. string.rep("0,", 5000000) .. "0]")"#;
    let big = LuaLimits {
        memory_limit_bytes: 64 << 20,
        ..small()
    };
    let (r, _) = agent(big, decode).await;
    let err = r.unwrap_err();
    assert!(
        matches!(&err, LuaError::Runtime(m) if m.contains("json.decode takes at most")),
        "{err}"
    );
}

#[tokio::test]
async fn emitted_events_keep_the_bounds_of_every_route() {
    let long = r#"emit_progress(string.rep("s", 300)) return 1"#;
    let (r, events) = agent(small(), long).await;
    assert!(r.is_err() && events.is_empty(), "{r:?}");
    let unnamed = r#"emit_artifact("", 1) return 1"#;
    let (r, events) = agent(small(), unnamed).await;
    assert!(r.is_err() && events.is_empty(), "{r:?}");
}

#[tokio::test]
async fn a_burst_waits_its_turn_instead_of_timing_out_in_the_queue() {
    // One thread, runs of 0.9 s, a 1 s timeout: the third run starts after
    // 1.8 s in the queue, which its own time does not count.
    let limits = LuaLimits {
        timeout: Duration::from_secs(1),
        ..small()
    };
    let pool = LuaPool::new(1, limits).unwrap();
    let run = || {
        let pool = pool.clone();
        async move {
            pool.execute(|| {
                std::thread::sleep(Duration::from_millis(900));
                Ok(())
            })
            .await
        }
    };
    let (a, b, c) = tokio::join!(run(), run(), run());
    assert!(a.is_ok() && b.is_ok() && c.is_ok(), "{a:?} {b:?} {c:?}");
    assert_eq!(pool.threads(), 1, "no thread was taken for stuck");
}
