//! Lines no transcript should hold: malformed, unknown, not JSON, too big,
//! arbitrary bytes; and the adapters' throughput, measured by hand.

use swarmd_output_store::OutputEvent;

use super::{describe, fixture};
use crate::process::adapters::{Adapter, CliFormat, LineKind};

#[test]
fn malformed_lines_of_known_types_are_notes_naming_the_problem() {
    let cases = [
        (
            CliFormat::Claude,
            r#"{"type":"result","subtype":"success","is_error":false}"#,
            "missing field `session_id`",
        ),
        (
            CliFormat::Claude,
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","input":{}}]},"session_id":"s"}"#,
            "missing field `name`",
        ),
        (
            CliFormat::Claude,
            r#"{"type":"system","subtype":"init","session_id":"s"}"#,
            "missing field `model`",
        ),
        (
            CliFormat::Codex,
            r#"{"type":"turn.completed"}"#,
            "missing field `usage`",
        ),
        (
            CliFormat::Codex,
            r#"{"type":"turn.completed","usage":{"input_tokens":"many","output_tokens":1}}"#,
            "invalid type: string \"many\"",
        ),
        (
            CliFormat::Codex,
            r#"{"type":"item.completed","item":{"type":"agent_message","text":"hi"}}"#,
            "missing field `id`",
        ),
        (
            CliFormat::Gemini,
            r#"{"type":"result"}"#,
            "missing field `status`",
        ),
        (
            CliFormat::Gemini,
            r#"{"type":"tool_use","tool_name":"x","parameters":{}}"#,
            "missing field `tool_id`",
        ),
    ];
    for (format, line, problem) in cases {
        let mut adapter = Adapter::new(format);
        let mut events = Vec::new();
        assert_eq!(
            adapter.line(line.as_bytes(), 7, &mut events),
            LineKind::Invalid,
            "{line}"
        );
        let [
            OutputEvent::Progress {
                stage,
                note: Some(note),
            },
        ] = &events[..]
        else {
            panic!("one note expected for {line}: {events:?}");
        };
        assert_eq!(stage, "invalid_output");
        assert!(note.starts_with("line 7: malformed `"), "{note}");
        assert!(note.contains(problem), "{note} should name {problem}");
    }
}

