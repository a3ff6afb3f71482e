//! A merge task's input, read and checked before git runs: which branches,
//! by which strategy, from which base, into which new branch.
//!
//! `branches` items are names or objects with a `branch` field (a coding
//! step's whole result, say); anything else in such an object is ignored.
//! Unknown top-level fields are refused, so a typo is an error.

use serde::Deserialize;
use serde_json::Value;

use super::MergeError;

/// How the branches become one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Each branch merged in order onto the base, a merge commit each,
    /// stopping at the first conflict.
    #[default]
    Sequence,
    /// All branches in one merge commit; on any conflict none is applied.
    Octopus,
    /// One branch: its head when it descends from the base, else merged
    /// onto the base.
    Pick,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Sequence => "sequence",
            Strategy::Octopus => "octopus",
            Strategy::Pick => "pick",
        }
    }
}

/// A checked merge task input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeRequest {
    /// Branch names, in order, without repeats; at least one.
    pub branches: Vec<String>,
    pub strategy: Strategy,
    /// For [`Strategy::Pick`], the index in `branches` of the one picked.
    pub pick: Option<usize>,
    /// The commit the merge starts from; unset: the agent's `base`.
    pub base: Option<String>,
    /// The new branch; unset: `swarmd/merge-<short task id>`.
    pub into: Option<String>,
    /// Whether the agent's `fast_forward` branch is moved to the result.
    pub fast_forward: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    branches: Vec<BranchArg>,
    #[serde(default)]
    strategy: Strategy,
    #[serde(default)]
    pick: Option<PickArg>,
    #[serde(default)]
    base: Option<String>,
    #[serde(default)]
    into: Option<String>,
    #[serde(default)]
    fast_forward: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum BranchArg {
    Name(String),
    Result { branch: String },
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PickArg {
    Index(usize),
    Branch(String),
}

impl MergeRequest {
    /// The request in a task's `input`, or, without one, in its prompt as
    /// JSON text.
    ///
    /// # Errors
    /// `BadInput` naming what is wrong; `BadName` for a name that cannot be
    /// a branch; `TooMany` past `max_branches`.
    pub fn parse(
        input: Option<&Value>,
        prompt: &str,
        max_branches: usize,
    ) -> Result<MergeRequest, MergeError> {
        let value = match input {
            Some(value) => value.clone(),
            None => serde_json::from_str(prompt).map_err(|_| {
                MergeError::BadInput(
                    "the task needs an input object {branches, strategy, …} (or that object as its prompt)"
                        .to_owned(),
                )
            })?,
        };
        let raw: RawRequest =
            serde_json::from_value(value).map_err(|e| MergeError::BadInput(e.to_string()))?;
        let branches: Vec<String> = raw
            .branches
            .into_iter()
            .map(|arg| match arg {
                BranchArg::Name(name) | BranchArg::Result { branch: name } => name,
            })
            .collect();
        if branches.is_empty() {
            return Err(MergeError::BadInput("`branches` is empty".to_owned()));
        }
        if branches.len() > max_branches {
            return Err(MergeError::TooMany {
                count: branches.len(),
                max: max_branches,
            });
        }
        for (n, name) in branches.iter().enumerate() {
            plain_name(name)?;
            if branches[..n].contains(name) {
                return Err(MergeError::BadInput(format!(
                    "branch `{name}` is given twice"
                )));
            }
        }
        let pick = match (raw.strategy, raw.pick) {
            (Strategy::Pick, None) => {
                return Err(MergeError::BadInput(
                    "strategy `pick` needs `pick`: an index or a branch of `branches`".to_owned(),
                ));
            }
            (Strategy::Pick, Some(PickArg::Index(n))) if n < branches.len() => Some(n),
            (Strategy::Pick, Some(PickArg::Index(n))) => {
                return Err(MergeError::BadInput(format!(
                    "pick {n} is past the {} branches given",
                    branches.len()
                )));
            }
            (Strategy::Pick, Some(PickArg::Branch(name))) => {
                Some(branches.iter().position(|b| *b == name).ok_or_else(|| {
                    MergeError::BadInput(format!("pick `{name}` is not one of `branches`"))
                })?)
            }
            (_, Some(_)) => {
                return Err(MergeError::BadInput(
                    "`pick` applies to strategy `pick` only".to_owned(),
                ));
            }
            (_, None) => None,
        };
        if let Some(base) = &raw.base
            && (base.is_empty() || base.starts_with('-') || base.contains(char::is_control))
        {
            return Err(MergeError::BadInput(format!(
                "base `{base}` cannot name a commit"
            )));
        }
        if let Some(into) = &raw.into {
            plain_name(into)?;
        }
        Ok(MergeRequest {
            branches,
            strategy: raw.strategy,
            pick,
            base: raw.base,
            into: raw.into,
            fast_forward: raw.fast_forward,
        })
    }
}

/// Refuses, before git is asked, a name no branch of this agent's can have:
/// empty, over 255 bytes, starting with `-` (an option), holding `..`,
/// `@{` (git's reflog and previous-branch syntax), whitespace or a control
/// character. `git check-ref-format --branch` checks the rest.
///
/// # Errors
/// `BadName`.
pub(crate) fn plain_name(name: &str) -> Result<(), MergeError> {
    let refused = name.is_empty()
        || name.len() > 255
        || name.starts_with('-')
        || name.contains("..")
        || name.contains("@{")
        || name.chars().any(|c| c.is_whitespace() || c.is_control());
    if refused {
        Err(MergeError::BadName(name.to_owned()))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(input: Value) -> Result<MergeRequest, MergeError> {
        MergeRequest::parse(Some(&input), "", 3)
    }

    #[test]
    fn names_and_step_results_both_name_branches() {
        let request = parse(json!({"branches": ["a", {"branch": "b", "summary": "x"}]})).unwrap();
        assert_eq!(request.branches, ["a", "b"]);
        assert_eq!(request.strategy, Strategy::Sequence);
        assert!(!request.fast_forward);
    }

    #[test]
    fn the_prompt_is_read_when_there_is_no_input() {
        let request =
            MergeRequest::parse(None, r#"{"branches": ["a"], "strategy": "octopus"}"#, 3).unwrap();
        assert_eq!(request.strategy, Strategy::Octopus);
        let error = MergeRequest::parse(None, "merge them please", 3).unwrap_err();
        assert!(error.to_string().contains("input object"), "{error}");
    }

    #[test]
    fn pick_takes_an_index_or_one_of_the_branches() {
        let by_name = parse(json!({"branches": ["a", "b"], "strategy": "pick", "pick": "b"}));
        assert_eq!(by_name.unwrap().pick, Some(1));
        let by_index = parse(json!({"branches": ["a", "b"], "strategy": "pick", "pick": 0}));
        assert_eq!(by_index.unwrap().pick, Some(0));
        for bad in [
            json!({"branches": ["a"], "strategy": "pick"}),
            json!({"branches": ["a"], "strategy": "pick", "pick": 1}),
            json!({"branches": ["a"], "strategy": "pick", "pick": "c"}),
            json!({"branches": ["a"], "pick": 0}),
        ] {
            assert!(
                matches!(parse(bad.clone()), Err(MergeError::BadInput(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn bad_names_counts_and_fields_are_refused() {
        for name in ["-x", "a..b", "@{-1}", "", "a b", "a\nb"] {
            let error = parse(json!({"branches": [name]})).unwrap_err();
            assert!(matches!(error, MergeError::BadName(_)), "{name}: {error}");
        }
        let error = parse(json!({"branches": ["a"], "into": "--force"})).unwrap_err();
        assert!(matches!(error, MergeError::BadName(_)), "{error}");
        let error = parse(json!({"branches": ["a", "b", "c", "d"]})).unwrap_err();
        assert!(
            matches!(error, MergeError::TooMany { count: 4, max: 3 }),
            "{error}"
        );
        for bad in [
            json!({"branches": []}),
            json!({"branches": ["a", "a"]}),
            json!({"branches": ["a"], "strategy": "rebase"}),
            json!({"branches": ["a"], "brances": []}),
            json!({"branches": ["a"], "base": "--all"}),
            json!({"branches": [1]}),
            json!(["a"]),
        ] {
            assert!(
                matches!(parse(bad.clone()), Err(MergeError::BadInput(_))),
                "{bad}"
            );
        }
    }
}
