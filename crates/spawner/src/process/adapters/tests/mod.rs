//! The adapters' tests: recorded transcripts (tests/fixtures/cli-streams,
//! whose README names the CLI versions) in `transcripts`; malformed, unknown
//! and oversized lines, and a throughput measurement, in `lines`.

mod lines;
mod transcripts;

use serde_json::Value;
use swarmd_output_store::{ContentRef, OutputEvent};

use super::{Adapter, CliFormat};

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!(
            "../../../../../../tests/fixtures/cli-streams/",
            $name
        ))
    };
}
use fixture;

/// Every event of a transcript, `finish` included, one short line each:
/// `P stage | note`, `T text` (a partial), `F ok value` (a Final).
pub(super) fn run(format: CliFormat, transcript: &str) -> Vec<String> {
    let mut adapter = Adapter::new(format);
    let mut events = Vec::new();
    for (n, line) in transcript.lines().enumerate() {
        adapter.line(line.as_bytes(), n as u64 + 1, &mut events);
    }
    adapter.finish(&mut events);
    events.iter().map(describe).collect()
}

pub(super) fn describe(event: &OutputEvent) -> String {
    let inline = |content: &ContentRef| match content {
        ContentRef::Inline { value } => value.clone(),
        ContentRef::FileRef { .. } => panic!("an adapter never names a file"),
    };
    match event {
        OutputEvent::Progress { stage, note } => {
            format!("P {stage} | {}", note.as_deref().unwrap_or(""))
        }
        OutputEvent::Partial { chunk } => match inline(chunk) {
            Value::String(text) => format!("T {text}"),
            other => format!("T {other}"),
        },
        OutputEvent::Final { content, ok } => format!("F {ok} {}", inline(content)),
        OutputEvent::Artifact { name, .. } => format!("A {name}"),
    }
}
