//! The keyring and the admin token on PostgreSQL (docs/security.md,
//! Secrets on PostgreSQL): two daemons starting together on one empty
//! database end with one keyring and one admin token, kept in the database
//! and not in their state directories; the CLI reads and rotates them
//! there; a rotated key reaches a running node within a poll, and a node
//! that restarts; no secret reaches
//! the log at trace level or `check-config`'s output, and a database that
//! cannot be reached fails those commands naming it without its password.
//! `check-config` refuses a `store.url` or `cluster.advertise_url` that
//! `serve` could not use, and prints a warning line for each risky setting.

use serde_json::json;
use swarmd_postgres::PgDb;
use swarmd_postgres::testing::{TestDatabase, fresh_database};

use crate::daemon::Swarmd;
use crate::harness::parts;

const AGENTS: &str = r#"
[agents.echo]
kind = "process"
program = "/bin/cat"
"#;

/// The status `GET /v1/tasks` answers `bearer` with.
async fn tasks_status(sw: &Swarmd, bearer: &str) -> u16 {
    parts(sw.get("/v1/tasks?limit=1", bearer).send().await.unwrap())
        .await
        .0
}

/// Every form a key's bytes could take in a log: hex, base64 (standard
/// and URL-safe without padding, as in `keys.json`) and a byte list as
/// `Debug` prints one.
async fn key_secrets(database: &TestDatabase) -> Vec<String> {
    let db = PgDb::open(database.options()).await.unwrap();
    let forms = db
        .query_text(
            "SELECT encode(secret, 'hex') FROM signing_keys
             UNION ALL SELECT rtrim(encode(secret, 'base64'), '=') FROM signing_keys
             UNION ALL SELECT translate(rtrim(encode(secret, 'base64'), '='), '+/', '-_')
                       FROM signing_keys
             UNION ALL SELECT array_to_string(ARRAY(
                           SELECT get_byte(secret, i) FROM generate_series(0, 7) AS i), ', ')
                       FROM signing_keys",
        )
        .await;
    db.close().await;
    assert!(!forms.is_empty());
    forms
}

#[tokio::test]
async fn two_nodes_share_one_keyring_and_admin_token_in_the_database() {
    let database = fresh_database().await;
    let (a, b) = tokio::join!(
        Swarmd::on_database(AGENTS, &database).start(),
        Swarmd::on_database(AGENTS, &database).start(),
    );
    let (mut a, b) = (a, b);
    // One admin token, whichever node's configuration the CLI reads.
    assert_eq!(a.admin, b.admin);
    assert!(a.admin.starts_with("sws-"), "{}", a.admin);
    assert_eq!(tasks_status(&a, &b.admin).await, 200);
    assert_eq!(tasks_status(&b, &a.admin).await, 200);
    assert_eq!(tasks_status(&b, "sws-0000").await, 401);
    for node in [&a, &b] {
        let state = node.dir().join("state");
        assert!(!state.join("admin.token").exists());
        assert!(!state.join("keys.json").exists());
    }
    let db = PgDb::open(database.options()).await.unwrap();
    assert_eq!(
        db.query_i32("SELECT count(*)::int FROM signing_keys").await,
        [1]
    );
    assert_eq!(
        db.query_i32("SELECT count(*)::int FROM admin_token").await,
        [1]
    );

    // The CLI's default credential is the database's admin token too.
    let spawned = a
        .cli(&[
            "task", "spawn", "-o", "json", "--url", &b.base, "--agent", "echo", "--prompt", "hi",
            "--wait", "10",
        ])
        .await;
    let spawned: serde_json::Value = serde_json::from_str(&spawned).unwrap();
    assert_eq!(spawned["status"], "pass", "{spawned}");

    // A token minted from the database's keyring is good on both nodes.
    let before = a
        .cli(&["token", "mint", "--role", "observer", "--ttl", "600"])
        .await;
    assert_eq!(tasks_status(&a, &before).await, 200);
    assert_eq!(tasks_status(&b, &before).await, 200);

    // `keys rotate` rotates the database's keyring; the old key keeps
    // verifying.
    let kid = b.cli(&["keys", "rotate"]).await;
    let current: Vec<String> = db
        .query_text("SELECT kid FROM signing_keys WHERE current")
        .await;
    assert_eq!(current, [kid.as_str()]);
    let after = a
        .cli(&["token", "mint", "--role", "observer", "--ttl", "600"])
        .await;
    assert!(
        after.contains(&format!(".{kid}.")),
        "minted with {kid}: {after}"
    );
    // The running node B follows the database's keyring: the new key
    // verifies there within a poll, without a restart.
    let started = std::time::Instant::now();
    while tasks_status(&b, &after).await != 200 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "node B never took the rotated key up\n{}",
            b.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(tasks_status(&b, &before).await, 200);
    assert!(
        b.log()
            .contains("signing keyring changed in the database; reloaded")
    );
    // B mints its workers' credentials with the new key: its tasks still run.
    let spawned = a
        .cli(&[
            "task", "spawn", "-o", "json", "--url", &b.base, "--agent", "echo", "--prompt",
            "again", "--wait", "10",
        ])
        .await;
    let spawned: serde_json::Value = serde_json::from_str(&spawned).unwrap();
    assert_eq!(spawned["status"], "pass", "{spawned}");
    a.sigterm();
    assert!(a.exited().await.success(), "{}", a.log());
    a.restart().await;
    assert_eq!(tasks_status(&a, &after).await, 200, "{}", a.log());
    assert_eq!(tasks_status(&a, &before).await, 200);
    assert_eq!(tasks_status(&a, &b.admin).await, 200);
    db.close().await;
}

