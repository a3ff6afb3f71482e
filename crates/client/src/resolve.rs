//! Ids as people type them: a whole `T-…` or `R-…` id, or the tail the
//! tables print (`…7c8d9e0f`), found among the newest tasks or runs the
//! caller may see.

use serde_json::Value;
use swarmd_types::ids::{RunId, TaskId};

use super::{ApiClient, ClientError, RunQuery, TaskQuery};

/// How many of the newest tasks or runs a tail is looked up among; an
/// older one is named by its whole id.
pub const SCAN_LIMIT: usize = 2_000;

/// The page size of the lookup (within both listings' bounds).
const PAGE: u32 = 500;

/// The fewest hex digits a tail may have, so that it names one of a few
/// thousand ids with little chance of a second match.
const MIN_TAIL: usize = 4;

/// The hex digits of a tail as the tables print it: `…` (or `...`) then
/// 4 to 31 hex digits, either case. `None` for anything else.
pub fn tail_of(given: &str) -> Option<String> {
    let digits = given
        .strip_prefix('…')
        .or_else(|| given.strip_prefix("..."))
        .unwrap_or(given);
    let fits =
        (MIN_TAIL..32).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_hexdigit());
    fits.then(|| digits.to_ascii_lowercase())
}

/// The one id of `ids` that ends in `tail`, or why there is none.
fn pick<'a>(
    ids: impl IntoIterator<Item = &'a str>,
    tail: &str,
    what: &'static str,
    given: &str,
    scanned_all: bool,
) -> Result<String, ClientError> {
    let found: Vec<&str> = ids.into_iter().filter(|id| id.ends_with(tail)).collect();
    let reason = match found.as_slice() {
        [one] => return Ok((*one).to_owned()),
        [] if scanned_all => format!("no {what} you can see ends in {tail}"),
        [] => format!(
            "none of the newest {SCAN_LIMIT} {what}s you can see ends in {tail}; give its whole id"
        ),
        many => format!(
            "{} {what}s end in {tail} ({}{}); give more digits",
            many.len(),
            many[..many.len().min(5)].join(", "),
            if many.len() > 5 { ", …" } else { "" }
        ),
    };
    Err(ClientError::Unresolved {
        given: given.to_owned(),
        reason,
    })
}

/// An id as typed.
enum Given<T> {
    /// A whole id: nothing to look up.
    Whole(T),
    /// The hex digits of a tail to look up.
    Tail(String),
}

/// What `given` is, or why it is neither a whole id nor a tail.
fn whole_or_tail<T: std::str::FromStr>(given: &str) -> Result<Given<T>, ClientError>
where
    T::Err: std::fmt::Display,
{
    match (given.parse::<T>(), tail_of(given)) {
        (Ok(id), _) => Ok(Given::Whole(id)),
        (Err(_), Some(tail)) => Ok(Given::Tail(tail)),
        (Err(error), None) => Err(ClientError::Unresolved {
            given: given.to_owned(),
            reason: format!("{error}, or the tail a table prints (…7c8d9e0f)"),
        }),
    }
}

/// The `id` of every object of `page[key]`.
fn ids_of<'a>(page: &'a Value, key: &str) -> Vec<&'a str> {
    page[key]
        .as_array()
        .map(|items| items.iter().filter_map(|t| t["id"].as_str()).collect())
        .unwrap_or_default()
}

impl ApiClient {
    /// The task `given` names: a whole id as it is, a tail looked up among
    /// the newest `SCAN_LIMIT` tasks the caller may see.
    ///
    /// # Errors
    /// `Unresolved` for text that is neither, a tail that matches no task or
    /// several; as `list_tasks` when the listing fails.
    pub async fn resolve_task(&self, given: &str) -> Result<TaskId, ClientError> {
        let tail = match whole_or_tail::<TaskId>(given)? {
            Given::Tail(tail) => tail,
            Given::Whole(id) => return Ok(id),
        };
        let mut ids = Vec::new();
        let mut query = TaskQuery {
            limit: Some(PAGE),
            ..TaskQuery::default()
        };
        let scanned_all = loop {
            let page = self.list_tasks(&query).await?;
            ids.extend(ids_of(&page, "tasks").into_iter().map(str::to_owned));
            let next = page["next"].as_str().and_then(|n| n.parse().ok());
            match next {
                None => break true,
                Some(_) if ids.len() >= SCAN_LIMIT => break false,
                after => query.after = after,
            }
        };
        let id = pick(
            ids.iter().map(String::as_str),
            &tail,
            "task",
            given,
            scanned_all,
        )?;
        id.parse().map_err(|e| ClientError::Decode {
            url: self.url("/v1/tasks"),
            reason: format!("task id {id:?}: {e}"),
        })
    }

