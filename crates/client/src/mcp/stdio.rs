//! The relay's stdio, between the stdio client and rmcp: every line the
//! client sends is checked before rmcp reads it, so none is dropped
//! silently. A line that is not JSON, or is nested too deep for rmcp to
//! read, is answered here with a JSON-RPC parse error (`-32700`) carrying
//! the request's id when it can be read (else `null`); the depth refusal
//! says what the daemon says of a body nested deeper than 64 levels. All
//! that reaches stdout passes through one writer, a line at a time.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The buffer between this filter and rmcp, each way.
const PIPE_BYTES: usize = 64 * 1024;

/// The deepest nesting the daemon accepts in a request; rmcp's JSON reader
/// stops at 128 levels, so a line deeper than that is refused here in the
/// daemon's words.
const DAEMON_DEPTH: usize = 64;

/// The stdio the relay serves on: the reader and writer rmcp uses, and
/// the task that writes stdout (it ends once rmcp's writer is dropped and
/// all is written).
pub(super) fn transport() -> (DuplexStream, DuplexStream, JoinHandle<()>) {
    filtered(tokio::io::stdin(), tokio::io::stdout())
}

/// `transport` over any input and output.
pub(super) fn filtered<I, O>(input: I, output: O) -> (DuplexStream, DuplexStream, JoinHandle<()>)
where
    I: AsyncRead + Unpin + Send + 'static,
    O: AsyncWrite + Unpin + Send + 'static,
{
    let (to_rmcp, rmcp_reads) = tokio::io::duplex(PIPE_BYTES);
    let (rmcp_writes, from_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let (answers, answered) = mpsc::unbounded_channel();
    tokio::spawn(read_input(input, to_rmcp, answers));
    let writer = tokio::spawn(write_output(from_rmcp, answered, output));
    (rmcp_reads, rmcp_writes, writer)
}

/// Passes each line of `input` that rmcp can read on to it; answers the
/// others on `answers`. Ends at the end of `input`, closing rmcp's input.
async fn read_input<I: AsyncRead + Unpin>(
    input: I,
    mut to_rmcp: DuplexStream,
    answers: mpsc::UnboundedSender<String>,
) {
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "stdin failed");
                break;
            }
        }
        match refusal(&line) {
            None => {
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                if to_rmcp.write_all(&line).await.is_err() {
                    break;
                }
            }
            Some(answer) => {
                tracing::warn!("answered a stdio line rmcp cannot read with a parse error");
                if answers.send(answer.to_string()).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to_rmcp.shutdown().await;
}

/// Writes rmcp's output and the filter's answers to `output`, a whole line
/// at a time, until rmcp's writer is gone.
async fn write_output<O: AsyncWrite + Unpin>(
    from_rmcp: DuplexStream,
    mut answered: mpsc::UnboundedReceiver<String>,
    mut output: O,
) {
    let mut from_rmcp = BufReader::new(from_rmcp);
    // What rmcp has written of its next line; a read cut short by an
    // answer keeps its bytes here.
    let mut pending = Vec::new();
    let mut answers_open = true;
    loop {
        let line = tokio::select! {
            read = from_rmcp.read_until(b'\n', &mut pending) => match read {
                Ok(n) if n > 0 && pending.ends_with(b"\n") => std::mem::take(&mut pending),
                Ok(n) if n > 0 => continue,
                _ => break,
            },
            answer = answered.recv(), if answers_open => match answer {
                Some(answer) => format!("{answer}\n").into_bytes(),
                None => {
                    answers_open = false;
                    continue;
                }
            },
        };
        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
    // Answers sent before rmcp's output ended still go out.
    let _ = output.write_all(&pending).await;
    while let Ok(answer) = answered.try_recv() {
        let _ = output.write_all(format!("{answer}\n").as_bytes()).await;
    }
    let _ = output.flush().await;
}

/// The JSON-RPC error answering a line rmcp cannot read; none for a line
/// it can (or a blank one, which it skips).
fn refusal(line: &[u8]) -> Option<Value> {
    let text = line.trim_ascii();
    if text.is_empty() {
        return None;
    }
    // rmcp reads a line into values as deep as the line: what is read
    // here into one is what rmcp can read.
    let error = serde_json::from_slice::<Value>(text).err()?;
    let message = if error.to_string().contains("recursion limit") {
        format!("the body is refused: JSON nested deeper than {DAEMON_DEPTH} levels")
    } else {
        format!("the line is not JSON: {error}")
    };
    Some(json!({
        "jsonrpc": "2.0",
        "id": top_level_id(text),
        "error": {"code": -32700, "message": message, "data": {"code": "bad_request"}},
    }))
}

/// The `id` member of the top-level object of `text`, when it is a string
/// or a number; `null` otherwise.
fn top_level_id(text: &[u8]) -> Value {
    let (mut depth, mut in_string, mut escaped) = (0_usize, false, false);
    let mut key_start = None;
    let mut last_string = None;
    for (at, &byte) in text.iter().enumerate() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => {
                    in_string = false;
                    if depth == 1 {
                        last_string = key_start.take().map(|start| (start, at));
                    }
                }
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => {
                in_string = true;
                key_start = Some(at + 1);
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b':' if depth == 1 => {
                if let Some((start, end)) = last_string.take()
                    && &text[start..end] == b"id"
                {
                    return scalar_after(&text[at + 1..]);
                }
            }
            b',' => last_string = None,
            _ => {}
        }
    }
    Value::Null
}

/// The string or number `text` starts with (after blanks); `null` else.
fn scalar_after(text: &[u8]) -> Value {
    let mut values = serde_json::Deserializer::from_slice(text.trim_ascii_start()).into_iter();
    match values.next() {
        Some(Ok(value @ (Value::String(_) | Value::Number(_)))) => value,
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    fn nested(levels: usize) -> String {
        let flow = format!("{}1{}", "{\"a\":".repeat(levels), "}".repeat(levels));
        format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"lint_flow","arguments":{{"flow":{flow}}}}},"id":2}}"#
        )
    }

    #[test]
    fn a_line_too_deep_or_not_json_is_refused_with_its_id() {
        assert_eq!(
            refusal(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            None
        );
        assert_eq!(refusal(b"  \n"), None);
        // The daemon refuses what is deeper than 64 and rmcp can read.
        assert_eq!(refusal(nested(100).as_bytes()), None);
        let deep = refusal(nested(130).as_bytes()).unwrap();
        assert_eq!(deep["id"], 2, "{deep}");
        assert_eq!(deep["error"]["code"], -32700);
        let message = deep["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("nested deeper than 64 levels"),
            "{message}"
        );
        let broken = refusal(br#"{"id":"x-1","method":"ping" oops"#).unwrap();
        assert_eq!(broken["id"], "x-1", "{broken}");
        assert!(
            broken["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not JSON")
        );
        let anonymous = refusal(b"hello").unwrap();
        assert_eq!(anonymous["id"], Value::Null);
    }

    #[test]
    fn only_the_top_level_id_is_read() {
        let inner = br#"{"params":{"id":5,"s":"\"id\":6"},"id":7}"#;
        assert_eq!(top_level_id(inner), json!(7));
        assert_eq!(top_level_id(br#"{"id":{"no":1}}"#), Value::Null);
        assert_eq!(top_level_id(br#"{"name":"id","x":1}"#), Value::Null);
    }

    #[tokio::test]
    async fn refused_lines_are_answered_and_good_ones_reach_rmcp() {
        let (client, relay_in) = tokio::io::duplex(1 << 20);
        let (relay_out, mut seen) = tokio::io::duplex(1 << 20);
        let (mut rmcp_reads, mut rmcp_writes, writer) = filtered(relay_in, relay_out);
        let (_, mut client) = tokio::io::split(client);
        let input = format!("{}\nnot json\n{{\"id\":3}}\n", nested(130));
        client.write_all(input.as_bytes()).await.unwrap();
        client.shutdown().await.unwrap();
        let mut passed = String::new();
        rmcp_reads.read_to_string(&mut passed).await.unwrap();
        assert_eq!(passed, "{\"id\":3}\n");
        rmcp_writes
            .write_all(b"{\"id\":3,\"result\":{}}\n")
            .await
            .unwrap();
        drop(rmcp_writes);
        writer.await.unwrap();
        let mut out = String::new();
        seen.read_to_string(&mut out).await.unwrap();
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(
            lines
                .iter()
                .any(|l| l["id"] == 2 && l["error"]["code"] == -32700)
        );
        assert!(
            lines
                .iter()
                .any(|l| l["id"].is_null() && l["error"]["code"] == -32700)
        );
        assert!(
            lines
                .iter()
                .any(|l| l["id"] == 3 && l["result"].is_object())
        );
    }
}
