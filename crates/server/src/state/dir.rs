//! `StateDir`: the state directory's layout, and its creation with mode 0700.

use std::fs::{DirBuilder, Permissions};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{ADMIN_TOKEN_FILE, KEYS_FILE, StateError};

/// Spilled inline values, by SHA-256.
pub const BLOBS_DIR: &str = "blobs";
/// The SQLite store.
pub const DATABASE_FILE: &str = "swarmd.db";

/// Mode of directories swarmd creates.
const DIR_MODE: u32 = 0o700;

/// The state directory and the paths inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Creates `root` and `root/blobs` (0700, parents as needed).
    ///
    /// An existing directory keeps its mode: swarmd does not chmod a directory
    /// it may not own (an operator may point `state_dir` anywhere), it only
    /// warns when other users can enter it. The secret files inside are 0600
    /// either way.
    ///
    /// # Errors
    /// `CreateDir` naming the directory that could not be created.
    pub fn prepare(root: &Path) -> Result<StateDir, StateError> {
        let state = StateDir {
            root: root.to_owned(),
        };
        for dir in [state.root.clone(), state.blobs()] {
            create_private_dir(&dir)?;
        }
        if let Ok(metadata) = std::fs::metadata(&state.root) {
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(
                    state_dir = %state.root.display(),
                    mode = format!("{mode:o}"),
                    "state directory is accessible to other users; 0700 is expected"
                );
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
