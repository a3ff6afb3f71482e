//! Tests of `run`: serving, readiness and stopping notifications, shutdown.

use std::sync::Arc;

use tokio::net::UnixDatagram;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::systemd::Notifier;
use swarmd_config::environment::Environment;

async fn datagram(socket: &UnixDatagram) -> String {
    let mut buffer = [0u8; 128];
    let length = socket.recv(&mut buffer).await.unwrap();
    String::from_utf8(buffer[..length].to_vec()).unwrap()
}

#[tokio::test]
async fn serves_healthz_notifies_and_stops_on_shutdown() {
    let tmp = tempfile::tempdir().unwrap();
    let notify_path = tmp.path().join("notify.sock");
    let notify_socket = UnixDatagram::bind(&notify_path).unwrap();
    let mut config = Config::default();
    config.store.state_dir = tmp.path().join("state");
    config.server.bind = "127.0.0.1:0".parse().unwrap();
    let state = PreparedState::prepare(&config, &Environment::default())
        .await
        .unwrap();
    let startup = Startup {
        config: Arc::new(config),
        state,
        systemd: Systemd {
            notifier: Notifier::to_path(&notify_path),
            watchdog: None,
        },
        env: Environment::default(),
    };

    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(run(startup, listener, shutdown.clone()));

    assert_eq!(datagram(&notify_socket).await, "READY=1\n");
    let body = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "ok");

    shutdown.cancel();
    assert_eq!(datagram(&notify_socket).await, "STOPPING=1\n");
    server.await.unwrap().unwrap();
    assert!(
        reqwest::get(format!("http://{addr}/healthz"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn bind_error_names_the_address() {
    let taken = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = taken.local_addr().unwrap();
    let error = bind(addr).await.unwrap_err();
    assert!(error.to_string().contains(&addr.to_string()), "{error}");
}

#[tokio::test]
async fn healthz_is_answered_in_process() {
    let router = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
    assert!(healthz(router).await);
    let broken = axum::Router::new().route(
        "/healthz",
        axum::routing::get(|| async { axum::http::StatusCode::SERVICE_UNAVAILABLE }),
    );
    assert!(!healthz(broken).await);
}
