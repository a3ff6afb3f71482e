//! The signing keyring on disk: load or create it at startup, rotate it for
//! `swarmd keys rotate`. File format and atomic 0600 writes are the engine's
//! (`Keyring::save`).

use std::fs::Permissions;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use swarmd_engine::auth::Keyring;

use super::{SecretSource, StateDir, StateError};

/// Loads the keyring from a file `source`, creating it (0600) when a writable
/// source does not exist yet (the database's is `database::Secrets`). A state-directory keyring that others can read is set
/// back to 0600; other sources are only warned about.
///
/// # Errors
/// `Keyring` when the file cannot be read, parsed or created.
pub fn load_keyring(source: &SecretSource) -> Result<Keyring, StateError> {
    let keyring = match source {
        SecretSource::Credential(path) => Keyring::load(path)?,
        SecretSource::ConfigFile(path) => Keyring::load_or_create(path)?,
        SecretSource::StateDir(path) => {
            ensure_parent(path)?;
            let keyring = Keyring::load_or_create(path)?;
            tighten_secret_file(path);
            keyring
        }
        SecretSource::Database => return Err(StateError::InDatabase),
    };
    if let Some(path) = source.path() {
        warn_if_shared(path);
    }
    Ok(keyring)
}

/// Adds a fresh current key to the keyring at `source` and saves it (0600).
/// A missing file is created with one fresh key instead. Returns the new
/// current key id.
///
/// A running daemon keeps verifying with the keyring it loaded; it picks up
/// the new key when restarted. The database's keyring rotates through
/// `database::Secrets`.
///
/// # Errors
/// `ReadOnlyCredential` for a systemd credential; `Keyring` when the file
/// cannot be read, parsed or written.
pub fn rotate_keys(source: &SecretSource) -> Result<String, StateError> {
    let path = match source {
        SecretSource::Credential(path) => {
            return Err(StateError::ReadOnlyCredential { path: path.clone() });
        }
        SecretSource::ConfigFile(path) => path,
        SecretSource::StateDir(path) => {
            ensure_parent(path)?;
            path
        }
        SecretSource::Database => return Err(StateError::InDatabase),
    };
    if !path.exists() {
        let keyring = Keyring::load_or_create(path)?;
        return Ok(keyring.current_kid().to_owned());
    }
    let mut keyring = Keyring::load(path)?;
    let kid = keyring.rotate().to_owned();
    keyring.save(path)?;
    Ok(kid)
}

/// Creates the state directory that holds `path`.
fn ensure_parent(path: &Path) -> Result<(), StateError> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => StateDir::prepare(parent).map(drop),
        _ => Ok(()),
    }
}

/// Sets a file swarmd owns back to 0600 if anyone else may read it.
pub(super) fn tighten_secret_file(path: &Path) {
    let Ok(metadata) = std::fs::metadata(path) else {
        return;
    };
    if metadata.permissions().mode() & 0o077 != 0 {
        match std::fs::set_permissions(path, Permissions::from_mode(0o600)) {
            Ok(()) => {
                tracing::warn!(path = %path.display(), "secret file was readable by others; set to 0600")
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "secret file is readable by others")
            }
        }
    }
}

/// Warns when every user may read a secret file swarmd does not own (a
/// configured keys or admin-token file), which it leaves as it is.
pub(super) fn warn_if_shared(path: &Path) {
    let mode = std::fs::metadata(path).map(|metadata| metadata.permissions().mode());
    if mode.is_ok_and(|mode| mode & 0o007 != 0) {
        tracing::warn!(path = %path.display(), "secret file is readable by every user");
    }
}
