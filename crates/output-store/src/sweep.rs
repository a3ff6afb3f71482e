//! Blob sweep: deletes spilled blob files that no stored record references.
//!
//! A blob becomes garbage when retention deletes the last record that points
//! at it, or when the append that was to reference it never committed (a
//! failed batch, a crash between spill and commit). The sweep is mark and
//! sweep with a grace period:
//!
//! 1. list the blobs last claimed before `cutoff` (older than the grace);
//! 2. collect every blob the store's records reference (the store's job);
//! 3. delete each listed blob that is not referenced, after checking, under
//!    the claims lock, that it still was not claimed since `cutoff`.
//!
//! A record's blob is claimed (mtime renewed) before the record is appended,
//! and appends commit within moments of their spill, far inside the grace, so
//! a blob that a committed or in-flight record references is never deleted.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::time::SystemTime;

use serde::Serialize;

use crate::spill::{BLOB_PATH_PREFIX, BlobSpill};
use crate::{ContentRef, OutputEvent};

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BlobSweep {
    /// Blob files deleted.
    pub removed: u64,
    /// Their total size in bytes.
    pub removed_bytes: u64,
    /// Blob files old enough to delete but still referenced.
    pub kept: u64,
}

impl BlobSpill {
    /// The names of the blobs last claimed before `cutoff`. Files that are
    /// not blobs (not named by 64 lowercase hex digits) are never listed.
    pub(crate) fn stale_blobs(&self, cutoff: SystemTime) -> io::Result<Vec<String>> {
        let mut stale = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if is_blob_name(&name) && entry.metadata()?.modified()? < cutoff {
                stale.push(name);
            }
        }
        Ok(stale)
    }

    /// Deletes every stale blob that is not in `referenced` and has not been
    /// claimed since `cutoff`.
    pub(crate) fn remove_unreferenced(
        &self,
        stale: Vec<String>,
        referenced: &HashSet<String>,
        cutoff: SystemTime,
    ) -> io::Result<BlobSweep> {
        let mut sweep = BlobSweep::default();
        for name in stale {
            if referenced.contains(&name) {
                sweep.kept += 1;
                continue;
            }
            let path = self.dir.join(&name);
            let _claims = self.lock_claims();
            let meta = match fs::metadata(&path) {
                Ok(meta) => meta,
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            if meta.modified()? >= cutoff {
                continue;
            }
            match fs::remove_file(&path) {
                Ok(()) => {
                    sweep.removed += 1;
                    sweep.removed_bytes += meta.len();
                }
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        Ok(sweep)
    }
}

/// The blob a stored event references, if any: `None` for inline content and
/// for file references outside the blob directory (a SubAgent's own files).
pub fn referenced_blob(event: &OutputEvent) -> Option<&str> {
    match event.content()? {
        ContentRef::FileRef { path, .. } => path
            .strip_prefix(BLOB_PATH_PREFIX)
            .filter(|name| is_blob_name(name)),
        ContentRef::Inline { .. } => None,
    }
}

/// A quick test on an event's stored JSON: only text containing this can
/// reference a blob, so only such rows need decoding.
pub const REFERENCE_MARK: &str = BLOB_PATH_PREFIX;

/// Whether `name` can name a blob: 64 lowercase hex digits.
pub fn is_blob_name(name: &str) -> bool {
    name.len() == 64
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl BlobSpill {
    /// One whole sweep for a store whose references `referenced` collects
    /// (the mark phase, the store's job): the stale blobs are listed first,
    /// then the referenced ones, then the stale unreferenced ones deleted.
    pub async fn sweep<F>(
        &self,
        grace: std::time::Duration,
        referenced: F,
    ) -> Result<BlobSweep, crate::StoreError>
    where
        F: Future<Output = Result<HashSet<String>, crate::StoreError>>,
    {
        let cutoff = SystemTime::now()
            .checked_sub(grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let spill = self.clone();
        let stale = tokio::task::spawn_blocking(move || spill.stale_blobs(cutoff))
            .await
            .map_err(|_| crate::StoreError::Panicked)??;
        if stale.is_empty() {
            return Ok(BlobSweep::default());
        }
        let referenced = referenced.await?;
        let spill = self.clone();
        Ok(tokio::task::spawn_blocking(move || {
            spill.remove_unreferenced(stale, &referenced, cutoff)
        })
        .await
        .map_err(|_| crate::StoreError::Panicked)??)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn blob_name(n: u8) -> String {
        format!("{n:02x}").repeat(32)
    }

    fn age(path: &std::path::Path, by: Duration) {
        let file = fs::File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - by).unwrap();
    }

    #[test]
    fn deletes_old_unreferenced_blobs_only() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = dir.path().join("blobs");
        let spill = BlobSpill::open(blobs.clone(), 64).unwrap();
        let (old_garbage, old_kept, young) = (blob_name(1), blob_name(2), blob_name(3));
        for name in [&old_garbage, &old_kept, &young] {
            fs::write(blobs.join(name), b"12345").unwrap();
        }
        fs::write(blobs.join("notes.txt"), b"not a blob").unwrap();
        for name in [&old_garbage, &old_kept] {
            age(&blobs.join(name), Duration::from_secs(7200));
        }
        age(&blobs.join("notes.txt"), Duration::from_secs(7200));
        let cutoff = SystemTime::now() - Duration::from_secs(3600);

        let stale = spill.stale_blobs(cutoff).unwrap();
        assert_eq!(stale.len(), 2);
        let referenced = HashSet::from([old_kept.clone()]);
        let sweep = spill
            .remove_unreferenced(stale, &referenced, cutoff)
            .unwrap();

        assert_eq!(
            sweep,
            BlobSweep {
                removed: 1,
                removed_bytes: 5,
                kept: 1
            }
        );
        assert!(!blobs.join(&old_garbage).exists());
        assert!(blobs.join(&old_kept).exists());
        assert!(blobs.join(&young).exists());
        assert!(blobs.join("notes.txt").exists());
    }

    #[tokio::test]
    async fn a_blob_reused_after_listing_survives_the_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let spill = BlobSpill::open(dir.path().join("blobs"), 16).unwrap();
        let value = json!("x".repeat(100));
        let event = OutputEvent::inline_final(value.clone(), true);
        let stored = spill.encode(vec![event.clone()]).await.unwrap();
        let name = referenced_blob(&stored[0].event).unwrap().to_owned();
        let path = spill.dir.join(&name);
        age(&path, Duration::from_secs(7200));
        let cutoff = SystemTime::now() - Duration::from_secs(3600);
        let stale = spill.stale_blobs(cutoff).unwrap();
        assert_eq!(stale.len(), 1);

        // A new record spills the same bytes between listing and deleting.
        let again = spill.encode(vec![event]).await.unwrap();
        assert_eq!(referenced_blob(&again[0].event), Some(name.as_str()));
        let sweep = spill
            .remove_unreferenced(stale, &HashSet::new(), cutoff)
            .unwrap();

        assert_eq!(sweep, BlobSweep::default());
        assert!(path.exists());
    }

    #[test]
    fn only_file_refs_into_the_blob_directory_are_references() {
        let file_ref = |path: String| OutputEvent::Final {
            content: ContentRef::FileRef {
                path,
                mime: None,
                size: 1,
                sha256: blob_name(7),
            },
            ok: true,
        };
        let name = blob_name(7);
        assert_eq!(
            referenced_blob(&file_ref(format!("blobs/{name}"))),
            Some(name.as_str())
        );
        assert_eq!(referenced_blob(&file_ref(format!("/tmp/{name}"))), None);
        assert_eq!(referenced_blob(&file_ref("blobs/../x".to_owned())), None);
        let inline = OutputEvent::inline_final(json!(format!("blobs/{name}")), true);
        assert_eq!(referenced_blob(&inline), None);
    }
}
