//! A run's view (`GET /v1/runs/{id}`) for people: its header, its node
//! tree (a step's tries, a merge node's inner steps and its unresolved
//! conflict), and its waits with their prompts and how to answer them.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::{LINE_CHARS, items, short_hash};
use crate::render::{clean, clean_within, duration, short_id, since, text};

/// The most lines of a wait's prompt the view prints.
const PROMPT_LINES: usize = 20;
/// The most bytes of a wait's prompt the view prints.
const PROMPT_BYTES: usize = 4096;
/// The most conflicting files a merge node's line names.
const CONFLICT_FILES: usize = 5;

/// The time a view is read at, and when its run ended (its last change),
/// once it did: a try the run's end left open ends there.
#[derive(Debug, Clone, Copy)]
struct Clock {
    now_ms: u64,
    run_ended_ms: Option<u64>,
}

/// The mark a node's status gets in the tree.
fn mark(status: &str) -> &'static str {
    match status {
        "passed" => "✓",
        "failed" => "✗",
        "running" => "▶",
        "waiting" => "⏸",
        "cancelled" => "⊘",
        _ => "·",
    }
}

/// A run's view (`GET /v1/runs/{id}`) for people: a key/value header, the
/// node tree (one node instance a line, indented by its depth in the
/// flow, with a status mark, and a step's task and duration), then the
/// waits, an open one with the command that answers it.
pub fn run_block(view: &Value, now_ms: u64) -> String {
    let id = view["id"].as_str().unwrap_or("-");
    let status = view["status"].as_str().unwrap_or("-");
    let ended = !matches!(status, "running" | "waiting");
    let mut pairs = vec![
        ("id", clean(id, 40)),
        (
            "flow",
            format!(
                "{} ({})",
                text(&view["flow"], 64),
                short_hash(&view["flow_hash"])
            ),
        ),
        ("status", clean(status, 20)),
        ("created", since(&view["created_ms"], now_ms)),
        ("updated", since(&view["updated_ms"], now_ms)),
        (
            "duration",
            took(&view["created_ms"], &view["updated_ms"], !ended, now_ms),
        ),
        ("input", text(&view["input"], LINE_CHARS)),
    ];
    if !view["result"].is_null() {
        pairs.push(("result", text(&view["result"], LINE_CHARS)));
    }
    if !view["error"].is_null() {
        pairs.push(("error", text(&view["error"], LINE_CHARS)));
    }
    let mut lines: Vec<String> = pairs
        .iter()
        .map(|(key, value)| format!("{key:8}  {value}"))
        .collect();
    let nodes = items(&view["nodes"]);
    if !nodes.is_empty() {
        let clock = Clock {
            now_ms,
            run_ended_ms: view["updated_ms"].as_u64().filter(|_| ended),
        };
        lines.push(String::new());
        lines.extend(node_tree(nodes, clock));
    }
    let waits = items(&view["waits"]);
    if !waits.is_empty() {
        lines.push(String::new());
        lines.push("waits:".to_owned());
        for wait in waits {
            lines.extend(wait_lines(wait, waits, id, now_ms));
        }
    }
    lines.join("\n")
}

/// `POST /v1/runs/{id}/waits/{wait}`'s answer for people: the run as
/// `run_block` prints it, or, when the answer is only `{id, wait, status}`
/// (the credential was the wait's own token, which reads nothing else of
/// the run), those three.
pub fn answer_block(answer: &Value, now_ms: u64) -> String {
    if answer.get("flow").is_some() || answer.get("created_ms").is_some() {
        return run_block(answer, now_ms);
    }
    [
        ("id", text(&answer["id"], 40)),
        ("wait", text(&answer["wait"], LINE_CHARS)),
        ("status", text(&answer["status"], 20)),
    ]
    .iter()
    .map(|(key, value)| format!("{key:6}  {value}"))
    .collect::<Vec<_>>()
    .join("\n")
}

/// From `start` to `end`, or to now while `open` and not ended.
fn took(start: &Value, end: &Value, open: bool, now_ms: u64) -> String {
    match (start.as_u64(), end.as_u64()) {
        (Some(start), _) if open => duration(now_ms.saturating_sub(start)),
        (Some(start), Some(end)) => duration(end.saturating_sub(start)),
        _ => "-".to_owned(),
    }
}

