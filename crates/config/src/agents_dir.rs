//! `[agents_dir]`: agents written as files, one agent per file.
//!
//! Each `*.toml` file is one agent of any kind, named by its file name
//! without `.toml`: the keys of an `[agents.NAME]` table, with the same
//! defaults (docs/configuration.md, Agent files).
//!
//! Each `*.md` file in the directory is one operator agent: YAML front matter
//! between `---` lines (`name`, `description`, `model`, `tools`,
//! `worker_binding`, `operator_role`, `input_schema`, `expose_as_tool`,
//! `tool_timeout_secs`, `worktree`, and `color`, which
//! Claude Code's agent files carry and swarmd ignores), then a Markdown body
//! that is the SubAgent's system prompt. With `kind: remote` the file is a
//! remote agent instead: it takes `stdin`, `stream`, `timeout_secs` and
//! `max_output_bytes` besides the keys of every kind, and no body. Other files and subdirectories are ignored; a
//! malformed `.md` file refuses the whole configuration, naming the file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::agent::{
    Agent, AgentKind, AgentOrigin, DEFAULT_MAX_OUTPUT_BYTES, OperatorAgent, RemoteAgent, StdinMode,
    StreamMode, WorkerBinding,
};
use super::error::ConfigError;
use super::worktree::WorktreeConfig;

/// `[agents_dir]`: where agent files are read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentsDirConfig {
    /// Directory of `*.toml` and `*.md` agent files; relative paths resolve against the
    /// working directory.
    pub path: PathBuf,
}

impl Default for AgentsDirConfig {
    fn default() -> Self {
        AgentsDirConfig {
            path: PathBuf::from("agents/"),
        }
    }
}

/// The YAML front matter of an agent file. Unknown keys are refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    tools: Option<Tools>,
    #[serde(default)]
    worker_binding: Option<WorkerBinding>,
    #[serde(default)]
    operator_role: Option<String>,
    #[serde(default)]
    input_schema: Option<serde_json::Value>,
    #[serde(default)]
    expose_as_tool: bool,
    #[serde(default)]
    tool_timeout_secs: Option<u64>,
    /// `{repo, base, keep}`: each attempt's SubAgent works in a worktree.
    #[serde(default)]
    worktree: Option<WorktreeConfig>,
    /// Claude Code's display color; accepted so its agent files load as is.
    #[serde(default, rename = "color")]
    _color: Option<String>,
    /// `operator` (the default) or `remote`.
    #[serde(default)]
    kind: FileKind,
    #[serde(default)]
    stdin: Option<StdinMode>,
    #[serde(default)]
    stream: Option<StreamMode>,
    #[serde(default)]
    timeout_secs: Option<u64>,
    #[serde(default)]
    max_output_bytes: Option<u64>,
}

/// The kinds an agent file can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FileKind {
    #[default]
    Operator,
    Remote,
}

impl FrontMatter {
    /// The first key set here that `kind` does not take.
    fn foreign_key(&self) -> Option<&'static str> {
        let operator_only = [
            ("model", self.model.is_some()),
            ("tools", self.tools.is_some()),
            ("worker_binding", self.worker_binding.is_some()),
            ("operator_role", self.operator_role.is_some()),
            ("worktree", self.worktree.is_some()),
        ];
        let remote_only = [
            ("stdin", self.stdin.is_some()),
            ("stream", self.stream.is_some()),
            ("timeout_secs", self.timeout_secs.is_some()),
            ("max_output_bytes", self.max_output_bytes.is_some()),
        ];
        let foreign: &[(&str, bool)] = match self.kind {
            FileKind::Operator => &remote_only,
            FileKind::Remote => &operator_only,
        };
        foreign.iter().find(|(_, set)| *set).map(|(key, _)| *key)
    }
}

/// `tools: [Read, Grep]` or `tools: Read, Grep`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Tools {
    List(Vec<String>),
    Line(String),
}

impl Tools {
    fn into_vec(self) -> Vec<String> {
        match self {
            Tools::List(tools) => tools,
            Tools::Line(line) => line
                .split(',')
                .map(str::trim)
                .filter(|tool| !tool.is_empty())
                .map(str::to_owned)
                .collect(),
        }
    }
}

/// Reads every `*.toml` and `*.md` file of `dir`, in file name order.
///
/// # Errors
/// `Unreadable` if the directory cannot be listed; `AgentFile` naming the
/// first file that cannot be read or parsed.
pub fn load_agents_dir(dir: &Path) -> Result<Vec<(String, Agent)>, ConfigError> {
    let unreadable = |source| ConfigError::Unreadable {
        key: "agents_dir.path".to_owned(),
        path: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let path = entry.map_err(unreadable)?.path();
        if path
            .extension()
            .is_some_and(|ext| ext == "md" || ext == "toml")
            && path.is_file()
        {
            files.push(path);
        }
    }
    files.sort();
    files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).map_err(|error| ConfigError::AgentFile {
                path: path.clone(),
                reason: error.to_string(),
            })?;
            if path.extension().is_some_and(|ext| ext == "toml") {
                parse_toml_agent_file(path, &text)
            } else {
                parse_agent_file(path, &text)
            }
        })
        .collect()
}

