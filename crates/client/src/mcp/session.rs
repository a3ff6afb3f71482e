//! The operator session `swarmd mcp` acts as: resumed from its state file
//! when that session is still live with the roles and kind asked for, else
//! logged in anew (`POST /v1/operators`) with the credential, which only
//! authorizes the login; left (`DELETE /v1/operators/{sid}`) on exit unless
//! kept. A credential that is itself a session's token is that session,
//! used as is and never left. When the daemon refuses the session's token
//! later (it was deleted, or the daemon's store forgot it), `Relogin` logs
//! in a new one with the same roles, kind and description in its place.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Client, RequestBuilder, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use swarmd_types::session::SessionKind;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::ProxyError;
use super::state_file::{Saved, StateFile};

/// Time to connect to the daemon, and to get an answer to one call.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A credential; `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Secret(String);

impl Secret {
    pub(super) fn new(value: &str) -> Secret {
        Secret(value.trim().to_owned())
    }

    pub(super) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The session asked for by the flags.
#[derive(Debug, Clone)]
pub(super) struct Wanted {
    pub(super) roles: Vec<String>,
    pub(super) kind: SessionKind,
    pub(super) description: Option<String>,
}

/// What the relay acts as.
#[derive(Debug)]
pub(super) enum Seat {
    /// A session this relay logged in or resumed; it leaves it on exit
    /// unless `keep`. `file` is `None` when another relay holds the file.
    Own {
        sid: String,
        token: Secret,
        file: Option<StateFile>,
        keep: bool,
    },
    /// The credential as given: `--no-login`, or a session's own token.
    Given(Secret),
}

impl Seat {
    /// The bearer of the relay's `/mcp` requests.
    pub(super) fn bearer(&self) -> &Secret {
        match self {
            Seat::Own { token, .. } | Seat::Given(token) => token,
        }
    }

    /// The session's sid, when the relay knows it (its own session).
    pub(super) fn sid(&self) -> Option<&str> {
        match self {
            Seat::Own { sid, .. } => Some(sid),
            Seat::Given(_) => None,
        }
    }
}

/// The seat, shared by the upstream keeper (which may replace the session
/// through `Relogin`) and the exit (which leaves the session held then).
pub(super) type SharedSeat = Arc<Mutex<Seat>>;

/// What logs the relay in anew when the daemon refuses its session's
/// token: the credential and the session asked for at start, and the seat
/// the new session replaces.
#[derive(Debug, Clone)]
pub(super) struct Relogin {
    operators: Operators,
    credential: Option<Secret>,
    wanted: Wanted,
    seat: SharedSeat,
}

impl Relogin {
    /// Logs in with `credential` as `wanted` in place of `seat`'s session;
    /// only for a `Seat::Own`, whose credential authorizes a login.
    pub(super) fn new(
        operators: &Operators,
        credential: Option<Secret>,
        wanted: Wanted,
        seat: &SharedSeat,
    ) -> Relogin {
        Relogin {
            operators: operators.clone(),
            credential,
            wanted,
            seat: seat.clone(),
        }
    }

    /// Logs in a new session in place of the refused one, records it in
    /// the state file the seat holds, and answers its token; none once the
    /// relay is stopping (`stop`), so a session is never logged in after
    /// the exit left the seat's.
    pub(super) async fn renew(
        &self,
        stop: &CancellationToken,
    ) -> Result<Option<Secret>, ProxyError> {
        let mut seat = self.seat.lock().await;
        if stop.is_cancelled() {
            return Ok(None);
        }
        let Seat::Own {
            sid: old,
            file,
            keep,
            ..
        } = &mut *seat
        else {
            return Ok(None);
        };
        let (sid, token) = self
            .operators
            .login(self.credential.as_ref(), &self.wanted)
            .await?;
        tracing::warn!(
            old = %old,
            new = %sid,
            "the daemon no longer accepts the relay's session: logged in a new one"
        );
        let (file, keep) = (file.take(), *keep);
        *seat = self.operators.seated(sid, token.clone(), file, keep);
        Ok(Some(token))
    }
}

/// The daemon's `/v1/operators` routes, as the relay uses them.
#[derive(Debug, Clone)]
pub(super) struct Operators {
    http: Client,
    base: String,
}

/// `GET /v1/operators/{sid}` as far as resuming needs it.
#[derive(Debug, Deserialize)]
struct Summary {
    roles: Vec<String>,
    kind: SessionKind,
}

impl Operators {
    pub(super) fn new(base: &str) -> Result<Operators, ProxyError> {
        let http = Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| ProxyError::Unreachable {
                url: base.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Operators {
            http,
            base: base.trim_end_matches('/').to_owned(),
        })
    }

