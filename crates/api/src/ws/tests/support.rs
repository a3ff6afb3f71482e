//! Test support: the sessions crate's engine and registry
//! (`swarmd_sessions::testing`: agents `echo`, `slow` and `reviewer`), the
//! `AppState` around them, the operator routes served on `127.0.0.1:0` with
//! the event router running, and a tokio-tungstenite client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use swarmd_engine::Engine;
use swarmd_engine::auth::SessionSecret;
use swarmd_engine::clock::{Clock, SystemClock};
use swarmd_engine::ids::SessionId;
use swarmd_engine::testing::ScriptedSpawner;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::CancellationToken;

use crate::app::AdminTokenDigest;
use crate::app::{AppInner, AppState};
use crate::metrics::Metrics;
use swarmd_config::Config;
use swarmd_sessions::{EventRouter, SessionRegistry};

/// How long a test waits for a frame before failing.
const PATIENCE: Duration = Duration::from_secs(10);

/// An engine, a registry wired as its directory, and an `AppState`.
#[derive(Debug)]
pub(crate) struct Harness {
    pub engine: Engine,
    pub registry: Arc<SessionRegistry>,
    pub state: AppState,
    pub admin_token: String,
    /// The spawner of the `slow` agent: its workers hang until cancelled.
    pub slow: Arc<ScriptedSpawner>,
}

impl Harness {
    pub(crate) fn build(config: Config, clock: Arc<dyn Clock>, base_url: &str) -> Harness {
        let swarmd_sessions::testing::Harness {
            engine,
            registry,
            slow,
        } = swarmd_sessions::testing::Harness::build(
            crate::app::session_settings(&config),
            clock,
            base_url,
        );
        let admin = SessionSecret::generate();
        let metrics = Metrics::new();
        let guards = crate::http::guard::Guards::new(&config, metrics.guards());
        let state = AppState::new(AppInner {
            bound: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            engine: engine.clone(),
            sessions: registry.clone(),
            config: Arc::new(config),
            admin: AdminTokenDigest::of(&admin),
            base_url: base_url.to_owned(),
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
        Harness {
            engine,
            registry,
            state,
            admin_token: admin.expose().to_owned(),
            slow,
        }
    }
}

/// A logged-in session.
#[derive(Debug, Clone)]
pub(crate) struct Login {
    pub sid: SessionId,
    pub token: String,
}

/// The operator routes served on loopback, with the event router running.
#[derive(Debug)]
pub(crate) struct Server {
    pub harness: Harness,
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Server {
    pub(crate) async fn start() -> Server {
        Self::start_with(|_| {}).await
    }

    pub(crate) async fn start_with(configure: impl FnOnce(&mut Config)) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut config = Config::default();
        configure(&mut config);
        let harness = Harness::build(config, Arc::new(SystemClock), &format!("http://{addr}"));
        let stop = CancellationToken::new();
        let router = EventRouter::subscribe(&harness.engine, harness.registry.clone());
        let routing = router.start(stop.clone(), &harness.state.tasks);
        let app = crate::http::operators::routes()
            .merge(crate::ws::routes())
            .with_state(harness.state.clone());
        let serve = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(stop.clone().cancelled_owned());
        let serving = tokio::spawn(async move {
            let _ = serve.await;
        });
        Server {
            harness,
            addr,
            http: reqwest::Client::new(),
            stop,
            tasks: vec![routing, serving],
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.harness.engine
    }

    /// Logs in with the admin token.
    pub(crate) async fn login(&self, body: Value) -> Login {
        let response = self
            .http
            .post(self.url("/v1/operators"))
            .bearer_auth(&self.harness.admin_token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        let body: Value = response.json().await.unwrap();
        Login {
            sid: body["sid"].as_str().unwrap().parse().unwrap(),
            token: body["token"].as_str().unwrap().to_owned(),
        }
    }

    /// Opens the session's socket with its bearer token.
    pub(crate) async fn connect(&self, login: &Login) -> Client {
        self.dial(login.sid, Some(&login.token), None)
            .await
            .unwrap()
    }

    /// Opens `/v1/operators/{sid}/ws` with a bearer header and/or `?token=`.
    pub(crate) async fn dial(
        &self,
        sid: SessionId,
        bearer: Option<&str>,
        query: Option<&str>,
    ) -> Result<Client, tungstenite::Error> {
        let mut url = format!("ws://{}/v1/operators/{sid}/ws", self.addr);
        if let Some(token) = query {
            url.push_str(&format!("?token={token}"));
        }
        let mut request = url.into_client_request()?;
        if let Some(token) = bearer {
            request
                .headers_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        let (ws, _) = tokio_tungstenite::connect_async(request).await?;
        Ok(Client { ws })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A WebSocket client speaking JSON frames.
#[derive(Debug)]
pub(crate) struct Client {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Client {
    pub(crate) async fn send(&mut self, frame: Value) {
        self.send_text(&frame.to_string()).await;
    }

    pub(crate) async fn send_text(&mut self, text: &str) {
        self.ws.send(Message::text(text)).await.unwrap();
    }

    pub(crate) async fn send_message(&mut self, message: Message) {
        self.ws.send(message).await.unwrap();
    }

    /// The next JSON frame; fails on a close or a timeout.
    pub(crate) async fn recv(&mut self) -> Value {
        loop {
            let message = tokio::time::timeout(PATIENCE, self.ws.next())
                .await
                .expect("no frame in time")
                .expect("the socket ended")
                .expect("the socket failed");
            match message {
                Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
                Message::Ping(_) | Message::Pong(_) => {}
                other => panic!("expected a text frame, got {other:?}"),
            }
        }
    }

    /// The next frame of `kind`, skipping others (routed task events).
    pub(crate) async fn recv_type(&mut self, kind: &str) -> Value {
        loop {
            let frame = self.recv().await;
            if frame["type"] == kind {
                return frame;
            }
        }
    }

    /// Waits for the server's close frame.
    pub(crate) async fn closed(&mut self) -> Option<CloseFrame> {
        loop {
            let next = tokio::time::timeout(PATIENCE, self.ws.next())
                .await
                .expect("no close in time");
            match next {
                Some(Ok(Message::Close(frame))) => return frame,
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return None,
            }
        }
    }

    /// Closes the socket from the client side; says whether the server
    /// answered the close handshake.
    pub(crate) async fn close(mut self) -> bool {
        let _ = self.ws.close(None).await;
        let mut answered = false;
        while let Ok(Some(Ok(message))) = tokio::time::timeout(PATIENCE, self.ws.next()).await {
            answered |= matches!(message, Message::Close(_));
        }
        answered
    }
}

pub(crate) use swarmd_sessions::testing::eventually;
