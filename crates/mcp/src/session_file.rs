//! MCP sessions kept across restarts (docs/mcp.md, Sessions across a
//! restart): `<state_dir>/mcp-sessions.json` records, for every session of
//! the initialize-era revisions, who opened it and the parameters of its
//! `initialize`.
//!
//! A request naming a session this daemon does not hold (it was opened
//! before a restart, or closed after five idle minutes) is let through when
//! the record names the request's credential: rmcp then replays the
//! `initialize` from the record ([`SessionStore::load`]) and serves the
//! request on the same id, so the client never sees the restart. A DELETE
//! forgets the record. The file is written whole (0600, through a temporary
//! file and a rename) when a session opens or closes, and keeps at most
//! `capacity` records, dropping the oldest.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use rmcp::model::InitializeRequestParams;
use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};
use serde::{Deserialize, Serialize};

use super::ledger::Credential;

/// The file's name in the state directory.
pub(super) const FILE_NAME: &str = "mcp-sessions.json";

/// The admin's spelling in the file; an operator is its `S-…` sid.
const ADMIN: &str = "admin";

/// The records of one daemon's MCP sessions and the file that keeps them.
#[derive(Debug)]
pub(super) struct SessionFile {
    path: PathBuf,
    capacity: usize,
    records: Mutex<Records>,
}

#[derive(Debug, Default)]
struct Records {
    saved: Saved,
    /// `initialize` parameters rmcp stored for sessions whose opener is
    /// not bound yet.
    pending: HashMap<String, InitializeRequestParams>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Saved {
    sessions: HashMap<String, Record>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    /// `admin` or the operator session's sid.
    owner: String,
    /// Milliseconds since the epoch when the session opened.
    opened_ms: u64,
    initialize: InitializeRequestParams,
}

impl SessionFile {
    /// The records of `<state_dir>/mcp-sessions.json`; a file that is
    /// absent or unreadable starts an empty table (its sessions are then
    /// unknown, as before a restart without it).
    pub(super) fn open(state_dir: &Path, capacity: usize) -> SessionFile {
        let path = state_dir.join(FILE_NAME);
        let saved = match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "the MCP session file is unreadable; starting without it");
                Saved::default()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Saved::default(),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the MCP session file; starting without it");
                Saved::default()
            }
        };
        SessionFile {
            path,
            capacity: capacity.max(1),
            records: Mutex::new(Records {
                saved,
                pending: HashMap::new(),
            }),
        }
    }

    fn records(&self) -> MutexGuard<'_, Records> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Who opened session `id`, when it is recorded.
    pub(super) fn owner(&self, id: &str) -> Option<Credential> {
        let records = self.records();
        let owner = &records.saved.sessions.get(id)?.owner;
        if owner == ADMIN {
            return Some(Credential::Admin);
        }
        owner.parse().ok().map(Credential::Operator)
    }

    /// Records session `id`, just opened by `credential`, with the
    /// `initialize` rmcp stored for it.
    pub(super) fn opened(&self, id: &str, credential: &Credential) {
        let mut records = self.records();
        let Some(initialize) = records.pending.remove(id) else {
            return;
        };
        let owner = match credential {
            Credential::Admin => ADMIN.to_owned(),
            Credential::Operator(sid) => sid.to_string(),
        };
        let opened_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let sessions = &mut records.saved.sessions;
        sessions.insert(
            id.to_owned(),
            Record {
                owner,
                opened_ms,
                initialize,
            },
        );
        while sessions.len() > self.capacity {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, record)| record.opened_ms)
                .map(|(id, _)| id.clone());
            match oldest {
                Some(oldest) => sessions.remove(&oldest),
                None => break,
            };
        }
        self.write(&records.saved);
    }

    /// Forgets session `id` (its client deleted it).
    fn forget(&self, id: &str) {
        let mut records = self.records();
        records.pending.remove(id);
        if records.saved.sessions.remove(id).is_some() {
            self.write(&records.saved);
        }
    }

    /// Writes the table; a failure is logged and the table kept in memory.
    fn write(&self, saved: &Saved) {
        if let Err(e) = write_private(&self.path, saved) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write the MCP session file; sessions opened now end with this run");
        }
    }
}

/// `saved` to `path` (0600), through a temporary file and a rename.
fn write_private(path: &Path, saved: &Saved) -> std::io::Result<()> {
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let temp = PathBuf::from(temp);
    let _ = fs::remove_file(&temp);
    let mut file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&temp)?;
    let text = serde_json::to_vec(saved).map_err(std::io::Error::other)?;
    file.write_all(&text)?;
    file.sync_all()?;
    fs::rename(&temp, path)
}

#[async_trait::async_trait]
impl SessionStore for SessionFile {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let records = self.records();
        Ok(records
            .saved
            .sessions
            .get(session_id)
            .map(|record| SessionState::new(record.initialize.clone())))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let mut records = self.records();
        // Bound what an opener that never binds could leave.
        if records.pending.len() >= self.capacity {
            records.pending.clear();
        }
        records
            .pending
            .insert(session_id.to_owned(), state.initialize_params.clone());
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.forget(session_id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ClientCapabilities, Implementation};
    use std::os::unix::fs::PermissionsExt;
    use swarmd_engine::ids::SessionId;

    fn params() -> InitializeRequestParams {
        InitializeRequestParams::new(
            ClientCapabilities::default(),
            Implementation::new("client", "1"),
        )
    }

    async fn open_one(file: &SessionFile, id: &str, credential: &Credential) {
        let state = SessionState::new(params());
        file.store(id, &state).await.unwrap();
        file.opened(id, credential);
    }

    #[tokio::test]
    async fn records_survive_a_reopen_with_their_owner_until_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let sid = SessionId::new();
        let file = SessionFile::open(dir.path(), 8);
        open_one(&file, "a", &Credential::Admin).await;
        open_one(&file, "b", &Credential::Operator(sid)).await;
        let mode = fs::metadata(dir.path().join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        let again = SessionFile::open(dir.path(), 8);
        assert_eq!(again.owner("a"), Some(Credential::Admin));
        assert_eq!(again.owner("b"), Some(Credential::Operator(sid)));
        assert!(again.load("b").await.unwrap().is_some());
        assert_eq!(again.owner("c"), None);
        again.delete("a").await.unwrap();
        let third = SessionFile::open(dir.path(), 8);
        assert_eq!(third.owner("a"), None);
        assert!(third.owner("b").is_some());
    }

    #[tokio::test]
    async fn the_oldest_records_go_past_the_capacity_and_a_bad_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let file = SessionFile::open(dir.path(), 2);
        for id in ["a", "b", "c"] {
            open_one(&file, id, &Credential::Admin).await;
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(file.owner("a"), None);
        assert!(file.owner("b").is_some() && file.owner("c").is_some());
        // A session rmcp stored but nobody bound is not recorded.
        file.opened("d", &Credential::Admin);
        assert_eq!(file.owner("d"), None);

        fs::write(dir.path().join(FILE_NAME), b"{not json").unwrap();
        let bad = SessionFile::open(dir.path(), 2);
        assert_eq!(bad.owner("b"), None);
    }
}