    pub(super) fn base(&self) -> &str {
        &self.base
    }

    /// Finds the seat: a session token as given; else the state file's
    /// session (`file` opens it) when it is live and fits `wanted`; else a
    /// new login.
    pub(super) async fn open(
        &self,
        credential: Option<&Secret>,
        wanted: &Wanted,
        file: impl FnOnce() -> Result<Option<StateFile>, ProxyError>,
        keep: bool,
    ) -> Result<Seat, ProxyError> {
        if let Some(credential) = credential
            && self.is_session_token(credential).await?
        {
            tracing::info!("the credential is a session's token: relaying as that session");
            return Ok(Seat::Given(credential.clone()));
        }
        let file = file()?;
        if let Some(saved) = file.as_ref().and_then(StateFile::read) {
            if saved.url != self.base {
                tracing::info!("the session file names another daemon URL: not resumed");
            } else if let Some((sid, token)) = self.resume(saved, wanted, file.as_ref()).await? {
                return Ok(Seat::Own {
                    sid,
                    token,
                    file,
                    keep,
                });
            }
        }
        let (sid, token) = self.login(credential, wanted).await?;
        tracing::info!(sid = %sid, roles = ?wanted.roles, "logged in an operator session");
        Ok(self.seated(sid, token, file, keep))
    }

    /// The seat of a session just logged in, recorded in `file` when there
    /// is one.
    fn seated(&self, sid: String, token: Secret, file: Option<StateFile>, keep: bool) -> Seat {
        let saved = Saved {
            url: self.base.clone(),
            sid: sid.clone(),
            token: token.expose().to_owned(),
        };
        // The session works without its file; it is only not resumable.
        let file = file.filter(|file| {
            file.write(&saved)
                .inspect_err(|error| tracing::warn!(%error, "the session will not be resumable"))
                .is_ok()
        });
        if let Some(file) = &file {
            tracing::info!(sid = %sid, file = %file.path().display(), "recorded the session");
        }
        // A session no file names could never be resumed: it is left.
        let keep = keep && file.is_some();
        Seat::Own {
            sid,
            token,
            file,
            keep,
        }
    }

    /// Whether an `sws-` credential is a session's token rather than the
    /// admin's: only a session is refused the session list (403).
    async fn is_session_token(&self, credential: &Secret) -> Result<bool, ProxyError> {
        if !credential.expose().starts_with("sws-") {
            return Ok(false);
        }
        let request = self.get("/v1/operators", credential);
        let (status, body) = self.send(request).await?;
        match status {
            StatusCode::OK => Ok(false),
            StatusCode::FORBIDDEN => Ok(true),
            _ => Err(self.refused("the credential", status, &body)),
        }
    }

    /// The saved session's sid and token if it is live and has the roles
    /// and kind asked for; a live one that does not fit is left, since a
    /// relay made it.
    async fn resume(
        &self,
        saved: Saved,
        wanted: &Wanted,
        file: Option<&StateFile>,
    ) -> Result<Option<(String, Secret)>, ProxyError> {
        let token = Secret::new(&saved.token);
        let path = format!("/v1/operators/{}", saved.sid);
        let (status, body) = self.send(self.get(&path, &token)).await?;
        match status {
            StatusCode::OK => {}
            StatusCode::UNAUTHORIZED | StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST => {
                tracing::info!(sid = %saved.sid, "the saved session is gone: logging in anew");
                return Ok(None);
            }
            _ => return Err(self.refused("the saved session's check", status, &body)),
        }
        let summary: Option<Summary> = serde_json::from_value(body).ok();
        let fits =
            summary.is_some_and(|s| same_roles(&s.roles, &wanted.roles) && s.kind == wanted.kind);
        if !fits {
            tracing::info!(sid = %saved.sid, "the saved session has other roles or kind: leaving it");
            self.delete(&saved.sid, &token).await;
            if let Some(file) = file {
                file.remove();
            }
            return Ok(None);
        }
        tracing::info!(sid = %saved.sid, "resumed the saved operator session");
        Ok(Some((saved.sid, token)))
    }

