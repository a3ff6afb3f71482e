//! The names a run's stdin and stream modes have outside the daemon: in the
//! pool routes' bodies (docs/protocol.md, Worker pools), which the daemon
//! writes from an agent's modes and a pool reads back into them.

use super::{CliFormat, StdinMode, StreamMode};

/// The name of a stdin mode: `prompt` or `none`.
pub fn stdin_name(stdin: StdinMode) -> &'static str {
    match stdin {
        StdinMode::Prompt => "prompt",
        StdinMode::None => "none",
    }
}

/// The stdin mode `name` names, if any.
pub fn parse_stdin(name: &str) -> Option<StdinMode> {
    match name {
        "prompt" => Some(StdinMode::Prompt),
        "none" => Some(StdinMode::None),
        _ => None,
    }
}

/// The name of a stream mode: `none`, `ndjson` or a CLI's name.
pub fn stream_name(stream: StreamMode) -> &'static str {
    match stream {
        StreamMode::None => "none",
        StreamMode::Ndjson => "ndjson",
        StreamMode::Cli(cli) => cli.name(),
    }
}

/// The stream mode `name` names, if any.
pub fn parse_stream(name: &str) -> Option<StreamMode> {
    [
        StreamMode::None,
        StreamMode::Ndjson,
        StreamMode::Cli(CliFormat::Claude),
        StreamMode::Cli(CliFormat::Codex),
        StreamMode::Cli(CliFormat::Gemini),
    ]
    .into_iter()
    .find(|mode| stream_name(*mode) == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_modes_round_trip_through_their_wire_names() {
        for name in ["none", "ndjson", "claude", "codex", "gemini"] {
            assert_eq!(parse_stream(name).map(stream_name), Some(name));
        }
        for name in ["prompt", "none"] {
            assert_eq!(parse_stdin(name).map(stdin_name), Some(name));
        }
        assert_eq!(parse_stream("aider"), None);
    }
}
