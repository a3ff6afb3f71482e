//! A new user's first run: `swarmd serve` with no `--config` or state flag
//! keeps its state and reads its configuration in the per-user XDG places,
//! says where the dashboard is, and a client started from another directory
//! finds the admin token there — or says which flag or variable to set.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");
const PATIENCE: Duration = Duration::from_secs(30);

/// The per-user configuration: one process agent that echoes its prompt.
const USER_CONFIG: &str = r#"
[agents.echo]
kind = "process"
program = "/bin/cat"
stdin = "prompt"
"#;

/// `swarmd args…` run from `cwd` with only `PATH` and `env` set.
fn swarmd(cwd: &Path, env: &[(&str, &Path)]) -> Command {
    let mut command = Command::new(BINARY);
    command
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Starts `swarmd serve --bind 127.0.0.1:0` and returns it with its stderr
/// up to and including the lines after `listening on`.
async fn serve(cwd: &Path, env: &[(&str, &Path)]) -> (Child, String, Vec<String>) {
    serve_with(cwd, env, &[]).await
}

/// [`serve`] with `more` flags after `serve`.
async fn serve_with(
    cwd: &Path,
    env: &[(&str, &Path)],
    more: &[&str],
) -> (Child, String, Vec<String>) {
    let mut child = swarmd(cwd, env)
        .args(["serve", "--bind", "127.0.0.1:0"])
        .args(more)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            seen.push(line);
            let last = seen.last().unwrap();
            if last.contains("swarmd admin-token") {
                return;
            }
        }
    };
    let ended = tokio::time::timeout(PATIENCE, read).await;
    assert!(ended.is_ok(), "no start lines:\n{}", seen.join("\n"));
    let addr = seen
        .iter()
        .find_map(|line| line.split("listening on http://").nth(1))
        .unwrap_or_else(|| panic!("no address:\n{}", seen.join("\n")))
        .trim()
        .to_owned();
    // Keep draining so the daemon never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, format!("http://{addr}"), seen)
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn serve_and_task_find_the_per_user_places_from_any_directory() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let (daemon_cwd, project) = (root.path().join("a"), root.path().join("project"));
    let config = home.join(".config/swarmd/swarmd.toml");
    for dir in [&daemon_cwd, &project, &config.parent().unwrap().to_owned()] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(&config, USER_CONFIG).unwrap();
    let xdg_state = root.path().join("xdg-state");
    let env = [
        ("HOME", home.as_path()),
        ("XDG_STATE_HOME", xdg_state.as_path()),
    ];

    let (mut daemon, base, start) = serve(&daemon_cwd, &env).await;
    let start = start.join("\n");
    assert!(start.contains(&format!("{base}/ui")), "{start}");
    // The per-user file is found by default: no --config to repeat.
    assert!(!start.contains("--config"), "{start}");
    let state = xdg_state.join("swarmd");
    assert!(state.join("admin.token").is_file(), "{start}");
    assert!(!daemon_cwd.join("swarmd-state").exists());
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&state).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700);

    // A client in the user's project: the URL from the environment, the
    // credential and the agent from the per-user places.
    let url = Path::new(&base);
    let mut client_env = env.to_vec();
    client_env.push(("SWARMD_URL", url));
    let spawn = swarmd(&project, &client_env)
        .args([
            "task", "spawn", "-o", "json", "--agent", "echo", "--prompt", "hello", "--wait", "20",
        ])
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = text(&spawn);
    assert!(spawn.status.success(), "{stderr}");
    assert!(stdout.contains("\"pass\""), "{stdout}");
    let token = swarmd(&project, &env)
        .arg("admin-token")
        .output()
        .await
        .unwrap();
    let on_disk = std::fs::read_to_string(state.join("admin.token")).unwrap();
    assert_eq!(text(&token).0.trim(), on_disk.trim());

    // Another user's home has no token: the error names the place it looked
    // and what to set.
    let stranger = root.path().join("stranger");
    let lost = swarmd(
        &project,
        &[("HOME", stranger.as_path()), ("SWARMD_URL", url)],
    )
    .args(["task", "get", "T-0123456789abcdef0123456789abcdef"])
    .output()
    .await
    .unwrap();
    let (_, stderr) = text(&lost);
    assert_eq!(lost.status.code(), Some(1), "{stderr}");
    let looked = stranger.join(".local/state/swarmd/admin.token");
    for needle in [
        looked.to_str().unwrap(),
        "--token",
        "SWARMD_TOKEN",
        "--config",
        "--state-dir",
    ] {
        assert!(stderr.contains(needle), "{needle} in {stderr}");
    }
    // The stdio MCP relay falls back to a loopback login, which the daemon
    // refuses by default: the same error.
    let mcp = swarmd(&project, &[("HOME", stranger.as_path())])
        .args(["mcp", "--url", &base])
        .output()
        .await
        .unwrap();
    let (_, stderr) = text(&mcp);
    assert_eq!(mcp.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(looked.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains("--token or set SWARMD_TOKEN"), "{stderr}");
    daemon.kill().await.unwrap();
}

