//! Resolve and link from configuration: eager validation, profiles, the
//! cache, and real agents through the engine.

use std::path::Path;

use serde_json::json;
use swarmd_engine::EngineConfig;
use swarmd_engine::audit::AuditAction;
use swarmd_engine::task::{PolicyOverrides, TaskStatus};
use swarmd_engine::testing::memory_engine;

use super::*;
use crate::lua::{LuaLimits, LuaPool};
use crate::operator::NoSessions;
use crate::process::{EnvVar, HostEnv, ProcessSpec};
use crate::testing::run_task;

fn no_operators() -> Arc<dyn SessionDirectory> {
    Arc::new(NoSessions)
}

fn keys(list: &[&str]) -> Vec<String> {
    list.iter().map(|k| (*k).to_owned()).collect()
}

fn agent(name: &str, kind: AgentKind, layers: &[&str]) -> AgentSpec {
    AgentSpec {
        name: name.to_owned(),
        kind,
        layers: keys(layers),
        concurrency: None,
        allow_subtasks: false,
        input_schema: None,
        worktree: None,
    }
}

fn process(dir: &Path, body: &str) -> AgentKind {
    let script = dir.join(format!("p{}.sh", body.len()));
    std::fs::write(&script, body).unwrap();
    let mut spec = ProcessSpec::new("sh");
    spec.args = vec![script.display().to_string()];
    spec.env = vec![EnvVar::Pass("PATH".into())];
    AgentKind::Process(spec)
}

fn lua_file(dir: &Path, name: &str, source: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, source).unwrap();
    path
}

fn settings(dir: &Path) -> SpawnerSettings {
    let mut settings = SpawnerSettings::new(
        "http://127.0.0.1:7700",
        HostEnv::from_pairs([("PATH", "/usr/bin:/bin")]),
    );
    settings.middleware = vec![LuaMiddlewareSpec {
        name: "stamp".into(),
        script: lua_file(
            dir,
            "stamp.lua",
            "function after(ctx, r) if r.ok then return { value = { stamped = r.value }, ok = true } end end",
        ),
    }];
    settings
}

fn pool() -> LuaPool {
    LuaPool::new(1, LuaLimits::default()).unwrap()
}

#[test]
fn every_misconfiguration_is_reported_at_startup_with_agent_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings(dir.path());
    settings.senior.agent = Some("ghost".into());
    settings.middleware.push(LuaMiddlewareSpec {
        name: "broken".into(),
        script: lua_file(dir.path(), "b.lua", "function before("),
    });
    let agents = vec![
        agent(
            "no-program",
            AgentKind::Process(ProcessSpec::new("/opt/missing/claude")),
            &[],
        ),
        agent(
            "no-script",
            AgentKind::Lua(LuaAgentSpec {
                script: dir.path().join("gone.lua"),
            }),
            &[],
        ),
        agent(
            "bad-lua",
            AgentKind::Lua(LuaAgentSpec {
                script: lua_file(dir.path(), "bad.lua", "return ("),
            }),
            &[],
        ),
        agent(
            "bad-layer",
            process(dir.path(), "echo 1"),
            &["main_ai", "warp_drive"],
        ),
        agent(
            "fine",
            process(dir.path(), "echo 2"),
            &["senior_escalation"],
        ),
    ];
    let errors =
        StackResolver::from_config(&settings, &agents, &pool(), no_operators()).unwrap_err();
    let text = errors.to_string();
    for expected in [
        "agent `no-program`: program `/opt/missing/claude` cannot be used",
        "agent `no-script`: cannot read script",
        "agent `bad-lua`: script `bad-lua`:",
        "agent `bad-layer`: unknown layer `warp_drive`",
        "senior.agent names `ghost`",
        "lua middleware `broken`",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in {text}");
    }
    assert!(!text.contains("`fine`"), "{text}");
}

