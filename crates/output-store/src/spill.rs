//! Blob spill: inline values too large for a row move to content-addressed files under `blobs/`.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{ContentRef, OutputEvent, StoreError, json_len};

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
///
/// A write that renamed a new blob into place holds it as *fresh* (a
/// [`CreatedBlob`]) until its record is queued or the write is refused:
/// refused, it deletes the blob at once ([`BlobSpill::discard`]) unless
/// another write claimed the same blob meanwhile, which takes the blob out
/// of the fresh ones for good.
#[derive(Debug, Clone)]
pub struct BlobSpill {
    pub(crate) dir: PathBuf,
    inline_max_bytes: usize,
    claims: Arc<Mutex<Claims>>,
}

/// What the claims lock guards: the fresh blobs, each with the mark of the
/// write that created it.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    last_mark: u64,
    fresh: HashMap<String, u64>,
}

impl Claims {
    /// Records `sha256` as fresh, created by the write this mark names.
    fn created(&mut self, sha256: &str) -> u64 {
        self.last_mark += 1;
        self.fresh.insert(sha256.to_owned(), self.last_mark);
        self.last_mark
    }

    /// Whether `sha256` is still fresh from the write marked `mark`; it is
    /// not fresh from then on.
    fn settle(&mut self, sha256: &str, mark: u64) -> bool {
        let mine = self.fresh.get(sha256) == Some(&mark);
        if mine {
            self.fresh.remove(sha256);
        }
        mine
    }
}

/// A blob a write created and no other write claimed since, as far as the
/// store knows: what discarding that write deletes. Dropped, it is settled:
/// the blob stays, for the records that name it or else for the sweep.
#[derive(Debug)]
pub struct CreatedBlob {
    /// The blob's name.
    pub sha256: String,
    /// What tells this write's creation from a later claim (the store's
    /// own: a counter for files, the row version for a database).
    pub mark: u64,
    fresh: Option<Arc<Mutex<Claims>>>,
}

impl CreatedBlob {
    /// A created blob whose store keeps no fresh set of its own (a
    /// database table, whose rows carry the mark).
    pub fn new(sha256: String, mark: u64) -> CreatedBlob {
        CreatedBlob {
            sha256,
            mark,
            fresh: None,
        }
    }
}

impl Drop for CreatedBlob {
    fn drop(&mut self) {
        if let Some(claims) = self.fresh.take() {
            claims
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .settle(&self.sha256, self.mark);
        }
    }
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
    pub(crate) fn lock_claims(&self) -> MutexGuard<'_, Claims> {
        self.claims.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serializes `events`, spilling oversized inline values to blob files first.
    pub async fn encode(&self, events: Vec<OutputEvent>) -> Result<Vec<EncodedEvent>, StoreError> {
        let (encoded, pending) = self.encode_pending(events).await?;
        // The write goes on: its blobs are settled as they are dropped.
        self.store(pending).await?;
        Ok(encoded)
    }

    /// Serializes `events` and takes oversized inline values out of them,
    /// writing nothing: the values come back to be stored (`store`) before
    /// any row naming them.
    ///
    /// The JSON is produced on the calling task so the single writer thread
    /// only binds text. Spilling and hashing run on the blocking pool, and
    /// only for events whose whole JSON exceeds the limit (a value can only
    /// be over the limit if its event is), before those events are encoded.
    pub async fn encode_pending(
        &self,
        events: Vec<OutputEvent>,
    ) -> Result<(Vec<EncodedEvent>, Vec<SpilledValue>), StoreError> {
        let (mut encoded, oversized) = encode_events(events, self.inline_max_bytes)?;
        if !oversized {
            return Ok((encoded, Vec::new()));
        }
        let limit = self.inline_max_bytes;
        tokio::task::spawn_blocking(move || {
            spill_values(&mut encoded, limit).map(|values| (encoded, values))
        })
        .await
        .map_err(|_| StoreError::Panicked)?
    }