    /// The run `given` names, as `resolve_task` does for tasks.
    ///
    /// # Errors
    /// As `resolve_task`, with `list_runs`; a listing refused with 401 or
    /// 403 (a wait's own token lists nothing) is `Unresolved`, asking for
    /// the whole id.
    pub async fn resolve_run(&self, given: &str) -> Result<String, ClientError> {
        let tail = match whole_or_tail::<RunId>(given)? {
            Given::Tail(tail) => tail,
            Given::Whole(id) => return Ok(id.to_string()),
        };
        let mut ids: Vec<String> = Vec::new();
        let mut query = RunQuery {
            limit: Some(PAGE),
            ..RunQuery::default()
        };
        let scanned_all = loop {
            let page = self
                .list_runs(&query)
                .await
                .map_err(|error| refused_lookup(given, error))?;
            let got = ids_of(&page, "runs");
            let full = u32::try_from(got.len()) == Ok(PAGE);
            query.before = got.last().map(|id| (*id).to_owned());
            ids.extend(got.into_iter().map(str::to_owned));
            if !full || query.before.is_none() {
                break true;
            }
            if ids.len() >= SCAN_LIMIT {
                break false;
            }
        };
        pick(
            ids.iter().map(String::as_str),
            &tail,
            "run",
            given,
            scanned_all,
        )
    }
}

/// A run listing that failed while looking up `given`: a refusal of the
/// credential (401, 403) says that the whole id needs no listing.
fn refused_lookup(given: &str, error: ClientError) -> ClientError {
    match error {
        ClientError::Status {
            status: 401 | 403, ..
        } => ClientError::Unresolved {
            given: given.to_owned(),
            reason: format!(
                "give the run's whole id, R- and 32 hex digits: a short one is found by \
                 listing runs, which this credential may not (a wait's own token, swt1.…, \
                 only answers its wait): {error}"
            ),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_is_the_hex_digits_a_table_prints() {
        assert_eq!(tail_of("…7C8D9E0F").as_deref(), Some("7c8d9e0f"));
        assert_eq!(tail_of("...7c8d").as_deref(), Some("7c8d"));
        assert_eq!(tail_of("9e0f").as_deref(), Some("9e0f"));
        assert_eq!(tail_of("e0f"), None, "too short to name one id");
        assert_eq!(tail_of("…7c8g"), None);
        assert_eq!(tail_of("T-7c8d9e0f"), None);
        assert_eq!(tail_of(&"a".repeat(32)), None, "a whole id's digits");
    }

    #[test]
    fn a_refused_run_lookup_asks_for_the_whole_id() {
        let status = |status: u16| ClientError::Status {
            url: "http://x/v1/runs".to_owned(),
            status,
            code: None,
            message: "no".to_owned(),
        };
        for refused in [401, 403] {
            let error = refused_lookup("…7c8d9e0f", status(refused)).to_string();
            assert!(
                error.starts_with("`…7c8d9e0f`: give the run's whole id"),
                "{error}"
            );
            assert!(error.contains(&format!("HTTP {refused}")), "{error}");
        }
        let other = refused_lookup("…7c8d9e0f", status(500));
        assert!(matches!(other, ClientError::Status { status: 500, .. }));
    }

    #[test]
    fn one_match_is_the_id_and_several_or_none_say_so() {
        let ids = ["T-aa11", "T-bb22", "T-cc22"];
        assert_eq!(pick(ids, "11", "task", "…11", true).unwrap(), "T-aa11");
        let err = pick(ids, "22", "task", "…22", true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("2 tasks end in 22") && err.contains("T-cc22"),
            "{err}"
        );
        let err = pick(ids, "33", "task", "…33", true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no task you can see"), "{err}");
        let err = pick(ids, "33", "run", "…33", false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("newest 2000 runs") && err.contains("whole id"),
            "{err}"
        );
    }
}