#[test]
fn profiles_resolve_known_agents_and_delegated_unknown_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut worker = agent("worker", process(dir.path(), "echo 1"), &[]);
    worker.concurrency = Some(3);
    worker.allow_subtasks = true;
    let operator = agent(
        "reviewer",
        AgentKind::Operator(OperatorSpec {
            operator_role: Some("main-ai".into()),
            worker_binding: Some(json!({"subagent_type": "r"})),
            system_prompt: None,
        }),
        &["main_ai"],
    );
    let resolver = StackResolver::from_config(
        &settings(dir.path()),
        &[worker, operator],
        &pool(),
        no_operators(),
    )
    .unwrap();
    assert_eq!(resolver.agent_names(), ["reviewer", "worker"]);
    let profile = resolver.profile("worker", &[]).unwrap();
    assert_eq!(
        (profile.kind, profile.concurrency, profile.allow_subtasks),
        (SpawnerKind::Process, Some(3), true)
    );
    assert_eq!(
        resolver.profile("reviewer", &[]).unwrap().kind,
        SpawnerKind::Operator
    );
    assert!(
        matches!(resolver.profile("nobody", &[]), Err(SpawnError::UnknownAgent(a)) if a == "nobody")
    );
    let delegated = resolver
        .profile("Explore", &keys(&["operator_delegate"]))
        .unwrap();
    assert_eq!(
        (delegated.kind, delegated.allow_subtasks),
        (SpawnerKind::Operator, false)
    );
    assert!(
        resolver
            .link("Explore", &keys(&["operator_delegate"]))
            .is_ok()
    );
    assert!(matches!(
        resolver.profile("worker", &keys(&["lua:nope"])),
        Err(SpawnError::UnknownLayer { key, .. }) if key == "lua:nope"
    ));
}

#[test]
fn linked_stacks_are_cached_per_agent_and_layer_set() {
    let dir = tempfile::tempdir().unwrap();
    let resolver = StackResolver::from_config(
        &settings(dir.path()),
        &[agent("w", process(dir.path(), "echo 1"), &[])],
        &pool(),
        no_operators(),
    )
    .unwrap();
    let plain = resolver.link("w", &[]).unwrap();
    assert!(Arc::ptr_eq(&plain, &resolver.link("w", &[]).unwrap()));
    let hinted = resolver.link("w", &keys(&["main_ai"])).unwrap();
    assert!(!Arc::ptr_eq(&plain, &hinted));
    assert!(Arc::ptr_eq(
        &hinted,
        &resolver.link("w", &keys(&["main_ai"])).unwrap()
    ));
}

#[test]
fn the_standard_stack_puts_base_layers_outside_hints_in_named_order() {
    let dir = tempfile::tempdir().unwrap();
    let registry = standard_layers(&settings(dir.path()), &[], &pool(), &no_operators()).unwrap();
    let hints = registry
        .hint_keys(
            "a",
            &keys(&["lua:stamp", "main_ai"]),
            &keys(&["operator_delegate", "audit", "main_ai"]),
        )
        .unwrap();
    let stack = registry.stack("a", &hints).unwrap();
    assert_eq!(
        stack.keys(),
        [
            "audit",
            "long_hold",
            "lua:stamp",
            "main_ai",
            "operator_delegate"
        ]
    );
}

