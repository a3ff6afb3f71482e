//! A minimal MainAI client for the README quickstart: logs in with the admin
//! token (role name `main-ai`), opens the session's WebSocket, sends one
//! `spawn_task` with `delegate = true`, prints every frame it receives as one
//! JSON line on stdout, and when a `spawn` frame arrives prints on stderr what
//! a SubAgent needs (task id, worker handle, the two `curl` calls). It acks
//! the spawn once the task is done, deletes its session and exits 0 on
//! `task_done`.
//!
//! ```text
//! cargo run -p swarmd-server --example mainai -- \
//!     --url http://127.0.0.1:7700 --admin-token "$(cat swarmd-state/admin.token)" \
//!     [--agent coder] [--prompt "write a haiku"] [--role main-ai]
//! ```
//!
//! Server requests other than `spawn` get the simplest honest answer:
//! `hook_before` is approved, an `ask` (senior escalation) keeps the verdict
//! (`{"ok": false}`). Ctrl-C deletes the session and exits 130.

use std::process::ExitCode;

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const USAGE: &str = concat!(
    "usage: mainai [--url URL] --admin-token TOKEN [--agent NAME] [--prompt TEXT] [--role NAME]\n",
    "  --url          daemon URL (default http://127.0.0.1:7700, or $SWARMD_URL)\n",
    "  --admin-token  admin token (or $SWARMD_ADMIN_TOKEN; `swarmd admin-token` prints it)\n",
    "  --agent        SubAgent type to launch (default coder)\n",
    "  --prompt       the task's prompt (default \"write a haiku\")\n",
    "  --role         routing name to claim at login (default main-ai)",
);

/// The command line.
#[derive(Debug)]
struct Args {
    url: String,
    admin_token: String,
    agent: String,
    prompt: String,
    role: String,
}

impl Args {
    #[allow(
        clippy::disallowed_methods,
        reason = "an example client reads its own defaults from the environment"
    )]
    fn parse() -> anyhow::Result<Args> {
        let mut url = std::env::var("SWARMD_URL").ok();
        let mut admin_token = std::env::var("SWARMD_ADMIN_TOKEN").ok();
        let mut agent = None;
        let mut prompt = None;
        let mut role = None;
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let slot = match flag.as_str() {
                "--url" => &mut url,
                "--admin-token" => &mut admin_token,
                "--agent" => &mut agent,
                "--prompt" => &mut prompt,
                "--role" => &mut role,
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => bail!("unknown argument `{other}`\n{USAGE}"),
            };
            *slot = Some(
                args.next()
                    .with_context(|| format!("{flag} needs a value"))?,
            );
        }
        Ok(Args {
            url: url
                .unwrap_or_else(|| "http://127.0.0.1:7700".to_owned())
                .trim_end_matches('/')
                .to_owned(),
            admin_token: admin_token
                .with_context(|| format!("--admin-token is required\n{USAGE}"))?,
            agent: agent.unwrap_or_else(|| "coder".to_owned()),
            prompt: prompt.unwrap_or_else(|| "write a haiku".to_owned()),
            role: role.unwrap_or_else(|| "main-ai".to_owned()),
        })
    }
}

/// The session this client logged in as.
#[derive(Debug)]
struct Session {
    sid: String,
    token: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("mainai: {error:#}");
            return ExitCode::from(64);
        }
    };
    let http = reqwest::Client::new();
    let session = match login(&http, &args).await {
        Ok(session) => session,
        Err(error) => {
            eprintln!("mainai: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("# logged in as session {}", session.sid);
    let code = tokio::select! {
        run = run(&args, &session) => match run {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("mainai: {error:#}");
                ExitCode::FAILURE
            }
        },
        _ = tokio::signal::ctrl_c() => ExitCode::from(130),
    };
    // Sessions outlive their sockets (and restarts); this one is done.
    if let Err(error) = logout(&http, &args, &session).await {
        eprintln!(
            "mainai: could not delete session {}: {error:#}",
            session.sid
        );
    }
    code
}

/// `POST /v1/operators` with the admin token.
async fn login(http: &reqwest::Client, args: &Args) -> anyhow::Result<Session> {
    let response = http
        .post(format!("{}/v1/operators", args.url))
        .bearer_auth(&args.admin_token)
        .json(&json!({"roles": [args.role], "kind": "main_ai",
                      "description": "swarmd example MainAI"}))
        .send()
        .await
        .with_context(|| format!("cannot reach {}", args.url))?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status.as_u16() == 409 {
        bail!(
            "the role name `{}` is held by another live session ({body}); pick another with \
             --role, or delete that session (GET/DELETE /v1/operators with the admin token)",
            args.role
        );
    }
    if status.as_u16() != 201 {
        bail!("login refused ({status}): {body}");
    }
    let field = |key: &str| {
        body[key]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("login answer without `{key}`: {body}"))
    };
    Ok(Session {
        sid: field("sid")?,
        token: field("token")?,
    })
}

