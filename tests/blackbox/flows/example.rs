//! The README's flow walkthrough on the example configuration, through the
//! CLI: list, run, show the open wait, answer it, wait for the end.

use std::time::Duration;

use tokio::process::Command;

use crate::daemon::Swarmd;

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

/// `swarmd <args>` against `sw` through `SWARMD_URL`/`SWARMD_TOKEN`, as a
/// person would run it; its stdout.
async fn cli(sw: &Swarmd, args: &[&str]) -> String {
    let output = Command::new(BINARY)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("SWARMD_URL", &sw.base)
        .env("SWARMD_TOKEN", &sw.admin)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "swarmd {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn the_readme_walkthrough_runs_the_example_flow_to_its_end() {
    let sw = Swarmd::example().start().await;
    let listed = cli(&sw, &["flow", "list"]).await;
    assert!(listed.contains("draft-and-approve"), "{listed}");
    let started = cli(
        &sw,
        &[
            "flow",
            "run",
            "draft-and-approve",
            "--input",
            r#"{"topic": "tea"}"#,
        ],
    )
    .await;
    let run = started
        .split_whitespace()
        .find(|w| w.starts_with("R-"))
        .unwrap_or_else(|| panic!("no run id in {started}"))
        .to_owned();
    // A person copies the short id `flow runs` prints; the verbs take it.
    let runs = cli(&sw, &["flow", "runs"]).await;
    let short = runs
        .lines()
        .find(|line| line.contains(&run[run.len() - 8..]))
        .and_then(|line| line.split_whitespace().next())
        .unwrap_or_else(|| panic!("no row for {run}:\n{runs}"))
        .to_owned();
    assert!(
        short.starts_with('…') && run.ends_with(&short[3..]),
        "{runs}"
    );
    let mut shown = String::new();
    for _ in 0..100 {
        shown = cli(&sw, &["flow", "show", &short]).await;
        if shown.contains("swarmd flow answer") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(shown.contains("A LONG NOTE ABOUT TEA"), "{shown}");
    cli(
        &sw,
        &["flow", "answer", &short, "approve", r#"{"pick": 1}"#],
    )
    .await;
    let done = cli(&sw, &["flow", "show", &run, "--wait", "30", "-o", "json"]).await;
    let view: serde_json::Value = serde_json::from_str(&done).unwrap();
    assert_eq!(view["status"], "passed", "{view}");
    assert!(
        view["result"]
            .to_string()
            .contains("publishing: A LONG NOTE ABOUT TEA"),
        "{view}"
    );
}
