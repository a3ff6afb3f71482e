//! Reading a child's pipes: stdout whole (plain mode) or line by line as
//! OutputEvents (NDJSON mode, or a CLI's lines through its adapter), all
//! under the output cap; stderr as a bounded tail.

use serde_json::Value;
use swarmd_output_store::{ContentRef, OutputEvent};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use super::adapters::{Adapter, LineKind};
use super::{ProcessError, STDERR_TAIL_BYTES, StreamMode};

const CHUNK: usize = 8192;
/// Characters of an invalid line kept in its progress note.
const PREVIEW_CHARS: usize = 200;
/// The progress stage that records a line that was not an OutputEvent.
pub(super) const INVALID_LINE_STAGE: &str = "invalid_output";
/// Invalid lines recorded one by one; past this, a child printing garbage
/// gets one summary note instead of a store flooded with notes.
const MAX_INVALID_NOTES: u64 = 100;

/// What stdout amounted to.
#[derive(Debug, Default)]
pub(super) struct StdoutSummary {
    /// The whole stdout in plain mode; empty in NDJSON mode.
    pub bytes: Vec<u8>,
    pub finals: usize,
    pub last_final_ok: Option<bool>,
    pub invalid: u64,
    /// Invalid lines past [`MAX_INVALID_NOTES`], counted but not recorded.
    pub unrecorded_invalid: u64,
}

/// Reads stdout to end of file. Fails with `OutputTooLarge` as soon as more
/// than `limit` bytes arrive (the lines before the cut are still forwarded),
/// and with `SinkClosed` when the receiver of events is gone.
pub(super) async fn read_stdout<R: AsyncRead + Unpin>(
    mut out: R,
    mode: StreamMode,
    limit: u64,
    events: &mpsc::Sender<OutputEvent>,
) -> Result<StdoutSummary, ProcessError> {
    let mut summary = StdoutSummary::default();
    let mut pending: Vec<u8> = Vec::new();
    // How much of `pending` is known to hold no newline.
    let mut scanned = 0;
    let mut total: u64 = 0;
    let mut line_no: u64 = 0;
    let mut chunk = vec![0u8; CHUNK];
    let mut adapter = match mode {
        StreamMode::Cli(format) => Some(Adapter::new(format)),
        StreamMode::None | StreamMode::Ndjson => None,
    };
    loop {
        let n = out.read(&mut chunk).await.map_err(ProcessError::Io)?;
        if n == 0 {
            break;
        }
        let room = usize::try_from(limit.saturating_sub(total)).unwrap_or(usize::MAX);
        let over = n > room;
        let kept = &chunk[..n.min(room)];
        total = total.saturating_add(kept.len() as u64);
        match mode {
            StreamMode::None => summary.bytes.extend_from_slice(kept),
            StreamMode::Ndjson | StreamMode::Cli(_) => {
                // Only the bytes after `scanned` are searched for a newline,
                // so a long line costs its length once, not once per chunk.
                pending.extend_from_slice(kept);
                let mut start = 0;
                while let Some(pos) = pending[scanned..].iter().position(|&b| b == b'\n') {
                    let end = scanned + pos;
                    line_no += 1;
                    let line = &pending[start..=end];
                    forward_line(line, line_no, adapter.as_mut(), events, &mut summary).await?;
                    start = end + 1;
                    scanned = start;
                }
                pending.drain(..start);
                scanned = pending.len();
            }
        }
        if over {
            return Err(ProcessError::OutputTooLarge { limit });
        }
    }
    if mode != StreamMode::None && !pending.is_empty() {
        forward_line(
            &pending,
            line_no + 1,
            adapter.as_mut(),
            events,
            &mut summary,
        )
        .await?;
    }
    if let Some(adapter) = adapter.as_mut() {
        let mut owed = Vec::new();
        adapter.finish(&mut owed);
        for event in owed {
            send(events, event).await?;
        }
    }
    if summary.unrecorded_invalid > 0 {
        let note = OutputEvent::Progress {
            stage: INVALID_LINE_STAGE.to_owned(),
            note: Some(format!(
                "{} more invalid lines were not recorded",
                summary.unrecorded_invalid
            )),
        };
        send(events, note).await?;
    }
    Ok(summary)
}

