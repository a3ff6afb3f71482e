//! The events the crash child writes, as a pure function of their place in a
//! stream, shared by the child and `tests/crash.rs` so the test can check content.

use serde_json::json;
use swarmd_output_store::{ContentRef, OutputEvent};
use uuid::Uuid;

/// The child's `inline_max_bytes`: small enough that every tenth event spills.
pub(crate) const INLINE_MAX_BYTES: usize = 256;

/// The event the child writes at `seq` of `task`'s stream.
pub(crate) fn expected_event(task: Uuid, seq: u64) -> OutputEvent {
    match seq % 10 {
        0 => OutputEvent::Artifact {
            name: format!("artifact-{seq}"),
            content: ContentRef::Inline {
                value: json!({"task": task, "seq": seq, "pad": "z".repeat(300 + (seq % 50) as usize)}),
            },
        },
        1 | 5 => OutputEvent::Progress {
            stage: format!("stage-{seq}"),
            note: (seq % 2 == 1).then(|| task.to_string()),
        },
        4 | 8 => OutputEvent::inline_final(json!({"seq": seq}), seq % 10 == 8),
        _ => OutputEvent::Partial {
            chunk: ContentRef::Inline {
                value: json!([task, seq]),
            },
        },
    }
}