/// One wait's lines: name, state, prompt; for an open one the command
/// that answers it (and its token, when the view carries it).
fn wait_lines(wait: &Value, all: &[Value], run_id: &str, now_ms: u64) -> Vec<String> {
    let name = wait["name"].as_str().unwrap_or("-");
    let open = wait["open"].as_bool() == Some(true);
    let state = if open {
        "open".to_owned()
    } else if !wait["answer"].is_null() {
        format!("answered {}", text(&wait["answer"], LINE_CHARS))
    } else if !wait["reason"].is_null() {
        format!("failed: {}", text(&wait["reason"], LINE_CHARS))
    } else {
        "closed".to_owned()
    };
    let mut first = format!("  {}  {state}", clean(name, 64));
    let prompt = prompt_lines(&wait["prompt"]);
    if let Some(inline) = prompt.inline {
        let _ = write!(first, "  {inline}");
    }
    if let Some(deadline) = wait["deadline_ms"].as_u64().filter(|_| open) {
        let _ = write!(
            first,
            "  (ends in {})",
            duration(deadline.saturating_sub(now_ms))
        );
    }
    let mut lines = vec![first];
    lines.extend(prompt.below.iter().map(|line| format!("    │ {line}")));
    if prompt.cut {
        lines.push(format!(
            "    │ … (cut at {PROMPT_LINES} lines or {PROMPT_BYTES} bytes; -o json has it whole)"
        ));
    }
    if open {
        // A name shared by several open waits is ambiguous: answer by key.
        let shared = all
            .iter()
            .filter(|w| w["open"].as_bool() == Some(true) && w["name"].as_str() == Some(name))
            .count()
            > 1;
        let target = if shared {
            wait["key"].as_str().unwrap_or(name)
        } else {
            name
        };
        lines.push(format!(
            "    answer: swarmd flow answer {} {} '<JSON>'",
            shell_word(run_id),
            shell_word(target)
        ));
        if let Some(token) = wait["token"].as_str() {
            lines.push(format!("    token:  {}", clean(token, 200)));
        }
    }
    lines
}

/// A wait's prompt as the view prints it: on the wait's line when it is
/// one short line, else whole below it, line by line, bounded.
#[derive(Debug, Default, PartialEq)]
struct Prompt {
    inline: Option<String>,
    below: Vec<String>,
    /// Whether the prompt has more than `below` holds.
    cut: bool,
}

/// `prompt` (text as it is, other JSON pretty-printed) for `wait_lines`:
/// at most `PROMPT_LINES` lines and `PROMPT_BYTES` bytes, each line
/// cleaned of control characters.
fn prompt_lines(prompt: &Value) -> Prompt {
    let whole = match prompt {
        Value::Null => return Prompt::default(),
        Value::String(text) => text.trim_end().to_owned(),
        other => {
            let compact = other.to_string();
            if let Some(inline) = clean_within(&compact, LINE_CHARS) {
                return Prompt {
                    inline: Some(inline),
                    ..Prompt::default()
                };
            }
            serde_json::to_string_pretty(other).unwrap_or(compact)
        }
    };
    if whole.is_empty() {
        return Prompt::default();
    }
    if !whole.contains('\n')
        && let Some(inline) = clean_within(&whole, LINE_CHARS)
    {
        return Prompt {
            inline: Some(inline),
            ..Prompt::default()
        };
    }
    let mut shown = whole.as_str();
    let mut cut = false;
    if shown.len() > PROMPT_BYTES {
        let mut end = PROMPT_BYTES;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        shown = &shown[..end];
        cut = true;
    }
    let all: Vec<&str> = shown.lines().collect();
    cut |= all.len() > PROMPT_LINES;
    Prompt {
        inline: None,
        below: all
            .iter()
            .take(PROMPT_LINES)
            .map(|line| clean(line, PROMPT_BYTES).trim_end().to_owned())
            .collect(),
        cut,
    }
}

/// Whether a run's view is waiting on a person: `waiting` (only waits
/// are under way) with an open wait. A verb that waits for the run stops
/// there, since nothing moves until someone answers.
pub fn waits_on_a_person(view: &Value) -> bool {
    view["status"].as_str() == Some("waiting")
        && items(&view["waits"])
            .iter()
            .any(|wait| wait["open"].as_bool() == Some(true))
}

/// `word` as one shell word: as is when it is plain, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':'));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", clean(word, 200).replace('\'', r"'\''"))
    }
}

/// One part of a node's place in the tree, in display order: the fields
/// that hold nodes rank `body`, `then`, `else`, `catch`, `children`;
/// numbers (child indices, fan-out items, loop iterations) by value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Field(u8, String),
    Index(u64),
}

fn field(name: &str) -> Step {
    let rank = match name {
        "body" => 0,
        "then" => 1,
        "else" => 2,
        "catch" => 3,
        "children" => 4,
        _ => 5,
    };
    Step::Field(rank, name.to_owned())
}

/// A node instance's place: its display order and depth.
struct Place {
    order: Vec<Step>,
    depth: usize,
}