async fn forward_line(
    line: &[u8],
    line_no: u64,
    adapter: Option<&mut Adapter>,
    events: &mpsc::Sender<OutputEvent>,
    summary: &mut StdoutSummary,
) -> Result<(), ProcessError> {
    if let Some(adapter) = adapter {
        return forward_adapted(adapter, line, line_no, events, summary).await;
    }
    let event = match parse_line(line, line_no) {
        Parsed::Blank => return Ok(()),
        Parsed::Event(event) => event,
        Parsed::Invalid(note) => {
            summary.invalid += 1;
            if summary.invalid > MAX_INVALID_NOTES {
                summary.unrecorded_invalid += 1;
                return Ok(());
            }
            note
        }
    };
    note_final(&event, summary);
    send(events, event).await
}

/// A CLI's line through its adapter: the events it maps to, or its note. An
/// invalid line counts toward the same flood bound as in NDJSON mode.
async fn forward_adapted(
    adapter: &mut Adapter,
    line: &[u8],
    line_no: u64,
    events: &mpsc::Sender<OutputEvent>,
    summary: &mut StdoutSummary,
) -> Result<(), ProcessError> {
    let mut mapped = Vec::new();
    if adapter.line(line, line_no, &mut mapped) == LineKind::Invalid {
        summary.invalid += 1;
        if summary.invalid > MAX_INVALID_NOTES {
            summary.unrecorded_invalid += 1;
            return Ok(());
        }
    }
    for event in mapped {
        note_final(&event, summary);
        send(events, event).await?;
    }
    Ok(())
}

fn note_final(event: &OutputEvent, summary: &mut StdoutSummary) {
    if let OutputEvent::Final { ok, .. } = event {
        summary.finals += 1;
        summary.last_final_ok = Some(*ok);
    }
}

async fn send(events: &mpsc::Sender<OutputEvent>, event: OutputEvent) -> Result<(), ProcessError> {
    events
        .send(event)
        .await
        .map_err(|_| ProcessError::SinkClosed)
}

/// One NDJSON line, read.
#[derive(Debug, PartialEq)]
pub(super) enum Parsed {
    Blank,
    Event(OutputEvent),
    /// A progress note standing for a line that was not a usable event.
    Invalid(OutputEvent),
}

/// One NDJSON line as an event. Blank lines are skipped; a line that is not an
/// OutputEvent, nests deeper than `MAX_JSON_DEPTH`, points at a file, or has
/// a name or note past its bound (`OutputEvent::out_of_bounds`), becomes a
/// progress note quoting it.
pub(super) fn parse_line(line: &[u8], line_no: u64) -> Parsed {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return Parsed::Blank;
    }
    let parsed = swarmd_output_store::check_text_depth(trimmed)
        .map_err(|e| e.to_string())
        .and_then(|()| serde_json::from_slice::<OutputEvent>(trimmed).map_err(|e| e.to_string()));
    let problem = match parsed {
        Ok(event) if carries_file_ref(&event) => {
            "file references are not accepted from a child's stdout".to_owned()
        }
        Ok(event) => match event.out_of_bounds() {
            Some(problem) => problem,
            None => return Parsed::Event(event),
        },
        Err(problem) => problem,
    };
    let text = String::from_utf8_lossy(trimmed);
    let preview: String = text.chars().take(PREVIEW_CHARS).collect();
    Parsed::Invalid(OutputEvent::Progress {
        stage: INVALID_LINE_STAGE.to_owned(),
        note: Some(format!("line {line_no}: {problem}: {preview}")),
    })
}

/// Workers name files only through the output store's own spilling: a child
/// could otherwise point readers at any path on the host.
fn carries_file_ref(event: &OutputEvent) -> bool {
    let content = match event {
        OutputEvent::Progress { .. } => return false,
        OutputEvent::Partial { chunk } => chunk,
        OutputEvent::Artifact { content, .. } | OutputEvent::Final { content, .. } => content,
    };
    matches!(content, ContentRef::FileRef { .. })
}

