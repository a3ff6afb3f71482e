//! The output event model (docs/protocol.md, Output events): `OutputEvent`, `ContentRef` and the
//! stored `OutputRecord`.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The longest name a worker may give an artifact, in bytes (at least 1).
pub const MAX_ARTIFACT_NAME: usize = 256;
/// The longest `stage` of a progress event, in bytes.
pub const MAX_PROGRESS_STAGE: usize = 256;
/// The longest `note` of a progress event, in bytes. Names and notes are
/// kept inline (only content values spill to blobs), so they are bounded.
pub const MAX_PROGRESS_NOTE: usize = 64 * 1024;

/// One event a worker emits during an attempt; NDJSON-tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum OutputEvent {
    /// A progress marker.
    Progress {
        stage: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// A streamed piece of output.
    Partial { chunk: ContentRef },
    /// A named artifact.
    Artifact { name: String, content: ContentRef },
    /// The attempt's result.
    Final { content: ContentRef, ok: bool },
}

/// The body of an event: a JSON value kept inline, or a reference to a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ContentRef {
    /// The value itself.
    Inline { value: serde_json::Value },
    /// A file; `path` is relative to the state directory for spilled blobs
    /// (`blobs/<sha256>`), `sha256` is lowercase hex of the file's bytes.
    FileRef {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime: Option<String>,
        size: u64,
        sha256: String,
    },
}

/// A stored event: its place in the `(task, attempt)` stream and who wrote it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputRecord {
    pub task: Uuid,
    pub attempt: u32,
    /// Position in the stream, from 1, without gaps.
    pub seq: u64,
    /// Wall-clock milliseconds since the Unix epoch when the record was stored.
    pub ts_ms: u64,
    pub producer: String,
    pub event: OutputEvent,
}

impl OutputEvent {
    /// A `final` event with an inline value.
    pub fn inline_final(value: serde_json::Value, ok: bool) -> OutputEvent {
        OutputEvent::Final {
            content: ContentRef::Inline { value },
            ok,
        }
    }

    /// Whether this is the attempt's `final` event.
    pub fn is_final(&self) -> bool {
        matches!(self, OutputEvent::Final { .. })
    }

    /// The `ok` flag of a `final` event; `None` for every other event.
    pub fn final_ok(&self) -> Option<bool> {
        match self {
            OutputEvent::Final { ok, .. } => Some(*ok),
            _ => None,
        }
    }

    /// What of this event is past its bound, if anything: an artifact's
    /// name (1 to `MAX_ARTIFACT_NAME` bytes), a progress stage or note
    /// (`MAX_PROGRESS_STAGE`, `MAX_PROGRESS_NOTE`).
    pub fn out_of_bounds(&self) -> Option<String> {
        match self {
            OutputEvent::Artifact { name, .. }
                if name.is_empty() || name.len() > MAX_ARTIFACT_NAME =>
            {
                Some(format!(
                    "an artifact's name is 1 to {MAX_ARTIFACT_NAME} bytes"
                ))
            }
            OutputEvent::Progress { stage, .. } if stage.len() > MAX_PROGRESS_STAGE => Some(
                format!("a progress stage is at most {MAX_PROGRESS_STAGE} bytes"),
            ),
            OutputEvent::Progress {
                note: Some(note), ..
            } if note.len() > MAX_PROGRESS_NOTE => Some(format!(
                "a progress note is at most {MAX_PROGRESS_NOTE} bytes"
            )),
            _ => None,
        }
    }

    /// The content this event carries, if any (`progress` carries none).
    pub fn content(&self) -> Option<&ContentRef> {
        match self {
            OutputEvent::Progress { .. } => None,
            OutputEvent::Partial { chunk } => Some(chunk),
            OutputEvent::Artifact { content, .. } | OutputEvent::Final { content, .. } => {
                Some(content)
            }
        }
    }

    /// The content this event carries, mutably.
    pub fn content_mut(&mut self) -> Option<&mut ContentRef> {
        match self {
            OutputEvent::Progress { .. } => None,
            OutputEvent::Partial { chunk } => Some(chunk),
            OutputEvent::Artifact { content, .. } | OutputEvent::Final { content, .. } => {
                Some(content)
            }
        }
    }
}