#[tokio::test]
async fn a_second_daemon_on_the_same_state_directory_refuses_to_start() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let config = home.join(".config/swarmd/swarmd.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, USER_CONFIG).unwrap();
    let env = [("HOME", home.as_path())];
    let (mut first, base, _) = serve(root.path(), &env).await;
    let holder = first.id().unwrap();

    // The second one binds another port but the same state directory: it
    // ends, naming the first daemon, before it recovers anything.
    let second = swarmd(root.path(), &env)
        .args(["serve", "--bind", "127.0.0.1:0"])
        .output();
    let second = tokio::time::timeout(PATIENCE, second)
        .await
        .expect("the second daemon did not end")
        .unwrap();
    let (_, stderr) = text(&second);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    let state = home.join(".local/state/swarmd");
    for needle in [
        format!("state directory {} is in use", state.display()),
        format!("(pid {holder})"),
    ] {
        assert!(stderr.contains(&needle), "{needle} in {stderr}");
    }
    assert!(!stderr.contains("recovered"), "{stderr}");

    // The first daemon still serves.
    let mut client_env = env.to_vec();
    client_env.push(("SWARMD_URL", Path::new(&base)));
    let spawn = swarmd(root.path(), &client_env)
        .args([
            "task", "spawn", "-o", "json", "--agent", "echo", "--prompt", "still", "--wait", "20",
        ])
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = text(&spawn);
    assert!(spawn.status.success(), "{stderr}");
    assert!(stdout.contains("\"pass\""), "{stdout}");
    first.kill().await.unwrap();
}

#[tokio::test]
async fn the_start_hint_names_a_state_directory_a_client_would_not_find() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let config = home.join(".config/swarmd/swarmd.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, USER_CONFIG).unwrap();
    let env = [("HOME", home.as_path())];
    let elsewhere = root.path().join("elsewhere");
    let flag = elsewhere.to_str().unwrap();
    let (mut daemon, _, start) = serve_with(root.path(), &env, &["--state-dir", flag]).await;
    let hint = start
        .iter()
        .find_map(|line| line.split("sign in with the admin token: ").nth(1))
        .unwrap_or_else(|| panic!("{start:?}"))
        .to_owned();
    assert_eq!(hint, format!("swarmd admin-token --state-dir {flag}"));
    // The hinted command, run in the person's shell, prints this daemon's token.
    let args: Vec<&str> = hint.split(' ').skip(1).collect();
    let printed = swarmd(root.path(), &env)
        .args(&args)
        .output()
        .await
        .unwrap();
    let on_disk = std::fs::read_to_string(elsewhere.join("admin.token")).unwrap();
    assert_eq!(text(&printed).0.trim(), on_disk.trim());
    daemon.kill().await.unwrap();
}