/// Parses one `*.toml` agent file: the keys of `[agents.NAME]`, named by the
/// file name without `.toml`.
///
/// # Errors
/// `AgentFile` naming `path` (and the line) when a key is unknown, of the
/// wrong type or not for the agent's kind, or the file name is not UTF-8.
pub fn parse_toml_agent_file(path: &Path, text: &str) -> Result<(String, Agent), ConfigError> {
    let refuse = |reason: String| ConfigError::AgentFile {
        path: path.to_owned(),
        reason,
    };
    let name = path
        .file_stem()
        .and_then(|stem| stem.to_str())
        .ok_or_else(|| refuse("the file name (the agent's name) is not UTF-8".to_owned()))?;
    let mut agent: Agent = toml::from_str(text).map_err(|error| {
        let line = error
            .span()
            .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
        let at = line
            .map(|line| format!("line {line}: "))
            .unwrap_or_default();
        refuse(format!("{at}{}", error.message().replace('\n', " ")))
    })?;
    agent.origin = AgentOrigin::AgentFile(path.to_owned());
    Ok((name.to_owned(), agent))
}

/// Parses one agent file into its name and an operator agent.
///
/// # Errors
/// `AgentFile` naming `path` when the front matter is missing or malformed.
pub fn parse_agent_file(path: &Path, text: &str) -> Result<(String, Agent), ConfigError> {
    let refuse = |reason: String| ConfigError::AgentFile {
        path: path.to_owned(),
        reason,
    };
    let (yaml, body) = split_front_matter(text)
        .ok_or_else(|| refuse("expected YAML front matter between `---` lines".to_owned()))?;
    // The leading newline makes YAML error line numbers match the file's.
    let front: FrontMatter = serde_norway::from_str(&format!("\n{yaml}"))
        .map_err(|error| refuse(format!("front matter: {error}")))?;
    if let Some(key) = front.foreign_key() {
        let kind = match front.kind {
            FileKind::Operator => "operator",
            FileKind::Remote => "remote",
        };
        return Err(refuse(format!(
            "key `{key}` is not valid for an agent of kind {kind}"
        )));
    }
    if front.kind == FileKind::Remote {
        if !body.trim().is_empty() {
            return Err(refuse(
                "a remote agent's file has no body: its pool's command does the work".to_owned(),
            ));
        }
        let agent = Agent {
            layers: Vec::new(),
            concurrency: None,
            allow_subtasks: false,
            description: front.description,
            input_schema: front.input_schema,
            expose_as_tool: front.expose_as_tool,
            tool_timeout_secs: front.tool_timeout_secs,
            enabled: true,
            kind: AgentKind::Remote(RemoteAgent {
                stdin: front.stdin.unwrap_or_default(),
                stream: front.stream.unwrap_or_default(),
                timeout_secs: front.timeout_secs,
                max_output_bytes: front.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES),
            }),
            origin: AgentOrigin::AgentFile(path.to_owned()),
        };
        return Ok((front.name, agent));
    }
    let tools = front.tools.map(Tools::into_vec).unwrap_or_default();
    let worker_binding = match front.worker_binding {
        Some(mut binding) => {
            if binding.tools.is_empty() {
                binding.tools = tools;
            }
            binding
        }
        None => WorkerBinding {
            subagent_type: front.name.clone(),
            tools,
        },
    };
    let body = body.trim();
    let agent = Agent {
        layers: Vec::new(),
        concurrency: None,
        allow_subtasks: false,
        description: front.description,
        input_schema: front.input_schema,
        expose_as_tool: front.expose_as_tool,
        tool_timeout_secs: front.tool_timeout_secs,
        enabled: true,
        kind: AgentKind::Operator(OperatorAgent {
            operator_role: front.operator_role,
            worker_binding: Some(worker_binding),
            system_prompt: (!body.is_empty()).then(|| body.to_owned()),
            system_prompt_file: None,
            model: front.model,
            worktree: front.worktree,
        }),
        origin: AgentOrigin::AgentFile(path.to_owned()),
    };
    Ok((front.name, agent))
}

