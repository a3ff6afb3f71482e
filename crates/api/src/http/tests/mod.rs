//! Router-level tests of the HTTP API: the full `router` over a memory engine
//! with scripted agents, served on `127.0.0.1:0` and driven with reqwest.
//!
//! Agents: `echo` finishes at once with `"echoed"`; `sub` waits for a result
//! posted over the worker API (like a SubAgent); `hang` runs until
//! cancelled; `flaky` fails its first attempt and then behaves like `sub`;
//! `parent` behaves like `sub` and its workers may spawn sub-tasks.

mod attacks;
mod bad_input;
mod ops;
mod output;
mod tasks;
mod worker;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{RequestBuilder, Response};
use serde_json::{Value, json};
use swarmd_engine::auth::SessionSecret;
use swarmd_engine::gate::Role;
use swarmd_engine::ids::TaskId;
use swarmd_engine::task::SpawnerKind;
use swarmd_engine::testing::{Script, ScriptedSpawner, StaticResolver, memory_engine};
use swarmd_engine::{Engine, EngineConfig, WorkerCredential};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::app::AdminTokenDigest;
use crate::app::{AppInner, AppState};
use crate::metrics::Metrics;
use swarmd_config::Config;
use swarmd_sessions::{LoginRequest, SessionRegistry};

/// How long a test waits for something that should happen promptly.
const PATIENCE: Duration = Duration::from_secs(10);

/// The router served on loopback.
#[derive(Debug)]
pub(super) struct Api {
    pub state: AppState,
    pub engine: Engine,
    pub admin: String,
    pub http: reqwest::Client,
    pub sub: Arc<ScriptedSpawner>,
    pub flaky: Arc<ScriptedSpawner>,
    addr: SocketAddr,
    server: JoinHandle<()>,
}

impl Drop for Api {
    fn drop(&mut self) {
        self.state.shutdown.cancel();
        self.server.abort();
    }
}

impl Api {
    pub(super) async fn start() -> Api {
        Self::start_with(|_| {}).await
    }

    pub(super) async fn start_with(configure: impl FnOnce(&mut Config)) -> Api {
        let mut config = Config::default();
        configure(&mut config);
        let echo = ScriptedSpawner::new(|_| Script::Final {
            value: json!("echoed"),
            ok: true,
        });
        let sub = ScriptedSpawner::new(|_| Script::AwaitPost);
        let hang = ScriptedSpawner::new(|_| Script::Hang);
        let flaky = ScriptedSpawner::new(|ctx| match ctx.id.n {
            1 => Script::Error("first attempt fails".into()),
            _ => Script::AwaitPost,
        });
        let resolver = StaticResolver::new()
            .with("echo", SpawnerKind::InProcess, None, echo)
            .with("sub", SpawnerKind::InProcess, None, sub.clone())
            .with("hang", SpawnerKind::InProcess, None, hang)
            .with("flaky", SpawnerKind::InProcess, None, flaky.clone())
            .with_profile(
                "parent",
                swarmd_engine::AgentProfile {
                    kind: SpawnerKind::InProcess,
                    concurrency: None,
                    allow_subtasks: true,
                    credential_leaves: false,
                },
                sub.clone(),
            );
        let engine = memory_engine(Arc::new(resolver), EngineConfig::default());
        let sessions = SessionRegistry::new(crate::app::session_settings(&config), engine.clock());
        let admin = SessionSecret::generate();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Metrics::new();
        let guards = crate::http::guard::Guards::new(&config, metrics.guards());
        let state = AppState::new(AppInner {
            bound: addr,
            engine: engine.clone(),
            sessions,
            config: Arc::new(config),
            admin: AdminTokenDigest::of(&admin),
            base_url: format!("http://{addr}"),
            started: Instant::now(),
            shutdown: CancellationToken::new(),
            tasks: tokio_util::task::TaskTracker::new(),
            metrics,
            guards,
            upstream_attempts: Default::default(),
            remote: Default::default(),
            runner: swarmd_flow_run::Runner::for_tests(engine.clone()),
            cluster: None,
            branches: Default::default(),
        });
        let app = crate::router(state.clone(), axum::Router::new())
            .into_make_service_with_connect_info::<SocketAddr>();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Api {
            state,
            engine,
            admin: admin.expose().to_owned(),
            http: reqwest::Client::new(),
            sub,
            flaky,
            addr,
            server,
        }
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(super) fn get(&self, path: &str, bearer: &str) -> RequestBuilder {
        self.http.get(self.url(path)).bearer_auth(bearer)
    }

    pub(super) fn post(&self, path: &str, bearer: &str) -> RequestBuilder {
        self.http.post(self.url(path)).bearer_auth(bearer)
    }

    /// Creates a task as the admin; panics unless the answer is 201.
    pub(super) async fn spawn(&self, agent: &str) -> TaskId {
        self.spawn_with(json!({ "agent": agent, "prompt": "do it" }))
            .await
    }

    pub(super) async fn spawn_with(&self, body: Value) -> TaskId {
        let response = self
            .post("/v1/tasks", &self.admin)
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, body) = parts(response).await;
        assert_eq!(status, 201, "{body}");
        body["task_id"].as_str().unwrap().parse().unwrap()
    }

    /// The worker credential of the task's latest attempt, once spawned.
    pub(super) async fn credential(
        &self,
        spawner: &ScriptedSpawner,
        task: TaskId,
    ) -> WorkerCredential {
        self.credential_for(spawner, task, 1).await
    }

    pub(super) async fn credential_for(
        &self,
        spawner: &ScriptedSpawner,
        task: TaskId,
        attempt: u32,
    ) -> WorkerCredential {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let found = spawner
                .spawned()
                .into_iter()
                .find(|(t, a, _)| *t == task && *a == attempt);
            if let Some((_, _, credential)) = found {
                return credential;
            }
            assert!(
                Instant::now() < deadline,
                "attempt {attempt} of {task} never spawned"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The task as `GET /v1/tasks/{id}/wait` returns it after it finished.
    pub(super) async fn finished(&self, task: TaskId) -> Value {
        let path = format!("/v1/tasks/{task}/wait?timeout_secs=10");
        let (status, body) = parts(self.get(&path, &self.admin).send().await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// An observer token, as `swarmd token mint --role observer` makes.
    pub(super) fn observer(&self) -> String {
        let minted = self
            .engine
            .tokens()
            .mint_role(Role::Observer, 600, None)
            .unwrap();
        minted.token.expose().to_owned()
    }

    /// A logged-in operator session's token and sid.
    pub(super) async fn session(&self) -> (String, String) {
        let login = self
            .state
            .sessions
            .login(&self.state.engine, LoginRequest::default())
            .await
            .unwrap();
        (login.token, login.sid.to_string())
    }

    pub(super) async fn metrics(&self) -> String {
        self.http
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// Status and JSON body (or `null` for a non-JSON body).
pub(super) async fn parts(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Asserts an error answer: status, our body, and its code.
pub(super) async fn expect_error(response: Response, status: u16, code: &str) -> Value {
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let (got, body) = parts(response).await;
    assert_eq!(got, status, "{body}");
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    assert_eq!(body["code"], code, "{body}");
    assert!(
        body["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{body}"
    );
    body
}
