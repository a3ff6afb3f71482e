//! Blob spill: inline values too large for a row move to content-addressed files under `blobs/`.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{ContentRef, OutputEvent, StoreError};

/// Prefix of blob files still being written; leftovers of a crash are removed at open.
const TEMP_PREFIX: &str = ".tmp-";

/// How a stored reference names a blob: this prefix, then its SHA-256 in hex.
pub(crate) const BLOB_PATH_PREFIX: &str = "blobs/";

/// An event ready for storage: its stored form and that form's JSON text.
#[derive(Debug)]
pub struct EncodedEvent {
    pub event: OutputEvent,
    pub json: String,
}

/// Writes spilled values to `<dir>/<sha256 hex>` and rewrites events to point at them.
///
/// The directory is expected to be `<state_dir>/blobs`: stored references are
/// `blobs/<sha256>`, relative to the state directory. Blobs are shared by every
/// record with the same bytes; the sweep (see `sweep`) deletes the ones no
/// record references any more.
///
/// Claiming a blob (reusing a file that is there, or renaming a new one into
/// place) sets its mtime to now, under the lock the sweep holds while it
/// deletes: a blob claimed since the sweep's cutoff is never deleted, so a
/// record that is about to reference it finds it there.
#[derive(Debug, Clone)]
pub struct BlobSpill {
    pub(crate) dir: PathBuf,
    inline_max_bytes: usize,
    claims: Arc<Mutex<()>>,
}

impl BlobSpill {
    /// Creates the blob directory and removes temporary files a crash left behind.
    pub fn open(dir: PathBuf, inline_max_bytes: usize) -> Result<BlobSpill, StoreError> {
        fs::create_dir_all(&dir)?;
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                fs::remove_file(entry.path())?;
            }
        }
        Ok(BlobSpill {
            dir,
            inline_max_bytes,
            claims: Arc::default(),
        })
    }

    /// Held while a blob is claimed or deleted.
    pub(crate) fn lock_claims(&self) -> MutexGuard<'_, ()> {
        self.claims.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serializes `events`, spilling oversized inline values to blob files first.
    ///
    /// The JSON is produced on the calling task so the single writer thread
    /// only binds text. File work (hashing, fsync) runs on the blocking pool,
    /// and only for events whose whole JSON exceeds the limit: a value can only
    /// be over the limit if its event is.
    pub async fn encode(&self, events: Vec<OutputEvent>) -> Result<Vec<EncodedEvent>, StoreError> {
        let (encoded, oversized) = encode_events(events, self.inline_max_bytes)?;
        if !oversized {
            return Ok(encoded);
        }
        let spill = self.clone();
        tokio::task::spawn_blocking(move || spill.spill_all(encoded))
            .await
            .map_err(|_| StoreError::Panicked)?
    }

    /// The bytes of blob `sha256`, `None` when there is no such blob (or the
    /// name is not a blob's).
    pub async fn read(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        if !crate::is_blob_name(sha256) {
            return Ok(None);
        }
        match tokio::fs::read(self.dir.join(sha256)).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    fn spill_all(&self, mut encoded: Vec<EncodedEvent>) -> Result<Vec<EncodedEvent>, StoreError> {
        for value in spill_values(&mut encoded, self.inline_max_bytes)? {
            self.write_blob(&value)?;
        }
        Ok(encoded)
    }

    /// Makes `value` durable at `<dir>/<sha256>`.
    ///
    /// Write to a unique temp file, fsync, rename, fsync the directory: the
    /// final name only ever holds complete content, so an existing file with
    /// the same hash is reused (and its mtime renewed, see the type). The
    /// directory fsync runs in that case too, as a rename another writer made
    /// may not be durable yet.
    fn write_blob(&self, value: &SpilledValue) -> Result<(), StoreError> {
        let target = self.dir.join(&value.sha256);
        let size = value.bytes.len() as u64;
        let reused = {
            let _claims = self.lock_claims();
            reuse(&target, size)
        };
        if !reused {
            let temp = self.dir.join(format!(
                "{TEMP_PREFIX}{}-{}",
                value.sha256,
                Uuid::new_v4().simple()
            ));
            let placed = write_synced(&temp, &value.bytes).and_then(|()| {
                let _claims = self.lock_claims();
                fs::rename(&temp, &target)
            });
            if let Err(error) = placed {
                // Best effort: the temp file is garbage either way and removed at next open.
                let _ = fs::remove_file(&temp);
                return Err(error.into());
            }
        }
        File::open(&self.dir)?.sync_all()?;
        Ok(())
    }
}

/// An inline value taken out of its event, to be stored as a blob under
/// its name (the SHA-256 of `bytes`, in hex) before any row naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpilledValue {
    pub sha256: String,
    pub bytes: Vec<u8>,
}