/// Splits `---\n<yaml>\n---\n<body>` into its YAML and body.
fn split_front_matter(text: &str) -> Option<(&str, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const REVIEWER: &str = "---\nname: reviewer\ndescription: Reviews diffs\nmodel: opus\n\
                            tools: Read, Grep\n---\n\nYou review code.\n";

    #[test]
    fn front_matter_and_body_make_an_operator_agent() {
        let (name, agent) = parse_agent_file(Path::new("reviewer.md"), REVIEWER).unwrap();
        assert_eq!(name, "reviewer");
        assert_eq!(agent.description.as_deref(), Some("Reviews diffs"));
        assert_eq!(
            agent.origin,
            AgentOrigin::AgentFile(PathBuf::from("reviewer.md"))
        );
        let AgentKind::Operator(operator) = agent.kind else {
            panic!("expected an operator agent");
        };
        assert_eq!(operator.operator_role, None, "any MainAI session");
        assert_eq!(operator.system_prompt.as_deref(), Some("You review code."));
        assert_eq!(operator.model.as_deref(), Some("opus"));
        assert_eq!(
            operator.worker_binding,
            Some(WorkerBinding {
                subagent_type: "reviewer".into(),
                tools: vec!["Read".into(), "Grep".into()],
            })
        );
    }

    #[test]
    fn explicit_worker_binding_and_tool_list_are_kept() {
        let text = "---\nname: fixer\ntools: [Edit]\noperator_role: senior-ai\n\
                    worker_binding: {subagent_type: general-purpose}\n---\nFix it.";
        let (_, agent) = parse_agent_file(Path::new("fixer.md"), text).unwrap();
        let AgentKind::Operator(operator) = agent.kind else {
            panic!("expected an operator agent");
        };
        assert_eq!(operator.operator_role.as_deref(), Some("senior-ai"));
        let binding = operator.worker_binding.unwrap();
        assert_eq!(binding.subagent_type, "general-purpose");
        assert_eq!(binding.tools, ["Edit"]);
    }

    #[test]
    fn front_matter_worktree_gives_the_agent_a_worktree() {
        let text = "---\nname: coder\nworktree: {repo: /srv/app, keep: on_failure}\n---\nCode.\n";
        let (_, agent) = parse_agent_file(Path::new("coder.md"), text).unwrap();
        let AgentKind::Operator(operator) = agent.kind else {
            panic!("operator expected");
        };
        let worktree = operator.worktree.expect("a worktree");
        assert_eq!(worktree.repo, PathBuf::from("/srv/app"));
        assert_eq!(worktree.base, "HEAD");
        assert_eq!(worktree.keep, super::super::KeepWorktree::OnFailure);
        let text = "---\nname: coder\nworktree: {repo: /srv/app, kep: always}\n---\n";
        let error = parse_agent_file(Path::new("coder.md"), text).unwrap_err();
        assert!(error.to_string().contains("unknown field `kep`"), "{error}");
    }

    #[test]
    fn kind_remote_makes_a_remote_agent_and_refuses_operator_keys() {
        let text = "---\nname: builder\nkind: remote\nstream: codex\ntimeout_secs: 60\n---\n";
        let (name, agent) = parse_agent_file(Path::new("builder.md"), text).unwrap();
        assert_eq!(name, "builder");
        let AgentKind::Remote(remote) = agent.kind else {
            panic!("{agent:?}");
        };
        assert_eq!(remote.stream, StreamMode::Codex);
        assert_eq!(remote.timeout_secs, Some(60));

        let refused = [
            ("---\nname: b\nkind: remote\nmodel: m\n---\n", "key `model`"),
            ("---\nname: b\nkind: remote\n---\nprompt", "no body"),
            ("---\nname: b\nstream: ndjson\n---\n", "kind operator"),
        ];
        for (text, expected) in refused {
            let error = parse_agent_file(Path::new("b.md"), text).unwrap_err();
            assert!(error.to_string().contains(expected), "{error}");
        }
    }

    #[test]
    fn malformed_files_are_refused_with_their_name() {
        let cases = [
            ("no-front.md", "just text"),
            ("unclosed.md", "---\nname: x\n"),
            ("no-name.md", "---\ndescription: y\n---\nbody"),
            ("unknown-key.md", "---\nname: x\ncolour: red\n---\nbody"),
            ("bad-yaml.md", "---\nname: [x\n---\nbody"),
        ];
        for (file, text) in cases {
            let error = parse_agent_file(Path::new(file), text).unwrap_err();
            let message = error.to_string();
            assert!(message.contains(file), "{message}");
            assert!(matches!(error, ConfigError::AgentFile { .. }), "{message}");
        }
    }

    #[test]
    fn directory_listing_reads_only_markdown_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.md"), "---\nname: bee\n---\nB").unwrap();
        std::fs::write(dir.path().join("a.md"), "---\nname: ant\n---\nA").unwrap();
        std::fs::write(dir.path().join("run.sh"), "#!/bin/sh\n").unwrap();
        let names: Vec<_> = load_agents_dir(dir.path())
            .unwrap()
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(names, ["ant", "bee"]);
    }
}
