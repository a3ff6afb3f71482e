//! The admin token: a 256-bit session secret (`sws-…`) in a 0600 file. The
//! daemon keeps only its SHA-256 digest; `swarmd admin-token` prints it.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use swarmd_engine::auth::SessionSecret;

use super::keys::{tighten_secret_file, warn_if_shared};
use super::{SecretSource, StateDir, StateError};

/// Reads the admin token from `source`, creating a fresh one (0600) when a
/// writable source does not exist yet. Surrounding whitespace is ignored.
///
/// # Errors
/// `ReadAdminToken`/`WriteAdminToken` on I/O failure, `BadAdminToken` when
/// the file does not hold an `sws-` secret.
pub fn load_or_create_admin_secret(source: &SecretSource) -> Result<SessionSecret, StateError> {
    let Some(path) = source.path() else {
        return Err(StateError::InDatabase);
    };
    match read_admin_secret(path) {
        Err(StateError::ReadAdminToken { source: error, .. })
            if error.kind() == io::ErrorKind::NotFound
                && !matches!(source, SecretSource::Credential(_)) =>
        {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            if let (SecretSource::StateDir(_), Some(parent)) = (source, parent) {
                StateDir::prepare(parent)?;
            }
            create(path)
        }
        Ok(secret) => {
            if let SecretSource::StateDir(_) = source {
                tighten_secret_file(path);
            }
            warn_if_shared(path);
            Ok(secret)
        }
        Err(error) => Err(error),
    }
}

/// Reads an existing admin token; never creates one.
///
/// # Errors
/// `ReadAdminToken` when the file cannot be read, `BadAdminToken` when it does
/// not hold an `sws-` secret.
pub fn read_admin_secret(path: &Path) -> Result<SessionSecret, StateError> {
    let text = std::fs::read_to_string(path).map_err(|source| StateError::ReadAdminToken {
        path: path.to_owned(),
        source,
    })?;
    SessionSecret::parse(text.trim()).map_err(|_| StateError::BadAdminToken {
        path: path.to_owned(),
    })
}

/// Writes a fresh secret to a new 0600 file. If another process created the
/// file first, that file's token is used.
fn create(path: &Path) -> Result<SessionSecret, StateError> {
    let secret = SessionSecret::generate();
    let write_error = |source| StateError::WriteAdminToken {
        path: path.to_owned(),
        source,
    };
    let mut file = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            return read_admin_secret(path);
        }
        Err(error) => return Err(write_error(error)),
    };
    file.write_all(format!("{}\n", secret.expose()).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(write_error)?;
    Ok(secret)
}
