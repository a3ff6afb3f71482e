//! What an attempt's branch and swarmd's commits on it are called
//! (docs/branches.md): `swarmd/t-<short id>-<slug>/<attempt>`, the task id's
//! last eight hex digits and a slug of its prompt's first line, and a commit
//! message whose subject is that line with the task and attempt in trailers.
//!
//! Every name made here passes `git check-ref-format`: only lowercase ASCII
//! letters, digits and single `-` inside a component, no component starting
//! with `-` or `.`, no `..`, no `.lock`, a bounded length. A task whose
//! prompt is not known to the worktrees (a caller that names none) keeps the
//! id-only name `swarmd/<task>-<attempt>`.

use super::Worktrees;

/// The longest slug of a prompt, in bytes (ASCII).
pub const MAX_SLUG: usize = 40;
/// The longest subject of a commit swarmd makes, in characters.
pub const MAX_SUBJECT: usize = 72;
/// The most tasks whose prompts the worktrees remember at once; past it
/// all are forgotten (a checkout opened then gets the id-only name).
const MAX_TITLES: usize = 4096;
/// The longest first line remembered, in characters.
const MAX_TITLE: usize = 200;
/// Digits of the task id a branch name keeps: its random tail (the head of
/// a UUIDv7 is its creation time, shared by tasks made together).
const SHORT_ID: usize = 8;

/// The branch attempt `attempt` of `task_id` runs on: readable when its
/// prompt (`title`) is known, else `swarmd/<task>-<attempt>`.
pub fn branch_name(task_id: &str, attempt: u32, title: Option<&str>) -> String {
    let Some(title) = title else {
        return format!("swarmd/{task_id}-{attempt}");
    };
    let short = short_id(task_id);
    let slug = slug(title);
    if slug.is_empty() {
        format!("swarmd/t-{short}/{attempt}")
    } else {
        format!("swarmd/t-{short}-{slug}/{attempt}")
    }
}

/// The short id a readable branch name carries: the last eight letters or
/// digits of the id, lowercased.
pub fn short_id(task_id: &str) -> String {
    let kept: Vec<char> = task_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    kept[kept.len().saturating_sub(SHORT_ID)..].iter().collect()
}

/// A prompt's first line as lowercase ASCII words joined by `-`, cut at a
/// word boundary within [`MAX_SLUG`] bytes (a first word longer than that
/// is cut in the middle). Empty when the line has no ASCII letter or digit.
pub fn slug(prompt: &str) -> String {
    let line = first_line(prompt);
    let mut slug = String::new();
    for word in line
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let word = word.to_ascii_lowercase();
        let needed = word.len() + usize::from(!slug.is_empty());
        if slug.len() + needed > MAX_SLUG {
            if slug.is_empty() {
                slug = word[..MAX_SLUG].to_owned();
            }
            break;
        }
        if !slug.is_empty() {
            slug.push('-');
        }
        slug.push_str(&word);
    }
    slug
}

/// The first non-blank line of a prompt, trimmed.
pub fn first_line(prompt: &str) -> &str {
    prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
}

/// A prompt's first line cut to [`MAX_SUBJECT`] characters (with `...` when
/// cut), control characters dropped: the subject of swarmd's commits.
pub fn subject(prompt: &str) -> String {
    let line: String = first_line(prompt)
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    if line.chars().count() <= MAX_SUBJECT {
        return line;
    }
    let mut cut: String = line.chars().take(MAX_SUBJECT - 3).collect();
    cut.truncate(cut.trim_end().len());
    cut.push_str("...");
    cut
}

/// The message of the commit swarmd makes of what the worker of attempt
/// `attempt` of `task_id` left uncommitted on `branch`: the prompt's first
/// line as its subject when known, and the task and attempt as trailers.
pub fn leftovers_message(
    task_id: &str,
    attempt: Option<u32>,
    branch: &str,
    title: Option<&str>,
) -> String {
    let subject = title
        .map(subject)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("swarmd: changes left uncommitted on {branch}"));
    let mut message =
        format!("{subject}\n\nThe changes the worker left uncommitted on {branch}.\n\n");
    message.push_str(&format!("Swarmd-Task: {task_id}\n"));
    if let Some(attempt) = attempt {
        message.push_str(&format!("Swarmd-Attempt: {attempt}\n"));
    }
    message
}