/// `DELETE /v1/operators/{sid}` with the session's own token.
async fn logout(http: &reqwest::Client, args: &Args, session: &Session) -> anyhow::Result<()> {
    let response = http
        .delete(format!("{}/v1/operators/{}", args.url, session.sid))
        .bearer_auth(&session.token)
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("{}", response.status());
    }
    Ok(())
}

/// Spawns the task and reacts to frames until its `task_done`.
async fn run(args: &Args, session: &Session) -> anyhow::Result<()> {
    let ws_base = args
        .url
        .replacen("https://", "wss://", 1)
        .replacen("http://", "ws://", 1);
    let mut request = format!("{ws_base}/v1/operators/{}/ws", session.sid).into_client_request()?;
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {}", session.token).parse()?,
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .context("WebSocket upgrade failed")?;

    let spawn_task = json!({"type": "spawn_task", "req_id": "mainai-1", "agent": args.agent,
                            "prompt": args.prompt, "delegate": true});
    ws.send(Message::text(spawn_task.to_string())).await?;

    let mut task_id: Option<String> = None;
    let mut spawn_req: Option<String> = None;
    while let Some(message) = ws.next().await {
        let text = match message? {
            Message::Text(text) => text,
            Message::Close(frame) => bail!("the server closed the socket: {frame:?}"),
            _ => continue,
        };
        println!("{text}");
        let frame: Value = serde_json::from_str(text.as_str())?;
        let req_id = frame["req_id"].clone();
        let reply = match frame["type"].as_str().unwrap_or_default() {
            "task_accepted" if frame["req_id"] == "mainai-1" => {
                task_id = frame["task_id"].as_str().map(str::to_owned);
                None
            }
            "spawn" => {
                spawn_req = frame["req_id"].as_str().map(str::to_owned);
                print_instructions(&frame);
                None
            }
            "hook_before" => Some(json!({"type": "hook_ack", "req_id": req_id, "ok": true})),
            "ask" => Some(json!({"type": "answer", "req_id": req_id, "value": {"ok": false}})),
            "task_done" if task_id.is_some() && frame["task_id"].as_str() == task_id.as_deref() => {
                if let Some(req) = spawn_req.take() {
                    let ack = json!({"type": "spawn_ack", "req_id": req});
                    ws.send(Message::text(ack.to_string())).await?;
                }
                eprintln!(
                    "# task {} finished: status {}",
                    frame["task_id"].as_str().unwrap_or_default(),
                    frame["status"]
                );
                let _ = ws.close(None).await;
                return Ok(());
            }
            _ => None,
        };
        if let Some(reply) = reply {
            ws.send(Message::text(reply.to_string())).await?;
        }
    }
    bail!("the socket ended before the task was done")
}

/// What the MainAI would hand its SubAgent, as shell commands to paste.
fn print_instructions(spawn: &Value) {
    let get = |key: &str| spawn[key].as_str().unwrap_or_default();
    let (task, handle, base) = (get("task_id"), get("worker_handle"), get("base_url"));
    eprintln!(
        "# SubAgent wanted: agent {agent}, task {task} (attempt {attempt})\n\
         #   task_id:       {task}\n\
         #   worker_handle: {handle}\n\
         #   base_url:      {base}\n\
         # Play the SubAgent from another shell:\n\
         curl -s -H 'Authorization: Bearer {handle}' '{base}/v1/worker/prompt?task_id={task}'\n\
         curl -s -H 'Authorization: Bearer {handle}' --data-binary 'your result here' \
         '{base}/v1/worker/submit?task_id={task}'",
        agent = get("agent"),
        attempt = spawn["attempt"],
    );
}
