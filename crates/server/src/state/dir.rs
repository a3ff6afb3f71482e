//! `StateDir`: the state directory's layout, its creation with mode 0700,
//! and the tightening of one that other users may enter.

use std::fs::{DirBuilder, Permissions};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{ADMIN_TOKEN_FILE, KEYS_FILE, LOCK_FILE, StateError};

/// Spilled inline values, by SHA-256.
pub const BLOBS_DIR: &str = "blobs";
/// The SQLite store.
pub const DATABASE_FILE: &str = "swarmd.db";

/// The state directory's other files swarmd writes (the lock, the MCP
/// sessions' owners, a cluster node's id): made private like the database.
const OTHER_FILES: [&str; 3] = [LOCK_FILE, "mcp-sessions.json", "node_id"];

/// Mode of directories swarmd creates.
const DIR_MODE: u32 = 0o700;
/// Mode of the files in them.
const FILE_MODE: u32 = 0o600;

/// The state directory and the paths inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Creates `root` and `root/blobs` (0700, parents as needed) and makes
    /// them private when they exist already: a directory other users may
    /// enter is set to 0700, and so are the database files and the other
    /// files swarmd writes in it (0600), which an older swarmd or another
    /// umask may have left open. A
    /// directory swarmd cannot make private is refused.
    ///
    /// # Errors
    /// `CreateDir` naming the directory that could not be created;
    /// `NotPrivate` for one that cannot be made private.
    pub fn prepare(root: &Path) -> Result<StateDir, StateError> {
        let state = StateDir {
            root: root.to_owned(),
        };
        for dir in [state.root.clone(), state.blobs()] {
            create_private_dir(&dir)?;
            make_private(&dir, DIR_MODE)?;
        }
        let database = ["", "-wal", "-shm"].map(|suffix| format!("{DATABASE_FILE}{suffix}"));
        for name in database.iter().map(String::as_str).chain(OTHER_FILES) {
            let file = state.root.join(name);
            if file.exists() {
                make_private(&file, FILE_MODE)?;
            }
        }
        Ok(state)
    }

    /// The layout of `root` without touching the file system.
    pub fn at(root: &Path) -> StateDir {
        StateDir {
            root: root.to_owned(),
        }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<state_dir>/blobs`.
    pub fn blobs(&self) -> PathBuf {
        self.root.join(BLOBS_DIR)
    }

    /// `<state_dir>/swarmd.db`.
    pub fn database(&self) -> PathBuf {
        self.root.join(DATABASE_FILE)
    }

    /// `<state_dir>/keys.json`.
    pub fn keys_file(&self) -> PathBuf {
        self.root.join(KEYS_FILE)
    }

    /// `<state_dir>/admin.token`.
    pub fn admin_token_file(&self) -> PathBuf {
        self.root.join(ADMIN_TOKEN_FILE)
    }
}

/// Creates `dir` with mode 0700 when missing; directories swarmd creates are
/// set to exactly 0700 whatever the umask.
fn create_private_dir(dir: &Path) -> Result<(), StateError> {
    let create_error = |source| StateError::CreateDir {
        path: dir.to_owned(),
        source,
    };
    if dir.is_dir() {
        return Ok(());
    }
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(create_error)?;
    std::fs::set_permissions(dir, Permissions::from_mode(DIR_MODE)).map_err(create_error)
}

/// Sets `path` to `mode` when other users may read, write or enter it.
fn make_private(path: &Path, mode: u32) -> Result<(), StateError> {
    let not_private = |found: u32, source| StateError::NotPrivate {
        path: path.to_owned(),
        mode: found,
        source,
    };
    let found = std::fs::metadata(path)
        .map_err(|e| not_private(0, e))?
        .permissions()
        .mode()
        & 0o777;
    if found & 0o077 == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, Permissions::from_mode(mode))
        .map_err(|e| not_private(found, e))?;
    tracing::warn!(
        path = %path.display(),
        was = format!("{found:o}"),
        now = format!("{mode:o}"),
        "state was accessible to other users; made it private"
    );
    Ok(())
}
