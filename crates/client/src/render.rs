//! The CLI's human output: tables of tasks, agents and sessions, and a task
//! as a key/value block, from the daemon's JSON answers.
//!
//! Times are relative to the caller's clock ("3m ago"), durations short
//! ("1m 05s"), ids shortened to their last 8 hex digits (the leading ones
//! are the creation time and repeat between tasks made together). Every
//! value is cleaned of control characters before it reaches the terminal:
//! a reason or description written by a worker cannot move the cursor or
//! recolour the screen. Missing values print as `-`.
//!
//! Lengths are display widths, in terminal columns (`unicode-width`, the
//! measure the tables pad by): a CJK character or an emoji takes two, a
//! combining mark none, so a cut keeps columns aligned whatever the
//! script.

use comfy_table::{Cell, Table, presets};
use serde_json::Value;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// The widest reason, description or prompt line a table cell shows, in
/// columns.
const CELL_CHARS: usize = 60;
/// Spaces between two columns.
const GUTTER: u16 = 2;

/// Text with each control character replaced by a space and each
/// invisible format character (bidi overrides and isolates, zero-width
/// marks) left out, cut to `max` columns of display width (with `…` in
/// the last one when cut): what a terminal shows of text the daemon, a
/// worker or a model wrote. A cut never parts a character: a wide one
/// that would pass `max` is left out whole, and a combining mark or
/// variation selector goes with the character before it.
pub fn clean(text: &str, max: usize) -> String {
    fit(visible(text), max).0
}

/// `text` cleaned as `clean` cleans it, uncut, when it is at most `max`
/// columns wide.
pub(crate) fn clean_within(text: &str, max: usize) -> Option<String> {
    let shown = visible(text);
    (shown.width() <= max).then_some(shown)
}