/// The nodes of a view as a tree, one line each, parents before children
/// and fan-out items and loop iterations each with their own subtree.
///
/// A node's key is its sub-flow scope (`<call key>>name`), its pointer
/// and its instance suffix (`[i]` per fan-out item, `#i` per loop
/// iteration, outermost first); an instance index belongs to the `body`
/// of the enclosing fan-out or loop, found by the kind of the node at
/// that pointer.
fn node_tree(nodes: &[Value], clock: Clock) -> Vec<String> {
    let by_key: HashMap<&str, &Value> = nodes
        .iter()
        .filter_map(|node| Some((node["key"].as_str()?, node)))
        .collect();
    let mut kinds: HashMap<(&str, &str), &str> = HashMap::new();
    for node in nodes {
        if let (Some(key), Some(pointer), Some(kind)) = (
            node["key"].as_str(),
            node["pointer"].as_str(),
            node["kind"].as_str(),
        ) {
            let (scope, _) = split_key(key, pointer);
            kinds.insert((scope, pointer), kind);
        }
    }
    let mut placed: Vec<(Place, &Value)> = nodes
        .iter()
        .map(|node| (place(node, &by_key, &kinds, 0), node))
        .collect();
    placed.sort_by(|a, b| a.0.order.cmp(&b.0.order));
    placed
        .into_iter()
        .flat_map(|(place, node)| node_lines(node, place.depth, clock))
        .collect()
}

/// `key` cut into its scope and instance suffix around `pointer`.
fn split_key<'k>(key: &'k str, pointer: &str) -> (&'k str, &'k str) {
    match key.rfind(pointer) {
        Some(at) if !pointer.is_empty() => (&key[..at], &key[at + pointer.len()..]),
        _ => ("", ""),
    }
}

fn place(
    node: &Value,
    by_key: &HashMap<&str, &Value>,
    kinds: &HashMap<(&str, &str), &str>,
    nesting: usize,
) -> Place {
    let key = node["key"].as_str().unwrap_or_default();
    let pointer = node["pointer"].as_str().unwrap_or_default();
    if pointer.is_empty() || !key.contains(pointer) || nesting > 16 {
        return Place {
            order: vec![Step::Field(5, key.to_owned())],
            depth: 0,
        };
    }
    let (scope, inst) = split_key(key, pointer);
    let (mut order, mut depth) = match scope.rsplit_once('>') {
        Some((call_key, flow)) => {
            let call = by_key.get(call_key).map_or_else(
                || Place {
                    order: vec![Step::Field(5, call_key.to_owned())],
                    depth: 0,
                },
                |call| place(call, by_key, kinds, nesting + 1),
            );
            let mut order = call.order;
            order.push(Step::Field(5, format!(">{flow}")));
            (order, call.depth + 1)
        }
        None => (Vec::new(), 0),
    };
    let mut indices = inst
        .split(['[', ']', '#'])
        .filter_map(|part| part.parse::<u64>().ok());
    let mut prefix = String::new();
    let mut fields = 0usize;
    for part in pointer.split('/').skip(1) {
        let parent_kind = kinds.get(&(scope, prefix.as_str())).copied();
        prefix.push('/');
        prefix.push_str(part);
        match part.parse::<u64>() {
            Ok(index) => order.push(Step::Index(index)),
            Err(_) => {
                fields += 1;
                order.push(field(part));
                if part == "body" && matches!(parent_kind, Some("fanout" | "loop")) {
                    order.push(Step::Index(indices.next().unwrap_or(0)));
                }
            }
        }
    }
    depth += fields.saturating_sub(1);
    Place { order, depth }
}