    /// `POST /v1/operators`; the credential may be none (loopback login).
    async fn login(
        &self,
        credential: Option<&Secret>,
        wanted: &Wanted,
    ) -> Result<(String, Secret), ProxyError> {
        let mut body = json!({ "roles": wanted.roles, "kind": wanted.kind });
        if let Some(description) = &wanted.description {
            body["description"] = json!(description);
        }
        let mut request = self.http.post(self.url("/v1/operators")).json(&body);
        if let Some(credential) = credential {
            request = request.bearer_auth(credential.expose());
        }
        let (status, answer) = self.send(request).await?;
        if status != StatusCode::CREATED {
            return Err(self.refused("the login", status, &answer));
        }
        let field = |name: &str| answer[name].as_str().map(str::to_owned);
        match (field("sid"), field("token")) {
            (Some(sid), Some(token)) => Ok((sid, Secret::new(&token))),
            _ => Err(ProxyError::Refused {
                url: self.base.clone(),
                what: "the login",
                message: "the answer has no sid and token".to_owned(),
            }),
        }
    }

    /// Leaves the session unless it is kept or not this relay's; the state
    /// file goes once the session is gone (it stays when the daemon cannot
    /// be told, so the next run finds the session).
    pub(super) async fn leave(&self, seat: &Seat) {
        let Seat::Own {
            sid,
            token,
            file,
            keep,
        } = seat
        else {
            return;
        };
        if *keep {
            tracing::info!(sid = %sid, "kept the operator session for the next run");
            return;
        }
        if self.delete(sid, token).await
            && let Some(file) = file
        {
            file.remove();
        }
    }

    /// `DELETE /v1/operators/{sid}` with the session's own token; whether
    /// the session is gone.
    async fn delete(&self, sid: &str, token: &Secret) -> bool {
        let request = self
            .http
            .delete(self.url(&format!("/v1/operators/{sid}")))
            .bearer_auth(token.expose());
        match request.send().await.map(|r| r.status()) {
            Ok(StatusCode::NO_CONTENT | StatusCode::UNAUTHORIZED | StatusCode::NOT_FOUND) => {
                tracing::info!(sid = %sid, "left the operator session");
                true
            }
            Ok(status) => {
                tracing::warn!(sid = %sid, %status, "the daemon did not end the session");
                false
            }
            Err(error) => {
                tracing::warn!(sid = %sid, error = %without_url(error), "cannot leave the session");
                false
            }
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn get(&self, path: &str, bearer: &Secret) -> RequestBuilder {
        self.http.get(self.url(path)).bearer_auth(bearer.expose())
    }

    /// Sends `request`; the status and the JSON body (`null` when none).
    async fn send(&self, request: RequestBuilder) -> Result<(StatusCode, Value), ProxyError> {
        let response = request.send().await.map_err(|e| ProxyError::Unreachable {
            url: self.base.clone(),
            reason: without_url(e),
        })?;
        let status = response.status();
        let body = response.json().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    fn refused(&self, what: &'static str, status: StatusCode, body: &Value) -> ProxyError {
        let message = match (body["error"].as_str(), body["code"].as_str()) {
            (Some(error), Some(code)) => format!("{error} ({code})"),
            _ => format!("HTTP {status}"),
        };
        ProxyError::Refused {
            url: self.base.clone(),
            what,
            message,
        }
    }
}

/// Role lists as sets.
fn same_roles(held: &[String], wanted: &[String]) -> bool {
    let mut held = held.to_vec();
    let mut wanted = wanted.to_vec();
    held.sort();
    held.dedup();
    wanted.sort();
    wanted.dedup();
    held == wanted
}

/// A reqwest error's message and causes without its URL (the URL is
/// already in the relay's error, and never carries a secret either way).
fn without_url(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_compare_as_sets_and_secrets_stay_out_of_debug() {
        let roles = |list: &[&str]| list.iter().map(|r| (*r).to_owned()).collect::<Vec<_>>();
        assert!(same_roles(&roles(&["b", "a"]), &roles(&["a", "b", "a"])));
        assert!(same_roles(&[], &[]));
        assert!(!same_roles(&roles(&["a"]), &roles(&["a", "b"])));
        let secret = Secret::new(" sws-abc\n");
        assert_eq!(secret.expose(), "sws-abc");
        assert!(!format!("{secret:?}").contains("abc"));
    }
}