#[tokio::test]
async fn no_secret_reaches_the_log_at_trace_level_or_check_config() {
    let database = fresh_database().await;
    let mut sw = Swarmd::on_database(AGENTS, &database)
        .env("RUST_LOG", "trace")
        .start()
        .await;
    let (status, created) = sw
        .create(json!({"agent": "echo", "prompt": "hi", "wait_secs": 10}))
        .await;
    assert_eq!(
        (status, &created["status"]),
        (201, &json!("pass")),
        "{created}"
    );
    let observer = sw
        .cli(&["token", "mint", "--role", "observer", "--ttl", "600"])
        .await;
    assert_eq!(tasks_status(&sw, &observer).await, 200);
    let kid = sw.cli(&["keys", "rotate"]).await;
    sw.sigterm();
    assert!(sw.exited().await.success());
    sw.restart().await;
    assert_eq!(tasks_status(&sw, &sw.admin).await, 200);
    sw.sigterm();
    assert!(sw.exited().await.success());

    let log = sw.log();
    assert!(log.contains(" DEBUG "), "trace logging was on:\n{log}");
    assert!(log.contains(&kid), "the key id is logged: {log}");
    let mut secrets = key_secrets(&database).await;
    secrets.push(sw.admin.clone());
    secrets.push(sw.admin.trim_start_matches("sws-").to_owned());
    secrets.push(swarmd_postgres::testing::cluster().password);
    let checked = sw.cli(&["check-config"]).await;
    for (index, secret) in secrets.iter().enumerate() {
        if let Some(line) = log.lines().find(|line| line.contains(secret.as_str())) {
            let at = line.find(secret.as_str()).unwrap_or(0);
            panic!("secret {index} is in the log: {}", &line[..at.min(300)]);
        }
        assert!(
            !checked.contains(secret.as_str()),
            "a secret is in check-config"
        );
    }
}

#[tokio::test]
async fn an_unreachable_database_fails_the_secret_commands_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    // A loopback port nothing listens on, and a password in the URL.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("swarmd.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://swarmd:hunter2@127.0.0.1:{port}/x\"\n\
             state_dir = \"{}\"\n",
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    for args in [
        &["admin-token"][..],
        &["keys", "rotate"],
        &["token", "mint", "--role", "observer", "--ttl", "60"],
    ] {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_swarmd"))
            .args(args)
            .arg("--config")
            .arg(&config)
            .env_clear()
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
        assert!(
            stderr.contains(&format!("postgres://swarmd:<redacted>@127.0.0.1:{port}/x")),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("hunter2"), "{args:?}: {stderr}");
    }
}

/// `swarmd check-config` on `text`: its exit status, stdout and stderr.
async fn check_config(dir: &std::path::Path, text: &str) -> (Option<i32>, String, String) {
    let config = dir.join("swarmd.toml");
    std::fs::write(&config, text).unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args(["check-config", "--config"])
        .arg(&config)
        .env_clear()
        .output()
        .await
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn check_config_refuses_urls_serve_cannot_use_and_warns_of_risky_settings() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let password = dir.path().join("pg-password");
    std::fs::write(&password, "hunter2\n").unwrap();
    let text = |bind: &str, url: &str, cluster: &str| {
        format!(
            "[server]\nbind = \"{bind}\"\n[store]\nbackend = \"postgres\"\nurl = \"{url}\"\n\
             password_file = \"{}\"\nstate_dir = \"{}\"\n{cluster}",
            password.display(),
            state.display()
        )
    };
    let good_url = "postgres://swarmd@db.internal:5432/swarmd";
    for (url, cluster, key) in [
        ("http://127.0.0.1:54719/audit1", "", "store.url"),
        ("postgres://u:hunter2@[bad", "", "store.url"),
        (
            good_url,
            "[cluster]\nadvertise_url = \"http://node a:7841\"\n",
            "cluster.advertise_url",
        ),
    ] {
        let (status, stdout, stderr) =
            check_config(dir.path(), &text("127.0.0.1:7841", url, cluster)).await;
        assert_eq!(status, Some(78), "{url} {cluster}: {stderr}");
        assert!(stderr.contains(&format!("`{key}`")), "{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(!stderr.contains("hunter2"), "{stderr}");
    }

    // A wildcard bind with no advertised URL and a password file others may
    // read start: each is one warning line, the configuration still printed.
    std::fs::set_permissions(
        &password,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let (status, stdout, stderr) =
        check_config(dir.path(), &text("0.0.0.0:7841", good_url, "")).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stdout.contains("backend = \"postgres\""), "{stdout}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("swarmd: warning: "))
        .collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(warnings[0].contains("http://127.0.0.1:7841"), "{stderr}");
    assert!(warnings[1].contains("0644"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
