//! Each CLI's transcripts, recorded or written from its types, map to the
//! events docs/agents-cli.md promises; the reader routes a CLI's stdout
//! through its adapter.

use tokio::sync::mpsc;

use super::{describe, fixture, run};
use crate::process::StreamMode;
use crate::process::adapters::{CliFormat, bounded};
use crate::process::output::read_stdout;

#[test]
fn claude_run_maps_text_tools_usage_and_result() {
    let events = run(CliFormat::Claude, fixture!("claude-tool-run.jsonl"));
    // Running notes: each assistant message once, at its largest usage.
    let running = |input: u64, output: u64| {
        format!(
            r#"P usage | {{"cli":"claude","session_id":"5b0c2f9e-8f7a-4d0e-9a51-2d7c7c1b9e10","input_tokens":{input},"output_tokens":{output},"cache_read_tokens":0,"cache_write_tokens":0,"models":{{"claude-sonnet-4-5":{{"input_tokens":{input},"output_tokens":{output}}}}}}}"#
        )
    };
    let usage = r#"{"cli":"claude","session_id":"5b0c2f9e-8f7a-4d0e-9a51-2d7c7c1b9e10","turns":3,"input_tokens":3202,"output_tokens":144,"cache_read_tokens":1800,"cache_write_tokens":0,"cost_usd":0.0421,"duration_ms":18342,"models":{"claude-haiku-4-5":{"input_tokens":300,"output_tokens":20,"cost_usd":0.003},"claude-sonnet-4-5":{"input_tokens":2902,"output_tokens":124,"cost_usd":0.0391}}}"#;
    assert_eq!(
        events,
        vec![
            "P init | session 5b0c2f9e-8f7a-4d0e-9a51-2d7c7c1b9e10, model claude-sonnet-4-5, claude code 2.1.197".to_owned(),
            "T I'll run the tests first.".to_owned(),
            running(812, 9),
            "P Bash | cargo test -p demo".to_owned(),
            running(812, 41),
            "P tool_result | ok: test sum::adds ... FAILED\ntest result: FAILED. 1 passed; 1 failed".to_owned(),
            "P thinking | The loop stops one short of the end.".to_owned(),
            "P Edit | /srv/repo/src/lib.rs".to_owned(),
            running(1802, 101),
            "P tool_result | ok: The file /srv/repo/src/lib.rs has been updated.".to_owned(),
            format!(
                "P unknown:rate_limit_event | {}",
                bounded(fixture!("claude-tool-run.jsonl").lines().nth(6).unwrap(), 200)
            ),
            "T Fixed the off-by-one in `sum`; both tests pass.".to_owned(),
            running(2902, 115),
            format!("P usage | {usage}"),
            "F true \"Fixed the off-by-one in `sum`; both tests pass.\"".to_owned(),
        ]
    );
}