/// Whether `name` is a branch swarmd names (either form), so that a name
/// read from a record is used only when it is one: `swarmd/` then letters,
/// digits, `-` and `/`, no empty component, none starting with `-`.
pub fn is_swarmd_branch(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("swarmd/") else {
        return false;
    };
    name.len() <= 200
        && rest.split('/').all(|part| {
            !part.is_empty()
                && !part.starts_with('-')
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// The task and attempt a swarmd branch name carries: the full id of an
/// id-only name, or the short id of a readable one.
pub fn parse_branch(name: &str) -> Option<(BranchTask, u32)> {
    if !is_swarmd_branch(name) {
        return None;
    }
    let rest = name.strip_prefix("swarmd/")?;
    if let Some((head, attempt)) = rest.rsplit_once('/') {
        let attempt = attempt.parse().ok()?;
        let short = head.strip_prefix("t-")?;
        let short = short.split('-').next()?;
        return (short.len() == SHORT_ID).then(|| (BranchTask::Short(short.to_owned()), attempt));
    }
    // A full task id is `T-<hex>`: a name such as `swarmd/merge-87134415`
    // (a merge agent's branch whose short id is all digits) is no
    // attempt's.
    let (task, attempt) = rest.rsplit_once('-')?;
    if !task.starts_with("T-") {
        return None;
    }
    Some((BranchTask::Full(task.to_owned()), attempt.parse().ok()?))
}

/// Which task a branch name names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BranchTask {
    /// `swarmd/<task id>-<attempt>`.
    Full(String),
    /// `swarmd/t-<short id>…/<attempt>`: the last eight hex digits.
    Short(String),
}

impl BranchTask {
    /// Whether the task `task_id` is the one named.
    pub fn is(&self, task_id: &str) -> bool {
        match self {
            BranchTask::Full(id) => id == task_id,
            BranchTask::Short(short) => short_id(task_id) == *short,
        }
    }
}

impl Worktrees {
    /// Tells the worktrees the prompt of `task_id`, so that its attempts'
    /// branches and swarmd's commits on them are named after its first
    /// line. Called before each attempt's worktree is opened; forgotten
    /// once the checkout is released.
    pub fn name_task(&self, task_id: &str, prompt: &str) {
        let line: String = first_line(prompt).chars().take(MAX_TITLE).collect();
        let mut titles = self.titles.lock().unwrap_or_else(|e| e.into_inner());
        if titles.len() >= MAX_TITLES && !titles.contains_key(task_id) {
            titles.clear();
        }
        titles.insert(task_id.to_owned(), line);
    }

    /// The first line of `task_id`'s prompt, when told.
    pub(super) fn title_of(&self, task_id: &str) -> Option<String> {
        let titles = self.titles.lock().unwrap_or_else(|e| e.into_inner());
        titles.get(task_id).cloned()
    }

    /// Forgets the prompt of the task whose checkout `dir` was.
    pub(super) fn forget_title(&self, dir: &std::path::Path) {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        if let Some((task, _)) = name.as_deref().and_then(|n| n.rsplit_once('-')) {
            let mut titles = self.titles.lock().unwrap_or_else(|e| e.into_inner());
            titles.remove(task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_branch_carries_the_short_id_and_a_slug_of_the_first_line() {
        let id = "T-0190f2a81b2c7d3e8f90a1b2c3d4e5f6";
        assert_eq!(
            branch_name(id, 1, Some("  \nFix the login bug!\nthen more")),
            "swarmd/t-c3d4e5f6-fix-the-login-bug/1"
        );
        assert_eq!(
            branch_name(id, 2, Some("ünïcode ✓")),
            "swarmd/t-c3d4e5f6-n-code/2"
        );
        assert_eq!(branch_name(id, 3, Some("✓ ✓")), "swarmd/t-c3d4e5f6/3");
        assert_eq!(branch_name(id, 1, None), format!("swarmd/{id}-1"));
        let long = branch_name(id, 1, Some(&"word ".repeat(40)));
        let slug = long.strip_prefix("swarmd/t-c3d4e5f6-").unwrap();
        assert!(slug.len() <= MAX_SLUG + 2, "{long}");
        assert!(!slug.contains("--"), "{long}");
        let one = slug_of_one_word();
        assert_eq!(one.len(), MAX_SLUG);
    }

    fn slug_of_one_word() -> String {
        slug(&"a".repeat(100))
    }

    #[test]
    fn every_name_is_a_valid_ref() {
        for prompt in [
            "..lock", "-dash", "a.lock", "@{x}", "x//y", "~^:?*[\\", "", "   ", "a\u{0}b",
        ] {
            let name = branch_name("T-0190f2a81b2c7d3e8f90a1b2c3d4e5f6", 1, Some(prompt));
            let out = std::process::Command::new("git")
                .args(["check-ref-format", "--branch", &name])
                .output()
                .unwrap();
            assert!(out.status.success(), "{prompt:?} -> {name}");
            assert!(is_swarmd_branch(&name), "{name}");
        }
    }

    #[test]
    fn a_subject_is_the_first_line_bounded() {
        assert_eq!(subject("Fix it\nmore"), "Fix it");
        let long = subject(&"x".repeat(100));
        assert_eq!(long.chars().count(), MAX_SUBJECT);
        assert!(long.ends_with("..."));
        let message = leftovers_message("T-1", Some(2), "swarmd/t-1/2", Some("Do it\nnow"));
        assert!(message.starts_with("Do it\n\n"), "{message}");
        assert!(
            message.ends_with("Swarmd-Task: T-1\nSwarmd-Attempt: 2\n"),
            "{message}"
        );
        let bare = leftovers_message("T-1", None, "b", None);
        assert!(bare.starts_with("swarmd: changes left uncommitted on b\n"));
    }

    #[test]
    fn branch_names_are_read_back() {
        let id = "T-0190f2a81b2c7d3e8f90a1b2c3d4e5f6";
        let (task, n) = parse_branch(&branch_name(id, 3, Some("fix it"))).unwrap();
        assert!(task.is(id) && n == 3);
        let (task, n) = parse_branch(&branch_name(id, 2, None)).unwrap();
        assert_eq!((task, n), (BranchTask::Full(id.to_owned()), 2));
        assert!(parse_branch("main").is_none());
        assert!(parse_branch("swarmd/../x").is_none());
        assert!(parse_branch("swarmd/t-abc/1").is_none());
        // A merge agent's default branch whose short id is all digits.
        assert!(parse_branch("swarmd/merge-87134415").is_none());
        assert!(parse_branch("swarmd/merge-87134415-conflict").is_none());
    }
}
