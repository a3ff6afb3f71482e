//! MCP answers bounded for their clients: a task's or an output record's
//! large values cut, and pages ended early (`read`'s tools, `wait` and the
//! flow tools).
//!
//! The bounds on the task data an MCP answer carries (docs/mcp.md, Large
//! values; a flow run's view and a flow tool's answer are bounded alike):
//! a tool result travels twice in one message (its JSON as structured
//! content and the same JSON escaped as text), and the official Python
//! SDK refuses a server-sent event over 1 MiB. Each large value of a task
//! (prompt, system, input, metadata, result value, reason, an attempt's
//! reason) or of an output record (inline value, chunk, note) is cut, on a
//! character boundary, to a bounded size of JSON, ending with a marker
//! that gives its whole size and where to read it whole; the object gains
//! `cut`: `{values: {<JSON pointer>: <whole size in bytes>}, read}`. A page
//! ends early, with its `next`, once its answer would pass
//! [`MAX_ANSWER_BYTES`]; it always holds its first item.

use serde_json::{Map, Value, json};

/// The most bytes of JSON one value of a task or output record takes
/// in `task`, `cancel` and `output` answers.
pub(crate) const MAX_VALUE_BYTES: usize = 64 * 1024;
/// The most bytes of JSON one value of a task takes in a `tasks` page.
pub(crate) const MAX_LISTED_VALUE_BYTES: usize = 4 * 1024;
/// The most bytes one answer's result takes: its JSON plus that JSON
/// escaped as text.
pub(crate) const MAX_ANSWER_BYTES: usize = 512 * 1024;
/// Each value's bound in turn while a task's answer is over its budget.
const TASK_LIMITS: [usize; 4] = [MAX_VALUE_BYTES, 16 * 1024, MAX_LISTED_VALUE_BYTES, 1024];
/// The values of a task that are cut.
const TASK_VALUES: &[&str] = &[
    "/prompt",
    "/system",
    "/input",
    "/metadata",
    "/result/value",
    "/reason",
];
/// Each value's bound in turn while a run's answer is over its budget: a
/// run holds values per step, so the last leaves little but the markers.
const RUN_LIMITS: [usize; 5] = [
    MAX_VALUE_BYTES,
    16 * 1024,
    MAX_LISTED_VALUE_BYTES,
    1024,
    128,
];
/// The values of a run that are cut, besides its nodes' and waits'.
const RUN_VALUES: &[&str] = &["/input", "/result", "/error", "/graph"];
/// The values of a step's try that are cut.
const TRY_VALUES: &[&str] = &["output", "changes", "reason"];
/// The values of a run's wait that are cut.
const WAIT_VALUES: &[&str] = &["prompt", "schema", "answer", "reason"];
/// The values of an output record that are cut.
const RECORD_VALUES: &[&str] = &["/event/content/value", "/event/chunk/value", "/event/note"];
/// What a page's answer holds besides its items, at most.
const PAGE_OVERHEAD: usize = 1024;