/// `text` with control characters as spaces and format characters left out.
fn visible(text: &str) -> String {
    text.chars()
        .filter(|c| !is_format(*c))
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `shown` (cleaned) cut to `max` columns, `…` taking the last; whether
/// it was cut.
///
/// It is cut between clusters: a character that takes room with the
/// zero-width ones after it. Each cluster is measured whole (an emoji
/// with its presentation selector is two columns, not one), and the sum
/// of the clusters' widths is never less than the width of the text they
/// make, so the cut text is never wider than `max`.
fn fit(shown: String, max: usize) -> (String, bool) {
    if shown.width() <= max {
        return (shown, false);
    }
    let budget = max.saturating_sub(1);
    let bounds = shown
        .char_indices()
        .filter(|&(at, c)| at > 0 && c.width() != Some(0))
        .map(|(at, _)| at)
        .chain(std::iter::once(shown.len()));
    let (mut start, mut used) = (0, 0);
    for stop in bounds {
        let width = shown[start..stop].width();
        if used + width > budget {
            break;
        }
        used += width;
        start = stop;
    }
    let mut out = shown[..start].to_owned();
    if max > 0 {
        out.push('…');
    }
    (out, true)
}

/// Text of several lines for a terminal: each line as `clean` leaves it
/// (uncut), tabs kept.
pub fn clean_lines(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            line.split('\t')
                .map(|part| clean(part, usize::MAX))
                .collect::<Vec<_>>()
                .join("\t")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `c` is an invisible character that reorders or hides what a
/// terminal shows around it: the bidirectional embeddings, overrides,
/// isolates and marks, zero-width spaces and joiners, the word joiner and
/// invisible operators, and the byte-order mark.
fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// `ms_ago` as a relative time: `just now`, `42s ago`, `3m ago`, `5h ago`,
/// `2d ago`.
pub fn ago(ms_ago: u64) -> String {
    let secs = ms_ago / 1000;
    match secs {
        0 => "just now".to_owned(),
        1..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86_400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

/// A duration in two units at most: `850ms`, `12.3s`, `4m 05s`, `2h 07m`,
/// `3d 04h`.
pub fn duration(ms: u64) -> String {
    let secs = ms / 1000;
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{}.{}s", secs, (ms % 1000) / 100),
        60_000..3_600_000 => format!("{}m {:02}s", secs / 60, secs % 60),
        3_600_000..86_400_000 => format!("{}h {:02}m", secs / 3600, (secs % 3600) / 60),
        _ => format!("{}d {:02}h", secs / 86_400, (secs % 86_400) / 3600),
    }
}

/// A cost in US dollars, `-` when none was reported.
pub fn cost(usd: Option<f64>) -> String {
    match usd {
        Some(usd) if usd > 0.0 && usd < 0.01 => format!("${usd:.4}"),
        Some(usd) if usd > 0.0 => format!("${usd:.2}"),
        _ => "-".to_owned(),
    }
}

/// A task id as the tables show it: `…` and its last 8 hex digits.
pub fn short_id(id: &str) -> String {
    let tail: String = id
        .chars()
        .rev()
        .take(8)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if tail.len() < id.len() {
        format!("…{tail}")
    } else {
        tail
    }
}

/// The current time in unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// A value for a cell or line: a string cleaned and cut, other JSON
/// compact, absent or empty as `-`.
pub(crate) fn text(value: &Value, max: usize) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(text) if text.is_empty() => "-".to_owned(),
        Value::String(text) => clean(text, max),
        other => clean(&other.to_string(), max),
    }
}

/// How long ago the unix-ms `value` was, or `-`.
pub(crate) fn since(value: &Value, now_ms: u64) -> String {
    value
        .as_u64()
        .map_or_else(|| "-".to_owned(), |ms| ago(now_ms.saturating_sub(ms)))
}

/// How long a task or attempt took: to its finish, or so far while it runs.
fn took(start: &Value, finish: &Value, running: bool, now_ms: u64) -> String {
    match (start.as_u64(), finish.as_u64()) {
        (Some(start), Some(finish)) => duration(finish.saturating_sub(start)),
        (Some(start), None) if running => duration(now_ms.saturating_sub(start)),
        _ => "-".to_owned(),
    }
}

/// A borderless table: a header of capitals, columns two spaces apart, no
/// trailing spaces.
pub(crate) fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut table = Table::new();
    table.load_style(presets::NOTHING);
    table.set_header(header.iter().map(|title| Cell::new(*title)));
    for row in rows {
        table.add_row(row);
    }
    let last = header.len().saturating_sub(1);
    for (index, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, if index == last { 0 } else { GUTTER }));
    }
    table
        .lines()
        .map(|line| line.trim_end().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `GET /v1/tasks`'s page as a table: id, status, agent, age, duration,
/// cost, reason; full ids with `wide`.
pub fn task_table(page: &Value, now_ms: u64, wide: bool) -> String {
    let empty = Vec::new();
    let tasks = page["tasks"].as_array().unwrap_or(&empty);
    let rows = tasks
        .iter()
        .map(|task| {
            let id = task["id"].as_str().unwrap_or("-");
            let status = task["status"].as_str().unwrap_or("-");
            vec![
                if wide { clean(id, 40) } else { short_id(id) },
                clean(status, 20),
                text(&task["agent"], CELL_CHARS),
                since(&task["created_ms"], now_ms),
                took(
                    &task["created_ms"],
                    &task["finished_ms"],
                    status == "running",
                    now_ms,
                ),
                cost(task["usage"]["cost_usd"].as_f64()),
                text(&task["reason"], CELL_CHARS),
            ]
        })
        .collect();
    let header = ["ID", "STATUS", "AGENT", "AGE", "DURATION", "COST", "REASON"];
    table(&header, rows)
}

/// One task (`GET /v1/tasks/{id}`, a waited or finished spawn) as a
/// key/value block, then its attempts as a table.
pub fn task_block(task: &Value, now_ms: u64) -> String {
    let status = task["status"].as_str().unwrap_or("-");
    let created = &task["created_ms"];
    let usage = &task["usage"];
    let tokens = match (
        usage["input_tokens"].as_u64(),
        usage["output_tokens"].as_u64(),
    ) {
        (Some(input), Some(output)) => format!("{input} in, {output} out"),
        _ => "-".to_owned(),
    };
    let id = task.get("id").or_else(|| task.get("task_id"));
    let mut pairs = vec![
        ("id", text(id.unwrap_or(&Value::Null), 40)),
        ("status", clean(status, 20)),
        ("agent", text(&task["agent"], CELL_CHARS)),
        ("created", since(created, now_ms)),
        ("finished", since(&task["finished_ms"], now_ms)),
        (
            "duration",
            took(created, &task["finished_ms"], status == "running", now_ms),
        ),
        ("attempt", text(&task["attempt"], 10)),
        ("cost", cost(usage["cost_usd"].as_f64())),
        ("tokens", tokens),
        ("reason", text(&task["reason"], 200)),
        (
            "prompt",
            task["prompt"]
                .as_str()
                .map_or_else(|| "-".to_owned(), |prompt| first_line(prompt, CELL_CHARS)),
        ),
    ];
    for (key, field) in [
        ("parent", "parent"),
        ("session", "session"),
        ("continued from", "continued_from"),
    ] {
        if !task[field].is_null() {
            pairs.push((key, text(&task[field], 40)));
        }
    }
    if !task["result"].is_null() {
        pairs.push(("result", text(&task["result"], 200)));
    }
    let width = pairs.iter().map(|(key, _)| key.len()).max().unwrap_or(0);
    let mut block: Vec<String> = pairs
        .iter()
        .map(|(key, value)| format!("{key:width$}  {value}"))
        .collect();
    if let Some(attempts) = task["attempts"].as_array().filter(|a| !a.is_empty()) {
        block.push(String::new());
        block.push(attempt_table(attempts, status, now_ms));
    }
    block.join("\n")
}

/// A prompt's first line that is not blank, cut to `max` columns as
/// `clean` cuts it (ending in `…`), else followed by ` …` when a further
/// line is not blank: either way a cut prompt ends in `…`.
fn first_line(prompt: &str, max: usize) -> String {
    let mut lines = prompt.lines().skip_while(|line| line.trim().is_empty());
    let Some(first) = lines.next() else {
        return "-".to_owned();
    };
    let (shown, cut) = fit(visible(first), max);
    if !cut && lines.any(|line| !line.trim().is_empty()) {
        format!("{shown} …")
    } else {
        shown
    }
}

fn attempt_table(attempts: &[Value], task_status: &str, now_ms: u64) -> String {
    let rows = attempts
        .iter()
        .map(|attempt| {
            let open = attempt["outcome"].is_null();
            vec![
                text(&attempt["attempt"], 10),
                if open {
                    clean(task_status, 20)
                } else {
                    text(&attempt["outcome"], 20)
                },
                since(&attempt["started_ms"], now_ms),
                took(
                    &attempt["started_ms"],
                    &attempt["finished_ms"],
                    open && task_status == "running",
                    now_ms,
                ),
                cost(attempt["usage"]["cost_usd"].as_f64()),
                text(&attempt["reason"], CELL_CHARS),
            ]
        })
        .collect();
    let header = [
        "ATTEMPT", "OUTCOME", "STARTED", "DURATION", "COST", "REASON",
    ];
    table(&header, rows)
}

/// A spawn that did not wait (`{task_id, status}`) as a key/value block.
pub fn accepted(answer: &Value) -> String {
    format!(
        "id      {}\nstatus  {}",
        text(&answer["task_id"], 40),
        text(&answer["status"], 20)
    )
}

/// `GET /v1/agents` as a table: name, kind, description, running, queued.
pub fn agent_table(page: &Value) -> String {
    let empty = Vec::new();
    let agents = page["agents"].as_array().unwrap_or(&empty);
    let rows = agents
        .iter()
        .map(|agent| {
            let enabled = agent["enabled"].as_bool() != Some(false);
            vec![
                text(&agent["name"], CELL_CHARS),
                if enabled {
                    text(&agent["kind"], 20)
                } else {
                    format!("{} (disabled)", text(&agent["kind"], 20))
                },
                text(&agent["description"], CELL_CHARS),
                text(&agent["running"], 10),
                text(&agent["queued"], 10),
            ]
        })
        .collect();
    let header = ["NAME", "KIND", "DESCRIPTION", "RUNNING", "QUEUED"];
    table(&header, rows)
}

/// `GET /v1/status` for people: what runs where, its load, and on a
/// cluster every live node (this one marked).
pub fn status_text(status: &Value) -> String {
    let counts = &status["counts"];
    let mut lines = vec![
        format!(
            "swarmd {} at {}, up {}{}",
            text(&status["version"], 40),
            text(&status["base_url"], CELL_CHARS),
            duration(
                status["uptime_secs"]
                    .as_u64()
                    .unwrap_or(0)
                    .saturating_mul(1000)
            ),
            if status["draining"] == true {
                ", draining"
            } else {
                ""
            },
        ),
        format!(
            "store: {} ({})",
            text(&status["store"]["backend"], 20),
            text(&status["store"]["state_dir"], CELL_CHARS),
        ),
        format!(
            "tasks: {} queued, {} running, {} live; {} created since start",
            text(&counts["queued"], 20),
            text(&counts["running"], 20),
            text(&counts["live_tasks"], 20),
            text(&counts["tasks_created"], 20),
        ),
        format!(
            "sessions: {} ({} connected)",
            text(&counts["sessions"], 20),
            text(&counts["sessions_connected"], 20),
        ),
    ];
    if let Some(nodes) = status["cluster"]["nodes"].as_array() {
        let this = &status["cluster"]["node_id"];
        lines.push(format!("cluster: {} live nodes", nodes.len()));
        for node in nodes {
            let mark = if node["id"] == *this {
                " (this node)"
            } else {
                ""
            };
            lines.push(format!(
                "  {}  {}{mark}",
                text(&node["id"], 40),
                text(&node["url"], CELL_CHARS)
            ));
        }
    }
    lines.join("\n")
}

/// `GET /v1/operators` as a table: sid, kind, roles, connected, last seen,
/// description.
pub fn session_table(sessions: &Value, now_ms: u64) -> String {
    let empty = Vec::new();
    let rows = sessions
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|session| {
            let roles: Vec<String> = session["roles"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .map(|role| text(role, 40))
                .collect();
            vec![
                text(&session["sid"], 40),
                text(&session["kind"], 20),
                if roles.is_empty() {
                    "-".to_owned()
                } else {
                    roles.join(",")
                },
                match session["connected"].as_bool() {
                    Some(true) => "yes".to_owned(),
                    Some(false) => "no".to_owned(),
                    None => "-".to_owned(),
                },
                since(&session["last_seen"], now_ms),
                text(&session["description"], CELL_CHARS),
            ]
        })
        .collect();
    let header = [
        "SID",
        "KIND",
        "ROLES",
        "CONNECTED",
        "LAST SEEN",
        "DESCRIPTION",
    ];
    table(&header, rows)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn times_durations_and_costs_are_short() {
        assert_eq!(ago(400), "just now");
        assert_eq!(ago(42_000), "42s ago");
        assert_eq!(ago(3 * 60_000 + 59_000), "3m ago");
        assert_eq!(ago(5 * 3_600_000), "5h ago");
        assert_eq!(ago(2 * 86_400_000), "2d ago");
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(12_345), "12.3s");
        assert_eq!(duration(245_000), "4m 05s");
        assert_eq!(duration(2 * 3_600_000 + 7 * 60_000), "2h 07m");
        assert_eq!(duration(3 * 86_400_000 + 4 * 3_600_000), "3d 04h");
        assert_eq!(cost(None), "-");
        assert_eq!(cost(Some(0.0)), "-");
        assert_eq!(cost(Some(0.0042)), "$0.0042");
        assert_eq!(cost(Some(1.5)), "$1.50");
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        assert_eq!(clean("a\u{1b}[31mred\nline", 100), "a [31mred line");
        assert_eq!(clean("abcdef", 4), "abc…");
        // Bidi overrides and zero-width characters are left out, and do not
        // count toward the cut.
        assert_eq!(clean("x \u{202e}RTL\u{2066}\u{200b}", 100), "x RTL");
        assert_eq!(clean("\u{202e}\u{202e}abcd", 4), "abcd");
        // A diff for a terminal keeps its lines and tabs, nothing else.
        assert_eq!(
            clean_lines("+x\u{1b}]52;c;SGk=\u{7}y\n-\tz\u{202e}w"),
            "+x ]52;c;SGk= y\n-\tzw"
        );
        assert_eq!(short_id("T-0190f3c2a1b27c3d8e4f5a6b7c8d9e0f"), "…7c8d9e0f");
        assert_eq!(short_id("abc"), "abc");
    }

    /// Every cut of `text` at 0 to 24 columns: never wider than asked, a
    /// prefix of the whole (cut between clusters, so no mark is parted
    /// from its character) with `…` after it.
    fn assert_cuts_fit(text: &str) {
        let whole = clean(text, usize::MAX);
        for max in 0..25 {
            let cut = clean(text, max);
            assert!(cut.width() <= max.max(1), "{text:?} at {max}: {cut:?}");
            if whole.width() <= max {
                assert_eq!(cut, whole, "{text:?} at {max}");
                continue;
            }
            let kept = cut.strip_suffix('…').unwrap_or(&cut);
            assert!(whole.starts_with(kept), "{text:?} at {max}: {cut:?}");
            let next = whole[kept.len()..].chars().next().unwrap();
            assert_ne!(next.width(), Some(0), "{text:?} at {max}: {cut:?}");
        }
    }

    #[test]
    fn cuts_are_by_display_width_and_never_split_a_character() {
        // Wide characters take two columns: 7 of them are 14.
        assert_eq!(clean("日本語テキスト", 14), "日本語テキスト");
        assert_eq!(clean("日本語テキスト", 10), "日本語テ…");
        // A wide character that would pass the width is left out whole.
        assert_eq!(clean("日本語テキスト", 9), "日本語テ…");
        assert_eq!(clean("日本語テキスト", 8), "日本語…");
        assert_eq!(clean("ab日本", 4), "ab…");
        assert_eq!(clean("🚀🚀🚀", 5), "🚀🚀…");
        // Combining marks take none and stay with their letter.
        let marked = "e\u{301}".repeat(6);
        assert_eq!(clean(&marked, 6), marked);
        assert_eq!(clean(&marked, 4), format!("{}…", "e\u{301}".repeat(3)));
        let zalgo = format!("a{}", "\u{301}".repeat(200));
        assert_eq!(clean(&zalgo, 3), zalgo);
        // An emoji with its presentation selector is two columns, cut whole.
        assert_eq!(
            clean("\u{2764}\u{fe0f}\u{2764}\u{fe0f}x", 4),
            "\u{2764}\u{fe0f}…"
        );
        // Cleaning still comes first: format characters count for nothing.
        assert_eq!(clean("\u{202e}日本\u{200b}語", 6), "日本語");
        for text in [
            "日本語テキスト",
            "ab日本cd語",
            "🚀 launch 🛰️ orbit",
            "e\u{301}a\u{308}o\u{302}日\u{301}x",
            "\u{2764}\u{fe0f}\u{2764}\u{fe0f}\u{2764}\u{fe0f}",
            "1\u{fe0f}\u{20e3}2\u{fe0f}\u{20e3}3\u{fe0f}\u{20e3}",
            "🇯🇵🇫🇷🇧🇷🇩🇪",
            "\u{644}\u{627}\u{644}\u{627}\u{644}\u{627}",
            "한국어 텍스트 \u{1100}\u{1161}\u{11a8}",
            "plain ascii text that is long enough",
        ] {
            assert_cuts_fit(text);
        }
    }

    /// The display column each line's `needle` starts at.
    fn columns_of(table: &str, needle: &str) -> Vec<usize> {
        table
            .lines()
            .map(|line| {
                let at = line
                    .find(needle)
                    .unwrap_or_else(|| panic!("{needle}: {line}"));
                line[..at].width()
            })
            .collect()
    }

    #[test]
    fn columns_align_by_display_width() {
        let now = 1_000_000_000;
        let task = |agent: &str, reason: &str| {
            json!({"id": "T-0190f3c2a1b27c3d8e4f5a6b7c8d9e0f", "status": "failed",
                   "agent": agent, "created_ms": now - 65_000, "finished_ms": now,
                   "reason": reason})
        };
        let wide = "漢".repeat(100);
        let page = json!({"tasks": [
            task("coder", "exit 1"),
            task("日本語", "失敗しました"),
            task("🚀rocket", "e\u{301}chec"),
            task("cafe\u{301}", &wide),
        ]});
        let table = task_table(&page, now, false);
        let (header, rows) = table.split_once('\n').unwrap();
        let age = columns_of(header, "AGE ")[0];
        assert_eq!(columns_of(rows, "1m ago"), [age; 4], "{table}");
        // The last column, cut to its width with the wide text whole.
        let last = table.lines().last().unwrap();
        let reason = &last[last.find('漢').unwrap()..];
        assert_eq!(reason, format!("{}…", "漢".repeat(29)), "{table}");
        assert!(reason.width() <= CELL_CHARS, "{table}");

        let agents = json!({"agents": [
            {"name": "echo", "kind": "process", "description": "Repeats its prompt",
             "running": 0, "queued": 0},
            {"name": "jp", "kind": "process", "description": "日本語の説明です",
             "running": 0, "queued": 0},
            {"name": "mark", "kind": "process", "description": "re\u{301}sume\u{301} 🚀",
             "running": 0, "queued": 0},
            {"name": "long", "kind": "process", "description": "説".repeat(50),
             "running": 0, "queued": 0},
        ]});
        let table = agent_table(&agents);
        let header = columns_of(table.lines().next().unwrap(), "RUNNING")[0];
        for line in table.lines().skip(1) {
            // The line ends with the RUNNING and QUEUED cells, `0` each.
            let rest = line.trim_end_matches('0').trim_end();
            let before = rest.trim_end_matches('0');
            assert_eq!(before.width(), header, "{table}");
        }
        assert!(table.contains(&format!("{}…", "説".repeat(29))), "{table}");
    }

    #[test]
    fn a_prompt_shows_its_first_line_and_says_when_more_follows() {
        let prompt = |text: &str| {
            let block = task_block(&json!({"status": "pass", "prompt": text}), 0);
            let line = block.lines().find(|l| l.starts_with("prompt")).unwrap();
            line.trim_start_matches("prompt").trim_start().to_owned()
        };
        assert_eq!(prompt("fix the parser"), "fix the parser");
        assert_eq!(prompt("fix the parser\n"), "fix the parser");
        assert_eq!(
            prompt("fix the parser\n\nthen the lexer"),
            "fix the parser …"
        );
        assert_eq!(prompt("\n  \nfix the parser\r\nthen"), "fix the parser …");
        let long = "x".repeat(100);
        assert_eq!(prompt(&long), format!("{}…", "x".repeat(59)));
        assert_eq!(
            prompt(&format!("{long}\nmore")),
            format!("{}…", "x".repeat(59))
        );
        assert_eq!(prompt(" \n"), "-");
        // Cut by width: 40 wide characters are 80 columns.
        let wide = "語".repeat(40);
        assert_eq!(prompt(&wide), format!("{}…", "語".repeat(29)));
        assert_eq!(
            prompt(&format!("{}\nmore", "語".repeat(30))),
            format!("{} …", "語".repeat(30))
        );
    }

    #[test]
    fn a_task_table_has_one_aligned_row_per_task() {
        let now = 1_000_000_000;
        let page = json!({"tasks": [
            {"id": "T-0190f3c2a1b27c3d8e4f5a6b7c8d9e0f", "status": "running",
             "agent": "coder", "created_ms": now - 65_000},
            {"id": "T-0190f3c2a1b27c3d8e4f5a6b7c8d0000", "status": "failed",
             "agent": "a", "created_ms": now - 7_200_000, "finished_ms": now - 7_000_000,
             "reason": "exit\n1", "usage": {"cost_usd": 0.25}},
        ]});
        let table = task_table(&page, now, false);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(lines[0].starts_with("ID "), "{table}");
        assert!(lines[1].starts_with("…7c8d9e0f  running  coder  1m ago  1m 05s"));
        assert!(lines[2].contains("2h ago") && lines[2].contains("$0.25"));
        assert!(lines[2].ends_with("exit 1"), "{table}");
        assert_eq!(lines[1].find("running"), lines[2].find("failed"), "{table}");
        assert!(lines.iter().all(|line| !line.ends_with(' ')));
    }
}