/// Reads stderr to end of file, keeping its last [`STDERR_TAIL_BYTES`].
pub(super) async fn read_tail<R: AsyncRead + Unpin>(mut err: R) -> String {
    let mut tail: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    while let Ok(n) = err.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&chunk[..n]);
        if tail.len() > 2 * STDERR_TAIL_BYTES {
            tail.drain(..tail.len() - STDERR_TAIL_BYTES);
        }
    }
    let start = tail.len().saturating_sub(STDERR_TAIL_BYTES);
    String::from_utf8_lossy(&tail[start..]).into_owned()
}

/// The plain-mode value: stdout as JSON when it parses within
/// `MAX_JSON_DEPTH`, else
/// `{"raw": <stdout, trailing whitespace trimmed>, "stderr": <tail>}`.
pub(super) fn plain_value(stdout: &[u8], stderr_tail: &str) -> Value {
    let shallow = swarmd_output_store::check_text_depth(stdout).is_ok();
    if shallow && let Ok(value) = serde_json::from_slice::<Value>(stdout) {
        return value;
    }
    let raw = String::from_utf8_lossy(stdout);
    serde_json::json!({ "raw": raw.trim_end(), "stderr": stderr_tail })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_line_past_a_bound_becomes_a_note_quoting_it() {
        let line = json!({"type": "progress", "stage": "s".repeat(300)}).to_string();
        let Parsed::Invalid(OutputEvent::Progress { note, .. }) = parse_line(line.as_bytes(), 3)
        else {
            panic!("a 300-byte stage must not pass as an event");
        };
        let note = note.unwrap();
        assert!(
            note.contains("line 3: a progress stage is at most 256 bytes"),
            "{note}"
        );
    }

    #[test]
    fn lines_become_events_or_progress_notes() {
        let ok = br#"{"type":"progress","stage":"s"}"#;
        let stage = |stage: &str| OutputEvent::Progress {
            stage: stage.into(),
            note: None,
        };
        assert_eq!(parse_line(ok, 1), Parsed::Event(stage("s")));
        assert_eq!(parse_line(b"  \r\n", 2), Parsed::Blank);
        let Parsed::Invalid(OutputEvent::Progress { stage, note }) = parse_line(b"hello\n", 3)
        else {
            panic!("garbage must become a note");
        };
        assert_eq!(stage, INVALID_LINE_STAGE);
        assert!(note.unwrap().starts_with("line 3: "));
        let file = br#"{"type":"final","ok":true,"content":{"kind":"file_ref","path":"/etc/shadow","size":1,"sha256":"00"}}"#;
        let Parsed::Invalid(OutputEvent::Progress { note, .. }) = parse_line(file, 4) else {
            panic!("a file reference must not pass");
        };
        assert!(note.unwrap().contains("file references"));
    }

    /// An NDJSON `final` line whose value nests `depth` arrays.
    fn deep_final(depth: usize) -> Vec<u8> {
        let value = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        format!(r#"{{"type":"final","ok":true,"content":{{"kind":"inline","value":{value}}}}}"#)
            .into_bytes()
    }

    #[test]
    fn lines_nested_past_the_bound_become_notes() {
        assert!(matches!(parse_line(&deep_final(60), 1), Parsed::Event(_)));
        for depth in [126, 200, 100_000] {
            let Parsed::Invalid(OutputEvent::Progress { note, .. }) =
                parse_line(&deep_final(depth), 7)
            else {
                panic!("a {depth}-deep line must not pass");
            };
            let note = note.unwrap();
            assert!(note.starts_with("line 7: "), "{note}");
            assert!(note.contains("64 levels"), "{note}");
        }
        let deep = format!("{}1{}", "[".repeat(126), "]".repeat(126));
        assert_eq!(
            plain_value(deep.as_bytes(), ""),
            json!({"raw": deep, "stderr": ""})
        );
    }

    #[test]
    fn arbitrary_lines_never_panic() {
        use proptest::prelude::*;
        let lines = prop_oneof![
            prop::collection::vec(any::<u8>(), 0..300),
            "\\PC{0,200}".prop_map(String::into_bytes),
            (0usize..300).prop_map(deep_final),
            r#"[\[\]{}",:a-z0-9\\ ]{0,200}"#.prop_map(String::into_bytes),
        ];
        let mut runner =
            proptest::test_runner::TestRunner::new(proptest::test_runner::Config::with_cases(256));
        runner
            .run(&lines, |line| {
                match parse_line(&line, 1) {
                    Parsed::Event(event) => {
                        let text = serde_json::to_string(&event).unwrap();
                        prop_assert!(
                            swarmd_output_store::check_text_depth(text.as_bytes()).is_ok()
                        );
                        prop_assert!(!carries_file_ref(&event));
                    }
                    Parsed::Invalid(OutputEvent::Progress { stage, .. }) => {
                        prop_assert_eq!(stage, INVALID_LINE_STAGE);
                    }
                    Parsed::Invalid(other) => prop_assert!(false, "not a note: {other:?}"),
                    Parsed::Blank => prop_assert!(line.trim_ascii().is_empty()),
                }
                let _ = plain_value(&line, "tail");
                Ok(())
            })
            .unwrap();
    }

    #[tokio::test]
    async fn a_garbage_flood_is_summarized_after_the_first_notes() {
        let (tx, mut rx) = mpsc::channel(1024);
        let input = "junk\n".repeat(250);
        let summary = read_stdout(input.as_bytes(), StreamMode::Ndjson, 1 << 20, &tx)
            .await
            .unwrap();
        assert_eq!((summary.invalid, summary.unrecorded_invalid), (250, 150));
        let mut notes = Vec::new();
        while let Ok(event) = rx.try_recv() {
            notes.push(event);
        }
        assert_eq!(notes.len(), 101);
        assert!(
            matches!(notes.last(), Some(OutputEvent::Progress { note: Some(n), .. })
            if n == "150 more invalid lines were not recorded")
        );
    }

    #[test]
    fn plain_value_is_json_or_raw_with_stderr() {
        assert_eq!(plain_value(b" {\"a\": 1}\n", ""), json!({"a": 1}));
        assert_eq!(
            plain_value(b"hello world \n\n", "warn"),
            json!({"raw": "hello world", "stderr": "warn"})
        );
    }

    #[tokio::test]
    async fn stderr_tail_keeps_the_end() {
        let mut data = vec![b'a'; 3 * STDERR_TAIL_BYTES];
        data.extend_from_slice(b"END");
        let tail = read_tail(&data[..]).await;
        assert_eq!(tail.len(), STDERR_TAIL_BYTES);
        assert!(tail.ends_with("aEND"));
    }

    #[tokio::test]
    async fn the_cap_cuts_but_forwards_lines_before_it() {
        let (tx, mut rx) = mpsc::channel(16);
        let input =
            b"{\"type\":\"progress\",\"stage\":\"a\"}\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
        let err = read_stdout(&input[..], StreamMode::Ndjson, 40, &tx)
            .await
            .unwrap_err();
        assert!(matches!(err, ProcessError::OutputTooLarge { limit: 40 }));
        assert!(matches!(rx.try_recv(), Ok(OutputEvent::Progress { .. })));
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn lines_are_cut_right_whatever_chunks_they_arrive_in() {
        // A line of several chunks, then lines that end inside a chunk and
        // one that ends exactly at a chunk's end.
        let long = format!(
            "{{\"type\":\"progress\",\"stage\":\"s\",\"note\":\"{}\"}}\n",
            "n".repeat(3 * CHUNK)
        );
        let short = "{\"type\":\"progress\",\"stage\":\"t\"}\n";
        let pad = "x".repeat(CHUNK - (long.len() + short.len()) % CHUNK - 1);
        let input = format!("{long}{short}{pad}\n{short}");
        let (tx, mut rx) = mpsc::channel(16);
        let summary = read_stdout(input.as_bytes(), StreamMode::Ndjson, 1 << 20, &tx)
            .await
            .unwrap();
        let mut stages = Vec::new();
        while let Ok(event) = rx.try_recv() {
            if let OutputEvent::Progress { stage, note } = event {
                stages.push((stage, note.map_or(0, |n| n.len())));
            }
        }
        assert_eq!(summary.invalid, 1, "the padding line");
        assert_eq!(stages[0], ("s".to_owned(), 3 * CHUNK));
        assert_eq!(stages[1].0, "t");
        assert_eq!(stages.last().unwrap().0, "t");
    }
}