/// One node's line, then one line per try of a step tried more than once
/// and per inner step of a node that runs several (a `merge`'s `judge`,
/// `merge`, `resolve`, …): mark, kind, name, instance, status, task and
/// duration, reason; a merge that left a conflict says so on its line.
fn node_lines(node: &Value, depth: usize, clock: Clock) -> Vec<String> {
    let indent = "  ".repeat(depth.min(40));
    let status = node["status"].as_str().unwrap_or("-");
    let key = node["key"].as_str().unwrap_or_default();
    let pointer = node["pointer"].as_str().unwrap_or_default();
    let (scope, inst) = split_key(key, pointer);
    let side = pointer
        .rsplit('/')
        .next()
        .filter(|last| matches!(*last, "then" | "else" | "catch"));
    let mut line = format!("{indent}{} ", mark(status));
    if let Some(side) = side {
        let _ = write!(line, "{side}: ");
    }
    line.push_str(&clean(node["kind"].as_str().unwrap_or("-"), 20));
    if let Some(name) = node["name"].as_str() {
        let _ = write!(line, " {}", clean(name, 64));
    }
    line.push_str(&clean(inst, 40));
    let _ = write!(line, "  {}", clean(status, 20));
    let tries = items(&node["tries"]);
    let prefix = format!("{scope}{pointer}");
    let labels: Vec<Option<String>> = tries
        .iter()
        .map(|one| inner_label(one["key"].as_str().unwrap_or_default(), &prefix))
        .collect();
    let inner = labels.iter().any(Option::is_some);
    if let Some(conflict) = conflict_left(tries, &labels) {
        let _ = write!(line, ", {conflict}");
    }
    if let ([only], false) = (tries, inner) {
        let _ = write!(line, "  {}", try_text(only, clock));
        if node["reason"].is_null() && !only["reason"].is_null() {
            let _ = write!(line, "  {}", text(&only["reason"], LINE_CHARS));
        }
    }
    if !node["reason"].is_null() {
        let _ = write!(line, "  {}", text(&node["reason"], LINE_CHARS));
    }
    let mut lines = vec![line];
    if tries.len() > 1 || inner {
        for (n, (one, label)) in tries.iter().zip(&labels).enumerate() {
            let label = label.clone().unwrap_or_else(|| format!("try {}", n + 1));
            let mut line = format!("{indent}    {label}  {}", try_text(one, clock));
            if !one["reason"].is_null() {
                let _ = write!(line, "  {}", text(&one["reason"], LINE_CHARS));
            }
            lines.push(line);
        }
    }
    lines
}

/// The label of an inner step's try: the segment its key adds under the
/// node's (`judge`, `merge`, `resolve`, `merge-2`, …), with `try n` for
/// its `n`th try from the second; `None` for a try of the node itself (a
/// plain step's retry).
fn inner_label(try_key: &str, node_prefix: &str) -> Option<String> {
    let rest = try_key.strip_prefix(node_prefix)?.strip_prefix('/')?;
    let end = rest.find(['/', '[', '#', '~', '>']).unwrap_or(rest.len());
    let part = &rest[..end];
    if part.is_empty() {
        return None;
    }
    let mut label = clean(part, 40);
    if let Some(n) = rest
        .rsplit_once('~')
        .and_then(|(_, n)| n.parse::<u64>().ok())
    {
        let _ = write!(label, " try {n}");
    }
    Some(label)
}

/// What a merge node's last merge step left unresolved: its output's
/// `conflict` when no resolver step came after it, as `conflict in <files>
/// (branch <b>; work branch <w>)`.
fn conflict_left(tries: &[Value], labels: &[Option<String>]) -> Option<String> {
    let (at, merge) = tries.iter().enumerate().rev().find(|(n, _)| {
        labels[*n].as_deref().is_some_and(|label| {
            let part = label.split(' ').next().unwrap_or_default();
            part == "merge" || part.starts_with("merge-")
        })
    })?;
    let conflict = &merge["output"]["conflict"];
    if !conflict.is_object() {
        return None;
    }
    let resolved_after = labels[at + 1..]
        .iter()
        .flatten()
        .any(|label| label.starts_with("resolve"));
    if resolved_after {
        return None;
    }
    let files: Vec<&str> = items(&conflict["files"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut named = files
        .iter()
        .take(CONFLICT_FILES)
        .map(|file| clean(file, 120))
        .collect::<Vec<_>>()
        .join(", ");
    if files.len() > CONFLICT_FILES {
        let _ = write!(named, " and {} more", files.len() - CONFLICT_FILES);
    }
    if named.is_empty() {
        named = "-".to_owned();
    }
    let mut out = format!("conflict in {named}");
    let branch = conflict["branch"].as_str().map(|b| clean(b, 120));
    let work = conflict["work_branch"].as_str().map(|b| clean(b, 120));
    match (branch, work) {
        (Some(b), Some(w)) => {
            let _ = write!(out, " (branch {b}; work branch {w})");
        }
        (Some(b), None) => {
            let _ = write!(out, " (branch {b})");
        }
        (None, Some(w)) => {
            let _ = write!(out, " (work branch {w})");
        }
        (None, None) => {}
    }
    Some(out)
}

/// A try's task (short id) and how long it took, or has taken so far; a
/// try its run's end left open took until that end.
fn try_text(one: &Value, clock: Clock) -> String {
    let task = one["task_id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map_or_else(|| "-".to_owned(), short_id);
    let ended = match (&one["ended_ms"], clock.run_ended_ms) {
        (Value::Null, Some(run_end)) => Value::from(run_end),
        (ended, _) => ended.clone(),
    };
    format!(
        "task {task}  {}",
        took(&one["started_ms"], &ended, ended.is_null(), clock.now_ms)
    )
}

#[cfg(test)]
#[path = "flow_view_tests.rs"]
mod tests;