#[test]
fn claude_without_a_login_ends_with_a_failed_final() {
    // Recorded from the real CLI, run with no credentials and no network.
    let events = run(CliFormat::Claude, fixture!("claude-noauth.jsonl"));
    assert_eq!(events.len(), 5, "{events:#?}");
    assert!(
        events[0].starts_with("P init | session 7162484c-"),
        "{}",
        events[0]
    );
    assert_eq!(events[1], "P error | authentication_failed");
    assert_eq!(events[2], "T Not logged in · Please run /login");
    assert!(events[3].starts_with(r#"P usage | {"cli":"claude","session_id":"7162484c-a3ac-4cd0-8d5d-197afa3d0fa2","turns":1,"input_tokens":0,"#));
    assert_eq!(events[4], "F false \"Not logged in · Please run /login\"");
}

#[test]
fn claude_error_subtypes_fail_with_their_errors() {
    let events = run(CliFormat::Claude, fixture!("claude-max-turns.jsonl"));
    assert!(events[2].starts_with(r#"P usage | {"cli":"claude","session_id":"9e1d0a55-1111-4c3b-8a00-5f7e6d5c4b3a","input_tokens":700,"output_tokens":20,"#));
    assert_eq!(
        events[3],
        "P tool_result | error: make: *** No rule to make target 'check'.  Stop."
    );
    assert!(events[4].starts_with(r#"P usage | {"cli":"claude","session_id":"9e1d0a55-1111-4c3b-8a00-5f7e6d5c4b3a","turns":1,"input_tokens":700,"output_tokens":20,"#));
    assert_eq!(events[5], "F false \"Reached maximum number of turns (1)\"");
    assert_eq!(events.len(), 6);
}

#[test]
fn claude_structured_output_is_the_value_and_stream_events_are_counted() {
    let transcript = concat!(
        r#"{"type":"stream_event","event":{"type":"content_block_delta"},"session_id":"s","uuid":"u"}"#,
        "\n",
        r#"{"type":"stream_event","event":{"type":"message_stop"},"session_id":"s","uuid":"u"}"#,
        "\n",
        r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"num_turns":1,"result":"{\"n\":2}","session_id":"s","total_cost_usd":0,"usage":{"input_tokens":1,"output_tokens":1},"structured_output":{"n":2}}"#,
    );
    let events = run(CliFormat::Claude, transcript);
    assert_eq!(events[1], r#"F true {"n":2}"#);
    assert_eq!(
        events[2],
        "P stream_event | 2 stream_event lines were counted, not recorded: the assistant messages carry their text"
    );
}

#[test]
fn codex_run_maps_items_and_ends_on_the_turn() {
    let events = run(CliFormat::Codex, fixture!("codex-tool-run.jsonl"));
    let unknown = format!(
        "P unknown:turn.diff_updated | {}",
        bounded(
            fixture!("codex-tool-run.jsonl").lines().nth(10).unwrap(),
            200
        )
    );
    assert_eq!(
        events,
        vec![
            "P init | thread 0199a213-81c0-7800-8aa1-bbab2a035a53".to_owned(),
            "P turn | turn 1 started".to_owned(),
            "P reasoning | **Running the tests** to see what fails.".to_owned(),
            "P command_execution | in_progress: bash -lc 'cargo test -p demo'".to_owned(),
            "P command_execution | exit 101: bash -lc 'cargo test -p demo'".to_owned(),
            "P todo_list | 1/2 done".to_owned(),
            "P file_change | completed: update src/lib.rs".to_owned(),
            "P search | in_progress [docs] Range semantics".to_owned(),
            "P search | completed [docs] Range semantics".to_owned(),
            "P todo_list | 2/2 done".to_owned(),
            unknown,
            "T Fixed the range in `sum`; `cargo test -p demo` passes.".to_owned(),
            r#"P usage | {"cli":"codex","session_id":"0199a213-81c0-7800-8aa1-bbab2a035a53","turns":1,"input_tokens":24763,"output_tokens":122,"cache_read_tokens":24448,"cache_write_tokens":0,"reasoning_tokens":64}"#.to_owned(),
            "F true \"Fixed the range in `sum`; `cargo test -p demo` passes.\"".to_owned(),
        ]
    );
}

#[test]
fn codex_failed_turn_is_a_failed_final() {
    let events = run(CliFormat::Codex, fixture!("codex-failed.jsonl"));
    assert_eq!(
        events[2],
        "P error | Reconnecting... 1/5 (stream disconnected before completion)"
    );
    assert_eq!(
        events[3],
        r#"P usage | {"cli":"codex","session_id":"0199a214-0000-7000-8000-000000000001","turns":1}"#
    );
    assert_eq!(
        events[4],
        "F false \"stream disconnected before completion: error sending request\""
    );
    assert_eq!(events.len(), 5);
}

#[test]
fn codex_offline_keeps_every_error_and_writes_no_final() {
    // Recorded from the real CLI without a network, cut while it retried.
    let transcript = fixture!("codex-offline.jsonl");
    let events = run(CliFormat::Codex, transcript);
    assert_eq!(events.len(), transcript.lines().count());
    assert!(events.iter().all(|e| !e.starts_with("F ")));
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("P error | Reconnecting"))
            .count(),
        9
    );
    assert!(
        events[6].starts_with("P error | Falling back from WebSockets"),
        "{}",
        events[6]
    );
}

#[test]
fn gemini_run_answers_with_the_text_after_the_last_tool() {
    let events = run(CliFormat::Gemini, fixture!("gemini-tool-run.jsonl"));
    let thought = bounded(
        fixture!("gemini-tool-run.jsonl").lines().nth(5).unwrap(),
        200,
    );
    assert_eq!(
        events,
        vec![
            "P init | session 4f3c2b1a-0e9d-4c8b-a7f6-e5d4c3b2a190, model gemini-2.5-pro".to_owned(),
            "P user | Why does sum fail?".to_owned(),
            "T Let me read the file.".to_owned(),
            "P read_file | /srv/repo/src/lib.rs".to_owned(),
            "P tool_result | success: pub fn sum(v: &[i32]) -> i32 { ... }".to_owned(),
            format!("P unknown:thought | {thought}"),
            "T The range stops one short".to_owned(),
            "T  of the end.".to_owned(),
            "P error | warning: Loop detected, stopping execution".to_owned(),
            r#"P usage | {"cli":"gemini","session_id":"4f3c2b1a-0e9d-4c8b-a7f6-e5d4c3b2a190","input_tokens":5100,"output_tokens":110,"cache_read_tokens":2048,"total_tokens":5210,"duration_ms":2800,"tool_calls":1,"models":{"gemini-2.5-pro":{"input_tokens":5100,"output_tokens":110}}}"#.to_owned(),
            "F true \"The range stops one short of the end.\"".to_owned(),
        ]
    );
}

#[test]
fn gemini_error_result_fails_with_its_message() {
    let events = run(CliFormat::Gemini, fixture!("gemini-error.jsonl"));
    assert!(
        events[0].starts_with("P init | session d234fb58-"),
        "{}",
        events[0]
    );
    assert_eq!(events[1], "P user | say hi");
    assert!(
        events[2].starts_with(r#"P usage | {"cli":"gemini","session_id":"d234fb58-cfe0-40d7-a5dc-9e7e88f21acb","input_tokens":0,"#),
        "{}",
        events[2]
    );
    assert_eq!(
        events[3],
        "F false \"[API Error: fetch failed sending request]\""
    );
    assert_eq!(events.len(), 4);
}

#[tokio::test]
async fn the_reader_routes_a_cli_stream_through_its_adapter() {
    let (tx, mut rx) = mpsc::channel(64);
    let transcript = fixture!("claude-tool-run.jsonl");
    let summary = read_stdout(
        transcript.as_bytes(),
        StreamMode::Cli(CliFormat::Claude),
        1 << 20,
        &tx,
    )
    .await
    .unwrap();
    assert_eq!(
        (summary.finals, summary.last_final_ok, summary.invalid),
        (1, Some(true), 0)
    );
    let mut received = Vec::new();
    while let Ok(event) = rx.try_recv() {
        received.push(describe(&event));
    }
    assert_eq!(received, run(CliFormat::Claude, transcript));
}

#[test]
fn claude_sub_agent_text_is_a_note_not_the_answer() {
    let line = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Found 3 callers."},{"type":"tool_use","id":"t","name":"Grep","input":{"pattern":"sum("}}]},"parent_tool_use_id":"toolu_07","session_id":"s"}"#;
    assert_eq!(
        run(CliFormat::Claude, line),
        ["P subagent | Found 3 callers.", "P Grep | sum("]
    );
}
