//! `StateLock`: the one `swarmd serve` that uses a state directory holds
//! an exclusive `flock` on `<state_dir>/swarmd.lock` for as long as it
//! runs, so a second daemon on the same directory refuses to start instead
//! of recovering (and killing) the first one's running work.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::{StateDir, StateError};

/// The lock file's name in the state directory.
pub const LOCK_FILE: &str = "swarmd.lock";
/// How long `serve` waits for a previous daemon that is still exiting
/// (killed, or at the end of its drain) to let the lock go.
pub const LOCK_PATIENCE: Duration = Duration::from_secs(3);
/// How often it tries again meanwhile.
const LOCK_RETRY: Duration = Duration::from_millis(50);
/// The most of the lock file read for the holder's pid.
const MAX_PID_BYTES: u64 = 32;

/// The state directory's lock, released when this value is dropped or the
/// process ends (a kill -9 included: the kernel drops the `flock`).
#[derive(Debug)]
pub struct StateLock {
    _file: Flock<File>,
}

impl StateDir {
    /// Takes the state directory's lock, trying again for up to
    /// [`LOCK_PATIENCE`] while another process holds it, and writes this
    /// process's pid into the file (for the message a second daemon
    /// prints). The file is opened close-on-exec, so no child holds it.
    ///
    /// # Errors
    /// `InUse` with the holder's pid when the lock is still held after the
    /// wait; `Lock` when the file cannot be opened or locked.
    pub async fn lock(&self) -> Result<StateLock, StateError> {
        let path = self.root().join(LOCK_FILE);
        let deadline = tokio::time::Instant::now() + LOCK_PATIENCE;
        loop {
            match try_lock(&path)? {
                Ok(lock) => return Ok(lock),
                Err(pid) if tokio::time::Instant::now() >= deadline => {
                    return Err(StateError::InUse {
                        path: self.root().to_owned(),
                        pid,
                    });
                }
                Err(_) => tokio::time::sleep(LOCK_RETRY).await,
            }
        }
    }
}

/// One try: the lock, or (when another process holds it) the pid it wrote.
fn try_lock(path: &PathBuf) -> Result<Result<StateLock, Option<u32>>, StateError> {
    let io_error = |source| StateError::Lock {
        path: path.clone(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(io_error)?;
    let holder = read_pid(&mut file);
    let mut locked = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => locked,
        Err((_, Errno::EWOULDBLOCK)) => return Ok(Err(holder)),
        Err((_, errno)) => return Err(io_error(errno.into())),
    };
    let pid = std::process::id().to_string();
    locked.set_len(0).map_err(io_error)?;
    locked.rewind().map_err(io_error)?;
    locked.write_all(pid.as_bytes()).map_err(io_error)?;
    Ok(Ok(StateLock { _file: locked }))
}

/// The pid a holder wrote, when the file holds one.
fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    Read::by_ref(file)
        .take(MAX_PID_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_second_lock_waits_then_names_the_holder() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::prepare(tmp.path()).unwrap();
        let first = dir.lock().await.unwrap();
        let written = std::fs::read_to_string(tmp.path().join(LOCK_FILE)).unwrap();
        assert_eq!(written, std::process::id().to_string());
        match dir.lock().await {
            Err(StateError::InUse { path, pid }) => {
                assert_eq!(path, tmp.path());
                assert_eq!(pid, Some(std::process::id()));
            }
            other => panic!("a second lock was not refused: {other:?}"),
        }
        drop(first);
        let again = dir.lock().await.unwrap();
        drop(again);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_let_go_during_the_wait_is_taken() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::prepare(tmp.path()).unwrap();
        let first = dir.lock().await.unwrap();
        let release = tokio::spawn(async move {
            tokio::time::sleep(LOCK_PATIENCE / 2).await;
            drop(first);
        });
        dir.lock().await.unwrap();
        release.await.unwrap();
    }
}