    /// Makes `values` durable blobs (file work on the blocking pool);
    /// returns the ones this call created. On an error, those are deleted
    /// again.
    pub async fn store(&self, values: Vec<SpilledValue>) -> Result<Vec<CreatedBlob>, StoreError> {
        if values.is_empty() {
            return Ok(Vec::new());
        }
        let spill = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut created = Vec::new();
            for value in &values {
                match spill.write_blob(value) {
                    Ok(blob) => created.extend(blob),
                    Err(error) => {
                        spill.discard(created);
                        return Err(error);
                    }
                }
            }
            Ok(created)
        })
        .await
        .map_err(|_| StoreError::Panicked)?
    }

    /// Deletes each of `blobs` that is still fresh from the write that
    /// created it; returns how many it deleted. Blocking file work.
    pub fn discard(&self, blobs: Vec<CreatedBlob>) -> u64 {
        let mut removed = 0;
        for mut blob in blobs {
            let path = self.dir.join(&blob.sha256);
            let mut claims = self.lock_claims();
            blob.fresh = None;
            if !claims.settle(&blob.sha256, blob.mark) {
                continue;
            }
            match fs::remove_file(&path) {
                Ok(()) => removed += 1,
                // Gone already (a sweep with a tiny grace): nothing is left.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::warn!(blob = %blob.sha256, %error, "could not delete a refused write's blob; the sweep will");
                }
            }
        }
        removed
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

    /// Makes `value` durable at `<dir>/<sha256>`; the blob when this call
    /// created it.
    ///
    /// Write to a unique temp file, fsync, rename, fsync the directory: the
    /// final name only ever holds complete content, so an existing file with
    /// the same hash is reused (and its mtime renewed, see the type). The
    /// directory fsync runs in that case too, as a rename another writer made
    /// may not be durable yet. Reusing a blob, or renaming over one another
    /// writer placed meanwhile, claims it: it is no longer fresh.
    fn write_blob(&self, value: &SpilledValue) -> Result<Option<CreatedBlob>, StoreError> {
        let target = self.dir.join(&value.sha256);
        let size = value.bytes.len() as u64;
        let reused = {
            let mut claims = self.lock_claims();
            let reused = reuse(&target, size);
            if reused {
                claims.fresh.remove(&value.sha256);
            }
            reused
        };
        let mut created = None;
        if !reused {
            let temp = self.dir.join(format!(
                "{TEMP_PREFIX}{}-{}",
                value.sha256,
                Uuid::new_v4().simple()
            ));
            let placed = write_synced(&temp, &value.bytes).and_then(|()| {
                let mut claims = self.lock_claims();
                let there = fs::symlink_metadata(&target).is_ok();
                fs::rename(&temp, &target)?;
                Ok(if there {
                    claims.fresh.remove(&value.sha256);
                    None
                } else {
                    Some(claims.created(&value.sha256))
                })
            });
            match placed {
                Ok(mark) => {
                    created = mark.map(|mark| CreatedBlob {
                        sha256: value.sha256.clone(),
                        mark,
                        fresh: Some(Arc::clone(&self.claims)),
                    });
                }
                Err(error) => {
                    // Best effort: the temp file is garbage either way and removed at next open.
                    let _ = fs::remove_file(&temp);
                    return Err(error.into());
                }
            }
        }
        if let Err(error) = File::open(&self.dir).and_then(|dir| dir.sync_all()) {
            self.discard(created.into_iter().collect());
            return Err(error.into());
        }
        Ok(created)
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

/// Serializes `events`, but none past `inline_max_bytes`: an event whose
/// JSON would be longer stops being written there and is left without its
/// text (`json` empty), so a large value is never escaped into an event's
/// text only to be spilled. The flag says whether there is such an event;
/// [`spill_values`] then spills its value, or encodes it whole when its
/// value is small after all (a long artifact name).
pub fn encode_events(
    events: Vec<OutputEvent>,
    inline_max_bytes: usize,
) -> Result<(Vec<EncodedEvent>, bool), StoreError> {
    let mut encoded = Vec::with_capacity(events.len());
    let mut oversized = false;
    for event in events {
        let json = encode_within(&event, inline_max_bytes)?;
        oversized |= json.is_none();
        encoded.push(EncodedEvent {
            event,
            json: json.unwrap_or_default(),
        });
    }
    Ok((encoded, oversized))
}

/// `event`'s JSON, or `None` as soon as it passes `limit` bytes.
fn encode_within(event: &OutputEvent, limit: usize) -> Result<Option<String>, StoreError> {
    let mut out = Bounded {
        buf: Vec::with_capacity(128),
        limit,
    };
    match serde_json::to_writer(&mut out, event) {
        // serde_json writes UTF-8 only; the check keeps the buffer.
        Ok(()) => Ok(Some(
            String::from_utf8(out.buf).map_err(|e| StoreError::Io(std::io::Error::other(e)))?,
        )),
        Err(error) if error.is_io() => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// A buffer that refuses to grow past `limit` bytes.
struct Bounded {
    buf: Vec<u8>,
    limit: usize,
}

impl Write for Bounded {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + bytes.len() > self.limit {
            return Err(std::io::Error::other("past the inline limit"));
        }
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Encodes the events [`encode_events`] left without text (and any whose
/// text is over `inline_max_bytes`), spilling first: an inline value over
/// the limit is serialized once, as its blob's bytes, taken out of its event
/// and replaced by a `file_ref` to `blobs/<sha256>`, and only then is the
/// event encoded, so its text holds the reference and never the value.
/// Returns the values to store under those names. Hashes: run it off the
/// async executor for big values.
pub fn spill_values(
    encoded: &mut [EncodedEvent],
    inline_max_bytes: usize,
) -> Result<Vec<SpilledValue>, StoreError> {
    let mut spilled = Vec::new();
    for item in encoded
        .iter_mut()
        .filter(|item| item.json.is_empty() || item.json.len() > inline_max_bytes)
    {
        if let Some(content) = item.event.content_mut()
            && let ContentRef::Inline { value } = content
        {
            let mut bytes = Vec::with_capacity(json_len(value) as usize);
            serde_json::to_writer(&mut bytes, value)?;
            if bytes.len() > inline_max_bytes {
                let sha256 = blob_name(&bytes);
                // Drops the value: from here on only its blob's bytes are held.
                *content = ContentRef::FileRef {
                    path: format!("{BLOB_PATH_PREFIX}{sha256}"),
                    mime: Some("application/json".to_owned()),
                    size: bytes.len() as u64,
                    sha256: sha256.clone(),
                };
                spilled.push(SpilledValue { sha256, bytes });
            }
        }
        item.json = serde_json::to_string(&item.event)?;
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

    #[test]
    fn an_event_past_the_limit_is_encoded_only_once_its_value_is_spilled() {
        let value = json!("x".repeat(4096));
        let big = OutputEvent::Partial {
            chunk: ContentRef::Inline {
                value: value.clone(),
            },
        };
        let small = OutputEvent::inline_final(json!("s"), true);
        let (mut encoded, oversized) = encode_events(vec![big, small.clone()], 1024).unwrap();
        assert!(oversized);
        assert_eq!(encoded[0].json, "", "no text is built around the value");
        assert_eq!(encoded[1].json, serde_json::to_string(&small).unwrap());

        let spilled = spill_values(&mut encoded, 1024).unwrap();
        assert_eq!(spilled.len(), 1);
        assert_eq!(spilled[0].bytes, serde_json::to_vec(&value).unwrap());
        assert_eq!(spilled[0].bytes.capacity(), spilled[0].bytes.len());
        let text = &encoded[0].json;
        assert!(text.len() < 400 && !text.contains("xxxx"), "{text}");
        let parsed: OutputEvent = serde_json::from_str(text).unwrap();
        assert_eq!(parsed, encoded[0].event);
        assert!(matches!(
            parsed.content(),
            Some(ContentRef::FileRef { size: 4098, .. })
        ));
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

    fn value(text: &str) -> SpilledValue {
        let bytes = serde_json::to_vec(&json!(text)).unwrap();
        SpilledValue {
            sha256: blob_name(&bytes),
            bytes,
        }
    }

    #[tokio::test]
    async fn discard_deletes_a_blob_only_while_its_writer_alone_claimed_it() {
        let dir = tempfile::tempdir().unwrap();
        let spill = BlobSpill::open(dir.path().join("blobs"), 16).unwrap();
        let alone = spill.store(vec![value("alone")]).await.unwrap();
        assert_eq!(alone.len(), 1);
        assert_eq!(spill.discard(alone), 1);
        assert_eq!(spill.read(&value("alone").sha256).await.unwrap(), None);

        let first = spill.store(vec![value("shared")]).await.unwrap();
        let second = spill.store(vec![value("shared")]).await.unwrap();
        assert!(second.is_empty(), "the second write reused the blob");
        assert_eq!(spill.discard(first), 0);
        assert!(spill.read(&value("shared").sha256).await.unwrap().is_some());

        // A created blob dropped (its record queued) is settled for good.
        drop(spill.store(vec![value("kept")]).await.unwrap());
        assert!(spill.lock_claims().fresh.is_empty());
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
