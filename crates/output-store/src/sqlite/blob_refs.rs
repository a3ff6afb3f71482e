//! The mark phase of the blob sweep on SQLite: every blob the `outputs`
//! table references, read in key-ordered pages.

use std::collections::HashSet;

use rusqlite::{Connection, params};

use super::SqliteDb;
use crate::StoreError;
use crate::sweep::{REFERENCE_MARK, referenced_blob};

/// Rows per read. Each page is its own short read transaction, so a sweep
/// of a large table never pins the WAL (a checkpoint cannot pass an open
/// reader) nor holds a reader for long.
const PAGE_ROWS: i64 = 4096;

/// The key of the last row a page read: the next page starts after it.
type Cursor = (Vec<u8>, i64, i64);

/// The names (SHA-256 hex) of the blobs that rows of `outputs` reference.
///
/// Rows appended behind the cursor while the scan runs are missed; the sweep
/// is safe regardless, because their blobs were claimed after its cutoff.
pub(super) async fn referenced_blobs(db: &SqliteDb) -> Result<HashSet<String>, StoreError> {
    let mut referenced = HashSet::new();
    let mut cursor: Cursor = (Vec::new(), 0, 0);
    loop {
        let after = cursor.clone();
        let (names, last) = db.read(move |conn| page(conn, &after)).await?;
        referenced.extend(names);
        match last {
            Some(last) => cursor = last,
            None => return Ok(referenced),
        }
    }
}

/// One page: the blobs its rows reference, and its last key (`None` at the end).
fn page(conn: &Connection, after: &Cursor) -> Result<(Vec<String>, Option<Cursor>), StoreError> {
    // Only rows whose text carries the mark are returned whole; the others
    // cost their key alone.
    let mut stmt = conn.prepare_cached(
        "SELECT task, attempt, seq, CASE WHEN instr(event, ?4) > 0 THEN event END
         FROM outputs WHERE (task, attempt, seq) > (?1, ?2, ?3)
         ORDER BY task, attempt, seq LIMIT ?5",
    )?;
    let mut rows = stmt.query(params![
        after.0,
        after.1,
        after.2,
        REFERENCE_MARK,
        PAGE_ROWS
    ])?;
    let mut names = Vec::new();
    let mut last = None;
    let mut count = 0;
    while let Some(row) = rows.next()? {
        count += 1;
        if let Some(json) = row
            .get_ref(3)?
            .as_str_or_null()
            .map_err(rusqlite::Error::from)?
        {
            let event = serde_json::from_str(json)?;
            if let Some(name) = referenced_blob(&event) {
                names.push(name.to_owned());
            }
        }
        last = Some((row.get(0)?, row.get(1)?, row.get(2)?));
    }
    Ok((names, if count < PAGE_ROWS { None } else { last }))
}