#[test]
fn unusable_lines_are_notes_and_unknown_types_are_kept() {
    for format in [CliFormat::Claude, CliFormat::Codex, CliFormat::Gemini] {
        let mut adapter = Adapter::new(format);
        let mut events = Vec::new();
        assert_eq!(adapter.line(b"  \r\n", 1, &mut events), LineKind::Blank);
        assert_eq!(
            adapter.line(b"Loading...", 2, &mut events),
            LineKind::Invalid
        );
        assert_eq!(adapter.line(b"[1,2]", 3, &mut events), LineKind::Invalid);
        assert_eq!(
            adapter.line(br#"{"type":7}"#, 4, &mut events),
            LineKind::Invalid
        );
        assert_eq!(
            adapter.line(br#"{"type":"brand_new","x":1}"#, 5, &mut events),
            LineKind::Read
        );
        let described: Vec<String> = events.iter().map(describe).collect();
        assert_eq!(described.len(), 4, "{described:?}");
        assert!(
            described[0].starts_with("P invalid_output | line 2: "),
            "{}",
            described[0]
        );
        assert_eq!(
            described[1],
            "P invalid_output | line 3: no string `type`: [1,2]"
        );
        assert_eq!(
            described[3],
            r#"P unknown:brand_new | {"type":"brand_new","x":1}"#
        );
    }
}

#[test]
fn what_a_child_controls_is_bounded() {
    let name = "T".repeat(10_000);
    let command = "x".repeat(100_000);
    let line = format!(
        r#"{{"type":"assistant","message":{{"content":[{{"type":"tool_use","id":"t","name":"{name}","input":{{"command":"{command}"}}}}]}},"session_id":"s"}}"#
    );
    let mut events = Vec::new();
    Adapter::new(CliFormat::Claude).line(line.as_bytes(), 1, &mut events);
    let [
        OutputEvent::Progress {
            stage,
            note: Some(note),
        },
    ] = &events[..]
    else {
        panic!("one note expected: {events:?}");
    };
    assert_eq!(stage.chars().count(), 65);
    assert_eq!(note.chars().count(), 201);
    let kind = "k".repeat(5_000);
    let mut events = Vec::new();
    Adapter::new(CliFormat::Gemini).line(
        format!(r#"{{"type":"{kind}"}}"#).as_bytes(),
        1,
        &mut events,
    );
    let [
        OutputEvent::Progress {
            stage,
            note: Some(note),
        },
    ] = &events[..]
    else {
        panic!("one note expected: {events:?}");
    };
    assert_eq!(stage.chars().count(), 65);
    assert!(note.chars().count() <= 201);
    let deep = format!(
        r#"{{"type":"result","x":{}1{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let mut events = Vec::new();
    assert_eq!(
        Adapter::new(CliFormat::Codex).line(deep.as_bytes(), 1, &mut events),
        LineKind::Invalid
    );
}

#[test]
fn arbitrary_lines_never_panic_and_always_leave_a_trace() {
    use proptest::prelude::*;
    let typed = prop_oneof![
        Just("result"),
        Just("assistant"),
        Just("user"),
        Just("system"),
        Just("stream_event"),
        Just("turn.completed"),
        Just("turn.failed"),
        Just("item.completed"),
        Just("thread.started"),
        Just("init"),
        Just("message"),
        Just("tool_use"),
        Just("tool_result"),
        Just("error"),
    ];
    let fields = r#"[\[\]{}",:a-z0-9_ ]{0,120}"#;
    let lines = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300),
        (typed, fields)
            .prop_map(|(kind, rest)| format!(r#"{{"type":"{kind}",{rest}"#).into_bytes()),
        "\\PC{0,200}".prop_map(String::into_bytes),
    ];
    let mut runner =
        proptest::test_runner::TestRunner::new(proptest::test_runner::Config::with_cases(512));
    runner
        .run(&lines, |line| {
            for format in [CliFormat::Claude, CliFormat::Codex, CliFormat::Gemini] {
                let mut events = Vec::new();
                let kind = Adapter::new(format).line(&line, 1, &mut events);
                prop_assert_eq!(kind == LineKind::Blank, events.is_empty());
                for event in &events {
                    if let OutputEvent::Progress { stage, .. } = event {
                        prop_assert!(stage.chars().count() <= 65);
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Adapter throughput on a large transcript (docs/benchmarks.md, Stream
/// adapters): `cargo test --release -p swarmd-spawner --lib
/// adapter_throughput -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check; run by hand"]
fn adapter_throughput() {
    for (format, transcript) in [
        (CliFormat::Claude, fixture!("claude-tool-run.jsonl")),
        (CliFormat::Codex, fixture!("codex-tool-run.jsonl")),
        (CliFormat::Gemini, fixture!("gemini-tool-run.jsonl")),
    ] {
        let lines: Vec<&str> = transcript.lines().collect();
        let rounds = 200_000 / lines.len();
        let bytes: usize = lines.iter().map(|l| l.len() + 1).sum::<usize>() * rounds;
        let mut events = Vec::with_capacity(64);
        let started = std::time::Instant::now();
        let mut adapter = Adapter::new(format);
        for _ in 0..rounds {
            for (n, line) in lines.iter().enumerate() {
                adapter.line(line.as_bytes(), n as u64, &mut events);
                events.clear();
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        let count = (rounds * lines.len()) as f64;
        println!(
            "{}: {:.0} lines/s, {:.1} MB/s ({} lines of {} B on average)",
            format.name(),
            count / elapsed,
            bytes as f64 / elapsed / 1e6,
            rounds * lines.len(),
            bytes / (rounds * lines.len())
        );
    }
}
