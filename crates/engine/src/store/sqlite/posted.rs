//! Reads of the posted-Final fingerprints (`posted_finals`), which let a
//! worker's retried result replay its first answer for as long as the task
//! is retained.

use rusqlite::{Connection, OptionalExtension, params};
use swarmd_output_store::StoreError;

use super::write::task_key;
use crate::ids::TaskId;
use crate::store::PostedFinal;

pub(super) fn posted_final(
    conn: &Connection,
    task: TaskId,
    attempt: u32,
) -> Result<Option<PostedFinal>, StoreError> {
    let found: Option<(Option<String>, [u8; 32])> = conn
        .prepare_cached("SELECT key, digest FROM posted_finals WHERE task = ?1 AND attempt = ?2")?
        .query_row(params![task_key(task), attempt], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    Ok(found.map(|(idempotency_key, body_digest)| PostedFinal {
        idempotency_key,
        body_digest,
    }))
}