/// The bytes `c` takes inside a JSON string.
fn escaped_char(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// The bytes `text` takes as a JSON string, quotes included.
fn escaped_len(text: &str) -> usize {
    2 + text.chars().map(escaped_char).sum::<usize>()
}

/// The bytes `value` takes as JSON, counted without writing it out.
fn json_len(value: &Value) -> usize {
    usize::try_from(swarmd_output_store::json_len(value)).unwrap_or(usize::MAX)
}

/// The bytes `value` takes in a tool result: its JSON as structured
/// content plus that JSON escaped as the text content.
pub(crate) fn answer_bytes(value: &Value) -> usize {
    let text = value.to_string();
    text.len() + escaped_len(&text)
}

/// Cuts `value` to at most `limit` bytes of JSON: a string keeps its
/// first characters, any other value becomes the start of its JSON
/// text, each followed by a marker naming its whole size and `read`.
/// Returns the whole size in bytes when it cut.
pub(crate) fn cut_value(value: &mut Value, limit: usize, read: &str) -> Option<usize> {
    let bytes = json_len(value);
    if bytes <= limit {
        return None;
    }
    let text = match &mut *value {
        Value::String(text) => std::mem::take(text),
        other => other.to_string(),
    };
    let marker = format!(" … [cut: {bytes} bytes in all; read it whole with {read}]");
    let room = limit.saturating_sub(escaped_len(&marker));
    let (mut used, mut end) = (0, 0);
    for (at, c) in text.char_indices() {
        used += escaped_char(c);
        if used > room {
            break;
        }
        end = at + c.len_utf8();
    }
    let mut kept = text;
    kept.truncate(end);
    kept.push_str(&marker);
    *value = Value::String(kept);
    Some(bytes)
}

/// Cuts the value at `pointer` under `object`, noting it in `cut`.
fn cut_at(
    object: &mut Value,
    pointer: &str,
    limit: usize,
    read: &str,
    cut: &mut Map<String, Value>,
) {
    if let Some(value) = object.pointer_mut(pointer)
        && let Some(bytes) = cut_value(value, limit, read)
    {
        cut.insert(pointer.to_owned(), json!(bytes));
    }
}

/// Notes what was cut of `object` in its `cut` field.
fn mark(object: &mut Value, cut: Map<String, Value>, read: String) {
    if let (false, Some(map)) = (cut.is_empty(), object.as_object_mut()) {
        map.insert("cut".into(), json!({ "values": cut, "read": read }));
    }
}

/// Cuts each value of `task` (a task, with or without its attempts) to
/// `limit` bytes of JSON.
pub(crate) fn bound_task(task: &mut Value, limit: usize) {
    let read = match task.get("id").and_then(Value::as_str) {
        Some(id) => format!("GET /v1/tasks/{id}"),
        None => "GET /v1/tasks/{id}".to_owned(),
    };
    let mut cut = Map::new();
    for pointer in TASK_VALUES {
        cut_at(task, pointer, limit, &read, &mut cut);
    }
    let attempts = task
        .get("attempts")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    for index in 0..attempts {
        cut_at(
            task,
            &format!("/attempts/{index}/reason"),
            limit,
            &read,
            &mut cut,
        );
    }
    mark(task, cut, read);
}

/// Cuts `task`'s values to [`MAX_VALUE_BYTES`], or less when its answer
/// would still pass `budget` (to 16 KiB, 4 KiB, then 1 KiB each).
pub(crate) fn bound_task_within(task: &mut Value, budget: usize) {
    cut_within(task, budget, &TASK_LIMITS, bound_task);
}

/// Cuts `object`'s values with `bound` at each limit of `limits` in turn,
/// from the whole object each time, until its answer is within `budget`.
fn cut_within(object: &mut Value, budget: usize, limits: &[usize], bound: fn(&mut Value, usize)) {
    let whole = object.clone();
    for (index, limit) in limits.iter().enumerate() {
        if index > 0 {
            *object = whole.clone();
        }
        bound(object, *limit);
        if answer_bytes(object) <= budget {
            return;
        }
    }
}

/// Cuts each value of `run` (a run's view, or a flow tool's answer) to
/// `limit` bytes of JSON: the run's input, result, error and graph, each
/// node's reason, each try's output, changes and reason, and each wait's
/// prompt, schema, answer and reason. `GET /v1/runs/{id}` reads them whole.
pub(crate) fn bound_run(run: &mut Value, limit: usize) {
    let id = run.get("id").or_else(|| run.get("run_id"));
    let read = match id.and_then(Value::as_str) {
        Some(id) => format!("GET /v1/runs/{id}"),
        None => "GET /v1/runs/{id}".to_owned(),
    };
    let count = |object: &Value, list: &str| {
        object
            .get(list)
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    };
    let mut pointers: Vec<String> = RUN_VALUES.iter().map(|p| (*p).to_owned()).collect();
    for (n, node) in run
        .get("nodes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        pointers.push(format!("/nodes/{n}/reason"));
        for t in 0..count(node, "tries") {
            pointers.extend(
                TRY_VALUES
                    .iter()
                    .map(|v| format!("/nodes/{n}/tries/{t}/{v}")),
            );
        }
    }
    for w in 0..count(run, "waits") {
        pointers.extend(WAIT_VALUES.iter().map(|v| format!("/waits/{w}/{v}")));
    }
    let mut cut = Map::new();
    for pointer in &pointers {
        cut_at(run, pointer, limit, &read, &mut cut);
    }
    mark(run, cut, read);
}

/// Cuts `run`'s values to [`MAX_VALUE_BYTES`], or less when its answer
/// would still pass `budget` (to 16 KiB, 4 KiB, 1 KiB, then 128 bytes
/// each).
pub(crate) fn bound_run_within(run: &mut Value, budget: usize) {
    cut_within(run, budget, &RUN_LIMITS, bound_run);
}

/// Cuts an output record's values to [`MAX_VALUE_BYTES`]; `whole` is the
/// task's output route. Returns the record's id as the page's `next`
/// names it (`<seq>` with `by_attempt`, else `<attempt>:<seq>`).
pub(crate) fn bound_record(record: &mut Value, whole: &str, by_attempt: bool) -> Option<String> {
    let attempt = record.get("attempt").and_then(Value::as_u64);
    let seq = record.get("seq").and_then(Value::as_u64);
    let read = match (attempt, seq) {
        (Some(a), Some(s)) => {
            format!(
                "{whole}?attempt={a}&after_seq={}&limit=1",
                s.saturating_sub(1)
            )
        }
        _ => whole.to_owned(),
    };
    let mut cut = Map::new();
    for pointer in RECORD_VALUES {
        cut_at(record, pointer, MAX_VALUE_BYTES, &read, &mut cut);
    }
    mark(record, cut, read);
    match (attempt, seq) {
        (Some(a), Some(s)) if !by_attempt => Some(format!("{a}:{s}")),
        (_, Some(s)) => Some(s.to_string()),
        _ => None,
    }
}

/// Bounds each item of `page[list]` with `bound` (which returns the
/// item's id) and ends the page after the last item that keeps its
/// answer within [`MAX_ANSWER_BYTES`] (the first always stays), with
/// `page[next]` its id. Returns whether the page was ended early.
pub(crate) fn bound_page(
    page: &mut Value,
    list: &str,
    next: &str,
    mut bound: impl FnMut(&mut Value) -> Option<String>,
) -> bool {
    let Some(items) = page.get_mut(list).and_then(Value::as_array_mut) else {
        return false;
    };
    let mut total = PAGE_OVERHEAD;
    let mut last = None;
    let mut keep = items.len();
    for (index, item) in items.iter_mut().enumerate() {
        let id = bound(item);
        let bytes = answer_bytes(item) + 4;
        if index > 0 && total + bytes > MAX_ANSWER_BYTES {
            keep = index;
            break;
        }
        total += bytes;
        last = id;
    }
    if keep == items.len() {
        return false;
    }
    items.truncate(keep);
    if let Some(map) = page.as_object_mut() {
        map.insert(next.to_owned(), last.map_or(Value::Null, Value::String));
    }
    true
}

/// The fields of a popped frame that are never cut: what names it.
const FRAME_NAMES: &[&str] = &["type", "req_id", "task_id", "run_id", "attempt", "seq"];

/// Cuts each value of a popped frame (`frames`) but the fields that name
/// it to `limit` bytes of JSON: a `run_done`'s result, a `task_done`'s
/// value, a `hook_after`'s result, an `ask`'s question. Its run (`GET
/// /v1/runs/{id}`) or task (`GET /v1/tasks/{id}`) reads them whole.
fn bound_frame(frame: &mut Value, limit: usize) {
    let named = |field: &str| frame.get(field).and_then(Value::as_str);
    let read = match (named("run_id"), named("task_id")) {
        (Some(run), _) => format!("GET /v1/runs/{run}"),
        (None, Some(task)) => format!("GET /v1/tasks/{task}"),
        (None, None) => return,
    };
    let fields: Vec<String> = frame.as_object().map_or_else(Vec::new, |fields| {
        fields
            .keys()
            .filter(|key| !FRAME_NAMES.contains(&key.as_str()))
            .cloned()
            .collect()
    });
    let mut cut = Map::new();
    for field in fields {
        cut_at(frame, &format!("/{field}"), limit, &read, &mut cut);
    }
    mark(frame, cut, read);
}

/// Cuts popped frames' values until their answer is within `budget`, each
/// frame within its share of it (to 64 KiB, 16 KiB, 4 KiB, 1 KiB, then
/// 128 bytes a value): a frame is popped once, so what is cut is named
/// with the route that reads it whole.
pub(crate) fn bound_frames(frames: &mut [Value], budget: usize) {
    let whole: usize = frames.iter().map(answer_bytes).sum();
    if whole <= budget || frames.is_empty() {
        return;
    }
    let share = budget.saturating_sub(PAGE_OVERHEAD) / frames.len();
    for frame in frames {
        if answer_bytes(frame) > share {
            cut_within(frame, share, &RUN_LIMITS, bound_frame);
        }
    }
}
