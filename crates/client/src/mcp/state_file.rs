//! The relay's state file: the sid and token of the session it holds, so a
//! restarted `swarmd mcp` resumes that session. One file per daemon URL,
//! created 0600 in a 0700 directory whatever the umask, replaced atomically,
//! and locked (`flock`) by the relay that uses it, so two relays on one URL
//! never share a session.

use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use swarmd_types::ids::SessionId;

/// A state file larger than this is not ours: it is ignored.
const MAX_FILE_BYTES: u64 = 64 * 1024;
/// File names keep at most this much of the URL.
const MAX_NAME_CHARS: usize = 96;

/// What the file keeps. `Debug` hides the token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Saved {
    pub(super) url: String,
    pub(super) sid: String,
    pub(super) token: String,
}

impl fmt::Debug for Saved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Saved")
            .field("url", &self.url)
            .field("sid", &self.sid)
            .finish_non_exhaustive()
    }
}

/// The default file for `url` in the per-user state directory `dir`,
/// named after the URL.
pub(crate) fn default_path(dir: &Path, url: &str) -> PathBuf {
    dir.join(file_name(url))
}

/// `mcp-<url with every character outside [A-Za-z0-9.-] as _>.json`; the
/// file records its URL, so two URLs that map to one name never share a
/// session.
fn file_name(url: &str) -> String {
    let url = url.trim_end_matches('/');
    let url = url.split_once("://").map_or(url, |(_, rest)| rest);
    let safe: String = url
        .chars()
        .take(MAX_NAME_CHARS)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("mcp-{safe}.json")
}

/// One state file, locked by this process for as long as it lives.
#[derive(Debug)]
pub(super) struct StateFile {
    path: PathBuf,
    _lock: Flock<File>,
}

/// Why the state file could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StateFileError {
    #[error("another swarmd mcp uses {0}")]
    Busy(PathBuf),
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl StateFile {
    /// Creates the directory (0700) when missing and takes the file's lock
    /// (`<path>.lock`); `Busy` when another relay holds it.
    pub(super) fn lock(path: &Path) -> Result<StateFile, StateFileError> {
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| StateFileError::Io {
                action,
                path,
                source,
            }
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io("create the directory", dir))?;
        }
        let lock_path = with_suffix(path, ".lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io("open", &lock_path))?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
            if errno == Errno::EWOULDBLOCK {
                StateFileError::Busy(path.to_path_buf())
            } else {
                io("lock", &lock_path)(io::Error::from(errno))
            }
        })?;
        Ok(StateFile {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// What the file keeps, if it exists and parses; a malformed or
    /// oversized file reads as none (it is overwritten at the next login).
    pub(super) fn read(&self) -> Option<Saved> {
        let file = File::open(&self.path).ok()?;
        let mut text = String::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .ok()?;
        if text.len() as u64 > MAX_FILE_BYTES {
            tracing::warn!(path = %self.path.display(), "session file too large, ignored");
            return None;
        }
        match serde_json::from_str::<Saved>(&text) {
            // The sid goes into a URL path: only an id's characters.
            Ok(saved) if saved.sid.parse::<SessionId>().is_ok() => Some(saved),
            Ok(_) => {
                tracing::warn!(path = %self.path.display(), "session file names no sid, ignored");
                None
            }
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error, "session file unreadable, ignored");
                None
            }
        }
    }

    /// Replaces the file with `saved`: written 0600 beside it, synced, renamed.
    pub(super) fn write(&self, saved: &Saved) -> Result<(), StateFileError> {
        let temp = with_suffix(&self.path, ".tmp");
        let io = |action: &'static str| {
            let path = temp.clone();
            move |source| StateFileError::Io {
                action,
                path,
                source,
            }
        };
        let _ = fs::remove_file(&temp);
        let mut file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&temp)
            .map_err(io("create"))?;
        let text = serde_json::to_vec(saved).map_err(|e| io("encode")(io::Error::other(e)))?;
        file.write_all(&text)
            .and_then(|()| file.sync_all())
            .map_err(io("write"))?;
        fs::rename(&temp, &self.path).map_err(|source| StateFileError::Io {
            action: "replace",
            path: self.path.clone(),
            source,
        })
    }

    /// Removes the file (the lock file stays: removing it would race a relay
    /// that opened it).
    pub(super) fn remove(&self) {
        if let Err(error) = fs::remove_file(&self.path)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), %error, "cannot remove the session file");
        }
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn the_default_path_names_the_url_in_the_state_directory() {
        let dir = Path::new("/x/state/swarmd");
        assert_eq!(
            default_path(dir, "http://127.0.0.1:7700/"),
            PathBuf::from("/x/state/swarmd/mcp-127.0.0.1_7700.json")
        );
        assert_eq!(
            default_path(dir, "http://[::1]:80"),
            PathBuf::from("/x/state/swarmd/mcp-___1__80.json")
        );
        let long = format!("http://{}", "a".repeat(500));
        let path = default_path(dir, &long);
        assert!(path.file_name().unwrap().len() < 120, "{path:?}");
    }

    #[test]
    fn a_written_file_is_private_reads_back_and_is_locked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deep/swarmd/mcp-x.json");
        let file = StateFile::lock(&path).unwrap();
        assert!(file.read().is_none());
        let saved = Saved {
            url: "http://x".into(),
            sid: "S-7a25e64e313c4196a12f9be96ca0778a".into(),
            token: "sws-secret".into(),
        };
        file.write(&saved).unwrap();
        assert_eq!(file.read(), Some(saved.clone()));
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let parent = fs::metadata(path.parent().unwrap()).unwrap();
        assert_eq!(parent.mode() & 0o777, 0o700);
        assert!(!format!("{saved:?}").contains("secret"));
        assert!(matches!(
            StateFile::lock(&path),
            Err(StateFileError::Busy(_))
        ));
        file.remove();
        assert!(!path.exists());
        drop(file);
        assert!(StateFile::lock(&path).is_ok());
    }

    #[test]
    fn a_malformed_file_or_a_bad_sid_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mcp.json");
        fs::write(&path, "{not json").unwrap();
        assert!(StateFile::lock(&path).unwrap().read().is_none());
        let odd = r#"{"url": "http://x", "sid": "../tasks", "token": "sws-x"}"#;
        fs::write(&path, odd).unwrap();
        assert!(StateFile::lock(&path).unwrap().read().is_none());
    }
}