#[tokio::test]
async fn configured_agents_run_through_the_linked_stack() {
    let dir = tempfile::tempdir().unwrap();
    let agents = vec![
        agent(
            "shell",
            process(dir.path(), r#"read p; echo "{\"heard\": \"$p\"}""#),
            &["lua:stamp"],
        ),
        agent(
            "lua",
            AgentKind::Lua(LuaAgentSpec {
                script: lua_file(dir.path(), "a.lua", "return #prompt"),
            }),
            &[],
        ),
    ];
    let resolver =
        StackResolver::from_config(&settings(dir.path()), &agents, &pool(), no_operators())
            .unwrap();
    let engine = memory_engine(Arc::new(resolver), EngineConfig::default());

    let task = run_task(&engine, "shell", PolicyOverrides::default()).await;
    assert_eq!(task.status(), TaskStatus::Pass, "{task:?}");
    assert_eq!(
        task.result.unwrap().value,
        json!({"stamped": {"heard": "do it"}})
    );
    let mut records = engine.audit_records(Some(task.id), 10).await.unwrap();
    records.sort_by_key(|r| r.id);
    let actions: Vec<AuditAction> = records.iter().map(|r| r.action).collect();
    assert_eq!(actions, [AuditAction::Spawned, AuditAction::Completed]);

    let task = run_task(&engine, "lua", PolicyOverrides::default()).await;
    assert_eq!(task.result.unwrap().value, json!(5));
}

/// A session directory that counts how often it is asked.
#[derive(Debug, Default)]
struct CountingDirectory {
    inner: crate::testing::FakeDirectory,
    asked: std::sync::atomic::AtomicUsize,
}

impl CountingDirectory {
    fn asked(&self) -> usize {
        self.asked.swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    fn count(&self) {
        self.asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl SessionDirectory for CountingDirectory {
    fn session(&self, sid: &swarmd_engine::ids::SessionId) -> Option<crate::operator::LiveSession> {
        self.count();
        self.inner.session(sid)
    }

    fn by_role(&self, role: &str) -> Option<crate::operator::LiveSession> {
        self.count();
        self.inner.by_role(role)
    }

    fn least_loaded_main_ai(&self) -> Option<crate::operator::LiveSession> {
        self.count();
        self.inner.least_loaded_main_ai()
    }
}

#[test]
fn a_placement_looks_for_the_owner_and_an_operator_once_each() {
    use swarmd_engine::ids::SessionId;
    use swarmd_engine::store::SessionKind;

    let dir = tempfile::tempdir().unwrap();
    let directory = Arc::new(CountingDirectory::default());
    let operator = agent(
        "reviewer",
        AgentKind::Operator(OperatorSpec {
            operator_role: Some("main-ai".into()),
            worker_binding: None,
            system_prompt: None,
        }),
        &[],
    );
    let resolver = StackResolver::from_config(
        &settings(dir.path()),
        &[agent("w", process(dir.path(), "echo 1"), &[]), operator],
        &pool(),
        Arc::clone(&directory) as Arc<dyn SessionDirectory>,
    )
    .unwrap();
    let owner = SessionId::new();
    let delegate = keys(&["operator_delegate"]);
    let route = |agent, layers, session| Route {
        agent,
        layers,
        session,
        operator_sid: None,
    };

    // A delegating stack whose owner is not live: not delegated, no wait
    // (the agent is no operator agent), one look for the owner.
    let placed = resolver.place(route("Explore", &delegate, Some(owner)));
    assert!(placed.stack.is_ok());
    assert_eq!(placed.profile.unwrap().kind, SpawnerKind::Operator);
    assert!(!placed.delegated);
    assert_eq!(placed.unavailable, None);
    assert_eq!(directory.asked(), 1);

    // The operator agent with no holder of its role waits; one look.
    let placed = resolver.place(route("reviewer", &[], None));
    assert!(placed.unavailable.unwrap().contains("main-ai"));
    assert_eq!(directory.asked(), 1);

    // An operator agent's task that delegates, its owner not live: one
    // look for the owner, one for an operator (no second look for the
    // owner while deciding whether it waits).
    let placed = resolver.place(route("reviewer", &delegate, Some(owner)));
    assert!(!placed.delegated);
    assert!(placed.unavailable.is_some());
    assert_eq!(directory.asked(), 2);

    // The owner goes live with a channel: delegated, and one look.
    directory.inner.add(
        &["main-ai"],
        crate::operator::LiveSession {
            sid: owner,
            kind: SessionKind::MainAi,
            hooks: None,
            senior: None,
            spawn_channel: Some(Arc::new(crate::testing::FakeChannel::default())),
        },
    );
    let placed = resolver.place(route("Explore", &delegate, Some(owner)));
    assert!(placed.delegated);
    assert_eq!(placed.unavailable, None);
    assert_eq!(directory.asked(), 1);
    // A plain process agent never asks.
    let placed = resolver.place(route("w", &[], Some(owner)));
    assert_eq!(placed.profile.unwrap().kind, SpawnerKind::Process);
    assert!(!placed.delegated);
    assert_eq!(directory.asked(), 0);
    // An unknown agent is refused by both the stack and the profile.
    let placed = resolver.place(route("nobody", &[], None));
    assert!(matches!(placed.stack, Err(SpawnError::UnknownAgent(_))));
    assert!(matches!(placed.profile, Err(SpawnError::UnknownAgent(_))));
}