/// The name of the blob holding `bytes`: their SHA-256 in lowercase hex.
pub fn blob_name(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Serializes `events`; the flag says whether any event's JSON exceeds
/// `inline_max_bytes` (only such an event can hold a value to spill).
pub fn encode_events(
    events: Vec<OutputEvent>,
    inline_max_bytes: usize,
) -> Result<(Vec<EncodedEvent>, bool), StoreError> {
    let mut encoded = Vec::with_capacity(events.len());
    let mut oversized = false;
    for event in events {
        let json = serde_json::to_string(&event)?;
        oversized |= json.len() > inline_max_bytes;
        encoded.push(EncodedEvent { event, json });
    }
    Ok((encoded, oversized))
}

/// Replaces every inline value over `inline_max_bytes` by a `file_ref` to
/// `blobs/<sha256>` (re-encoding its event) and returns the values to store
/// under those names. Hashes: run it off the async executor for big values.
pub fn spill_values(
    encoded: &mut [EncodedEvent],
    inline_max_bytes: usize,
) -> Result<Vec<SpilledValue>, StoreError> {
    let mut spilled = Vec::new();
    for item in encoded
        .iter_mut()
        .filter(|item| item.json.len() > inline_max_bytes)
    {
        let Some(content) = item.event.content_mut() else {
            continue;
        };
        let ContentRef::Inline { value } = content else {
            continue;
        };
        let bytes = serde_json::to_vec(value)?;
        if bytes.len() <= inline_max_bytes {
            continue;
        }
        let sha256 = blob_name(&bytes);
        *content = ContentRef::FileRef {
            path: format!("{BLOB_PATH_PREFIX}{sha256}"),
            mime: Some("application/json".to_owned()),
            size: bytes.len() as u64,
            sha256: sha256.clone(),
        };
        item.json = serde_json::to_string(&item.event)?;
        spilled.push(SpilledValue { sha256, bytes });
    }
    Ok(spilled)
}

/// Whether a complete blob is at `target`; if so, its mtime becomes now. A
/// blob whose mtime cannot be renewed is written again instead.
fn reuse(target: &Path, size: u64) -> bool {
    let present = fs::metadata(target).is_ok_and(|meta| meta.len() == size);
    present
        && File::options()
            .write(true)
            .open(target)
            .and_then(|file| file.set_modified(SystemTime::now()))
            .is_ok()
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hex_is_lowercase_and_complete() {
        assert_eq!(hex(&[0x00, 0xab, 0x0f, 0xf0]), "00ab0ff0");
    }

    #[tokio::test]
    async fn small_events_stay_inline_and_keep_their_json() {
        let dir = tempfile::tempdir().unwrap();
        let spill = BlobSpill::open(dir.path().join("blobs"), 64).unwrap();
        let event = OutputEvent::inline_final(json!("small"), true);
        let encoded = spill.encode(vec![event.clone()]).await.unwrap();
        assert_eq!(encoded[0].event, event);
        assert_eq!(encoded[0].json, serde_json::to_string(&event).unwrap());
        assert_eq!(fs::read_dir(dir.path().join("blobs")).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn a_large_event_with_a_small_value_stays_inline() {
        let dir = tempfile::tempdir().unwrap();
        let spill = BlobSpill::open(dir.path().join("blobs"), 64).unwrap();
        let event = OutputEvent::Artifact {
            name: "n".repeat(200),
            content: ContentRef::Inline { value: json!(1) },
        };
        let encoded = spill.encode(vec![event.clone()]).await.unwrap();
        assert_eq!(encoded[0].event, event);
    }

    #[tokio::test]
    async fn a_spilled_value_reads_back_by_its_name_only() {
        let dir = tempfile::tempdir().unwrap();
        let spill = BlobSpill::open(dir.path().join("blobs"), 16).unwrap();
        let value = json!("y".repeat(100));
        let stored = spill
            .encode(vec![OutputEvent::inline_final(value.clone(), true)])
            .await
            .unwrap();
        let Some(ContentRef::FileRef { sha256, .. }) = stored[0].event.content() else {
            panic!("not spilled: {:?}", stored[0].event);
        };
        let bytes = spill.read(sha256).await.unwrap().unwrap();
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
            value
        );
        assert_eq!(spill.read(&"0".repeat(64)).await.unwrap(), None);
        assert_eq!(spill.read("../blobs").await.unwrap(), None);
    }

    #[test]
    fn open_removes_stale_temp_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = dir.path().join("blobs");
        fs::create_dir_all(&blobs).unwrap();
        fs::write(blobs.join(".tmp-abc-1"), b"partial").unwrap();
        fs::write(blobs.join("abc"), b"kept").unwrap();
        BlobSpill::open(blobs.clone(), 64).unwrap();
        let names: Vec<_> = fs::read_dir(&blobs)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["abc"]);
    }
}