/// A Final's content as a JSON value: the inline value, or the reference.
pub fn content_value(content: ContentRef) -> serde_json::Value {
    match content {
        ContentRef::Inline { value } => value,
        other => serde_json::to_value(other).unwrap_or(serde_json::Value::Null),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stages_and_notes_are_bounded() {
        let named = |name: &str| OutputEvent::Artifact {
            name: name.to_owned(),
            content: ContentRef::Inline {
                value: serde_json::json!(1),
            },
        };
        assert!(named("").out_of_bounds().is_some());
        assert!(
            named(&"n".repeat(MAX_ARTIFACT_NAME))
                .out_of_bounds()
                .is_none()
        );
        assert!(
            named(&"n".repeat(MAX_ARTIFACT_NAME + 1))
                .out_of_bounds()
                .is_some()
        );
        let progress = |stage: usize, note: usize| OutputEvent::Progress {
            stage: "s".repeat(stage),
            note: Some("n".repeat(note)),
        };
        assert!(
            progress(MAX_PROGRESS_STAGE, MAX_PROGRESS_NOTE)
                .out_of_bounds()
                .is_none()
        );
        assert!(
            progress(MAX_PROGRESS_STAGE + 1, 0)
                .out_of_bounds()
                .is_some()
        );
        assert!(progress(0, MAX_PROGRESS_NOTE + 1).out_of_bounds().is_some());
    }
    use proptest::prelude::*;
    use serde_json::json;

    const SPEC_LINE: &str =
        r#"{"type":"final","content":{"kind":"inline","value":"done"},"ok":true}"#;

    #[test]
    fn spec_ndjson_line_round_trips_byte_for_byte() {
        let event: OutputEvent = serde_json::from_str(SPEC_LINE).unwrap();
        assert_eq!(event, OutputEvent::inline_final(json!("done"), true));
        assert_eq!(serde_json::to_string(&event).unwrap(), SPEC_LINE);
    }

    #[test]
    fn every_variant_has_the_documented_wire_form() {
        let cases = [
            (
                OutputEvent::Progress {
                    stage: "fetch".into(),
                    note: None,
                },
                json!({"type": "progress", "stage": "fetch"}),
            ),
            (
                OutputEvent::Progress {
                    stage: "fetch".into(),
                    note: Some("3/4".into()),
                },
                json!({"type": "progress", "stage": "fetch", "note": "3/4"}),
            ),
            (
                OutputEvent::Partial {
                    chunk: ContentRef::Inline { value: json!([1]) },
                },
                json!({"type": "partial", "chunk": {"kind": "inline", "value": [1]}}),
            ),
            (
                OutputEvent::Artifact {
                    name: "report".into(),
                    content: ContentRef::FileRef {
                        path: "blobs/ab".into(),
                        mime: None,
                        size: 3,
                        sha256: "ab".into(),
                    },
                },
                json!({"type": "artifact", "name": "report",
                       "content": {"kind": "file_ref", "path": "blobs/ab", "size": 3, "sha256": "ab"}}),
            ),
            (
                OutputEvent::Final {
                    content: ContentRef::FileRef {
                        path: "out.txt".into(),
                        mime: Some("text/plain".into()),
                        size: 0,
                        sha256: "e3".into(),
                    },
                    ok: false,
                },
                json!({"type": "final", "ok": false, "content": {"kind": "file_ref",
                       "path": "out.txt", "mime": "text/plain", "size": 0, "sha256": "e3"}}),
            ),
        ];
        for (event, wire) in cases {
            assert_eq!(serde_json::to_value(&event).unwrap(), wire);
            assert_eq!(serde_json::from_value::<OutputEvent>(wire).unwrap(), event);
        }
    }

    #[test]
    fn unknown_fields_are_rejected_at_every_level() {
        let rejected = [
            r#"{"type":"progress","stage":"a","extra":1}"#,
            r#"{"type":"final","content":{"kind":"inline","value":1},"ok":true,"why":0}"#,
            r#"{"type":"partial","chunk":{"kind":"inline","value":1,"size":2}}"#,
            r#"{"type":"artifact","name":"n","content":{"kind":"file_ref","path":"p","size":1,"sha256":"s","x":0}}"#,
            r#"{"type":"progres","stage":"a"}"#,
            r#"{"stage":"a"}"#,
            r#"{"type":"final","content":{"kind":"inline","value":1}}"#,
        ];
        for line in rejected {
            assert!(
                serde_json::from_str::<OutputEvent>(line).is_err(),
                "accepted {line}"
            );
        }
    }

    #[test]
    fn helpers_tell_finals_apart() {
        let done = OutputEvent::inline_final(json!({"n": 1}), false);
        assert!(done.is_final());
        assert_eq!(done.final_ok(), Some(false));
        let progress = OutputEvent::Progress {
            stage: "s".into(),
            note: None,
        };
        assert!(!progress.is_final());
        assert_eq!(progress.final_ok(), None);
    }

    #[test]
    fn record_round_trips() {
        let record = OutputRecord {
            task: Uuid::from_u128(7),
            attempt: 2,
            seq: 9,
            ts_ms: 1_700_000_000_000,
            producer: "worker".into(),
            event: OutputEvent::inline_final(json!(null), true),
        };
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(serde_json::from_str::<OutputRecord>(&text).unwrap(), record);
    }

    fn arb_json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            ".{0,12}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                    .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
            ]
        })
    }

    fn arb_content() -> impl Strategy<Value = ContentRef> {
        prop_oneof![
            arb_json().prop_map(|value| ContentRef::Inline { value }),
            (
                ".{0,8}",
                prop::option::of("[a-z]+/[a-z]+"),
                any::<u64>(),
                "[0-9a-f]{64}"
            )
                .prop_map(|(path, mime, size, sha256)| ContentRef::FileRef {
                    path,
                    mime,
                    size,
                    sha256
                }),
        ]
    }

    fn arb_event() -> impl Strategy<Value = OutputEvent> {
        prop_oneof![
            (".{0,8}", prop::option::of(".{0,8}"))
                .prop_map(|(stage, note)| OutputEvent::Progress { stage, note }),
            arb_content().prop_map(|chunk| OutputEvent::Partial { chunk }),
            (".{0,8}", arb_content())
                .prop_map(|(name, content)| OutputEvent::Artifact { name, content }),
            (arb_content(), any::<bool>())
                .prop_map(|(content, ok)| OutputEvent::Final { content, ok }),
        ]
    }

    proptest! {
        #[test]
        fn any_event_round_trips_through_ndjson(event in arb_event()) {
            let line = serde_json::to_string(&event).unwrap();
            prop_assert!(!line.contains('\n'));
            prop_assert_eq!(serde_json::from_str::<OutputEvent>(&line).unwrap(), event);
        }
    }
}
