//! Computing a merge and writing it as a new branch (see the module's
//! rules in `mod.rs`): names checked, refs resolved, merge commits written
//! by `merge-tree` + `commit-tree`, the new branch created, and the
//! `fast_forward` branch moved only when it is an ancestor of the result.

use std::path::Path;

use serde::Serialize;

use super::request::{MergeRequest, Strategy};
use super::{MergeError, MergeSpec};
use crate::HostEnv;
use crate::worktree::branches::{AUTHOR_EMAIL, AUTHOR_NAME, Branches, Git};
use crate::worktree::{WorktreeError, naming};

/// The result value of a merge task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MergeRecord {
    /// The new branch.
    pub branch: String,
    /// The commit the merge started from.
    pub base: String,
    /// The new branch's head: the base when nothing was applied.
    pub head: String,
    pub strategy: &'static str,
    /// One line saying what was asked and what happened: `sequence merge
    /// of 3 branches, stopped at a conflict with b after 1`, `pick 1 of 5
    /// branches`, `octopus merge of 2 branches`.
    pub summary: String,
    /// The branches the head holds, in order, each at the head it had.
    pub applied: Vec<AppliedBranch>,
    /// The branch that did not merge cleanly and where; none applied after
    /// it (`sequence`), or none at all (`octopus`, `pick`).
    pub conflict: Option<Conflict>,
    /// The agent's `fast_forward` branch, when it was moved to `head` (or
    /// was there already).
    pub fast_forwarded: Option<String>,
    /// Why a fast-forward the task asked for was not made.
    pub fast_forward_refused: Option<String>,
}

/// One branch the result holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppliedBranch {
    pub branch: String,
    pub head: String,
}

/// A branch that conflicts with what was merged before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conflict {
    pub branch: String,
    /// The conflicting paths.
    pub files: Vec<String>,
    /// For `sequence` and `pick`: a branch (`<into>-conflict`) at a commit
    /// whose parents are the result so far and the conflicting branch and
    /// whose tree is the merge with git's conflict markers in `files`, for
    /// a resolver step to start from (a flow step's `start_from`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_branch: Option<String>,
    /// That commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_head: Option<String>,
}

/// The task a merge runs for: what names the default branch, the commit
/// trailer, and the commits' date.
#[derive(Debug, Clone)]
pub(crate) struct MergeTask {
    pub(crate) id: String,
    pub(crate) created_ms: u64,
}

/// Runs merges in one agent's repository.
#[derive(Debug, Clone)]
pub(crate) struct Merger {
    git: Git,
    branches: Branches,
}

/// What merging one branch onto a commit gave.
enum Step {
    /// The commit already holds the branch.
    Contained,
    /// The merge's tree.
    Clean(String),
    /// The merge's tree with conflict markers, and the conflicting paths.
    Conflicted(String, Vec<String>),
}

/// Where a strategy ended: the head, what went in, what stopped it.
struct Outcome {
    head: String,
    applied: Vec<AppliedBranch>,
    conflict: Option<Conflict>,
}

impl Merger {
    pub(crate) fn new(host: &HostEnv) -> Merger {
        Merger {
            git: Git::new(host),
            branches: Branches::new(host),
        }
    }

    /// Merges `request` in `spec.repo` for `task`.
    ///
    /// # Errors
    /// A refused input (bad or unknown name, unknown base, an `into` that
    /// exists at another commit, a fast-forward the agent cannot make) or a
    /// git failure. Nothing but objects is written before the input is
    /// known good.
    pub(crate) async fn merge(
        &self,
        spec: &MergeSpec,
        request: &MergeRequest,
        task: &MergeTask,
    ) -> Result<MergeRecord, MergeError> {
        let repo = spec.repo.as_path();
        if request.fast_forward && spec.fast_forward.is_none() {
            return Err(MergeError::NoFastForwardBranch);
        }
        let into = match &request.into {
            // `swarmd/` is where swarmd names attempts' and merges'
            // branches: a given name there could be another task's,
            // which this merge would then claim as its result.
            Some(into) if into == "swarmd" || into.starts_with("swarmd/") => {
                return Err(MergeError::BadInput(format!(
                    "into `{into}` is under swarmd/, where swarmd names attempts' and merges' \
                     branches; name another (the default is swarmd/merge-<short task id>)"
                )));
            }
            Some(into) => into.clone(),
            None => format!("swarmd/merge-{}", naming::short_id(&task.id)),
        };
        self.check_name(repo, &into).await?;
        let mut heads = Vec::with_capacity(request.branches.len());
        for branch in &request.branches {
            self.check_name(repo, branch).await?;
            let head = self
                .branch_head(repo, branch)
                .await
                .ok_or_else(|| MergeError::NoBranch(branch.clone()))?;
            heads.push((branch.as_str(), head));
        }
        let base_name = request.base.as_deref().unwrap_or(&spec.base);
        let base = self.resolve(repo, base_name).await?;

        // Commits are dated at the task's creation: a retry that merges the
        // same heads writes the same commits.
        let date = format!("@{} +0000", task.created_ms / 1000);
        let git = self.git.with_date(&date);
        let writer = Writer {
            git: &git,
            repo,
            into: &into,
            task: &task.id,
        };
        let outcome = match request.strategy {
            Strategy::Sequence => writer.sequence(&base, &heads).await?,
            Strategy::Octopus => writer.octopus(&base, &heads).await?,
            Strategy::Pick => {
                let n = request.pick.unwrap_or_default();
                let (branch, head) = heads
                    .get(n)
                    .ok_or_else(|| MergeError::BadInput(format!("pick {n} is out of range")))?;
                writer.pick(&base, branch, head).await?
            }
        };
        // Both names are checked before either branch is made, so a work
        // branch that cannot be made leaves nothing but objects behind.
        let work = match &outcome.conflict {
            Some(Conflict {
                work_branch: Some(work),
                work_head: Some(at),
                ..
            }) => {
                self.check_name(repo, work).await?;
                if self.branch_head(repo, work).await.is_some() {
                    return Err(MergeError::BadInput(format!(
                        "the conflict's work branch `{work}` exists already"
                    )));
                }
                Some((work, at))
            }
            _ => None,
        };
        self.create(repo, &into, &outcome.head).await?;
        if let Some((work, at)) = work {
            self.create(repo, work, at).await?;
        }

        let conflicted = outcome.conflict.as_ref().map(|c| c.branch.as_str());
        let summary = summary(
            request.strategy,
            request.branches.len(),
            outcome.applied.len(),
            conflicted,
        );
        let mut record = MergeRecord {
            branch: into,
            base,
            head: outcome.head,
            strategy: request.strategy.as_str(),
            summary,
            applied: outcome.applied,
            conflict: outcome.conflict,
            fast_forwarded: None,
            fast_forward_refused: None,
        };
        if request.fast_forward
            && let Some(target) = &spec.fast_forward
        {
            match self.fast_forward(repo, target, &record).await? {
                Ok(()) => record.fast_forwarded = Some(target.clone()),
                Err(reason) => record.fast_forward_refused = Some(reason),
            }
        }
        Ok(record)
    }

    /// `BadName` unless git takes `name` as a branch name as it is.
    async fn check_name(&self, repo: &Path, name: &str) -> Result<(), MergeError> {
        super::request::plain_name(name)?;
        // git refuses a bad name with exit 128, a fault to `run_answer`.
        let checked = self
            .git
            .run_answer(repo, &["check-ref-format", "--branch", name])
            .await;
        match checked {
            Ok((true, shown)) if shown == name => Ok(()),
            Ok(_) | Err(WorktreeError::Git { .. }) => Err(MergeError::BadName(name.to_owned())),
            Err(other) => Err(other.into()),
        }
    }

    /// The commit local branch `branch` is at.
    async fn branch_head(&self, repo: &Path, branch: &str) -> Option<String> {
        let wanted = format!("refs/heads/{branch}^{{commit}}");
        self.git
            .run(
                repo,
                &[
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    "--end-of-options",
                    &wanted,
                ],
            )
            .await
            .ok()
    }

    /// The commit `name` (a commit, branch or tag) names.
    async fn resolve(&self, repo: &Path, name: &str) -> Result<String, MergeError> {
        let wanted = format!("{name}^{{commit}}");
        self.git
            .run(
                repo,
                &[
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    "--end-of-options",
                    &wanted,
                ],
            )
            .await
            .map_err(|_| MergeError::UnknownBase(name.to_owned()))
    }

    /// Creates `into` at `head`; one already there at `head` (a retry's
    /// own) is kept, one anywhere else refused.
    async fn create(&self, repo: &Path, into: &str, head: &str) -> Result<(), MergeError> {
        if let Some(existing) = self.branch_head(repo, into).await {
            if existing == head {
                return Ok(());
            }
            return Err(MergeError::Exists {
                into: into.to_owned(),
                head: existing,
            });
        }
        let reference = format!("refs/heads/{into}");
        // The empty old value: the update fails if the branch was made
        // since it was looked for.
        self.git
            .run(repo, &["update-ref", &reference, head, ""])
            .await?;
        Ok(())
    }

    /// Moves `target` to the record's head when that is a fast-forward;
    /// the inner `Err` says why it was not moved.
    async fn fast_forward(
        &self,
        repo: &Path,
        target: &str,
        record: &MergeRecord,
    ) -> Result<Result<(), String>, MergeError> {
        if let Some(conflict) = &record.conflict {
            return Ok(Err(format!(
                "the merge conflicted at {}; {target} is left where it is",
                conflict.branch
            )));
        }
        let Some(before) = self.branch_head(repo, target).await else {
            return Ok(Err(format!("no branch `{target}` in the repository")));
        };
        if before == record.head {
            return Ok(Ok(()));
        }
        let checked_out = self.branches.checked_out(repo).await?;
        if let Some((_, dir)) = checked_out.iter().find(|(branch, _)| branch == target) {
            return Ok(Err(format!(
                "{target} is checked out in {}; swarmd never moves a checked-out branch",
                dir.display()
            )));
        }
        if !is_ancestor(&self.git, repo, &before, &record.head).await? {
            return Ok(Err(format!(
                "{target} has commits the result lacks: it cannot be fast-forwarded"
            )));
        }
        let reference = format!("refs/heads/{target}");
        let moved = self
            .git
            .run(repo, &["update-ref", &reference, &record.head, &before])
            .await;
        Ok(moved
            .map(|_| ())
            .map_err(|_| format!("{target} moved while it was being updated; left as it is")))
    }
}

/// Writes one task's merge commits.
struct Writer<'a> {
    /// Dated at the task's creation.
    git: &'a Git,
    repo: &'a Path,
    into: &'a str,
    task: &'a str,
}

impl Writer<'_> {
    /// Each branch merged in turn, a merge commit each, until one conflicts.
    async fn sequence(&self, base: &str, heads: &[(&str, String)]) -> Result<Outcome, MergeError> {
        let mut outcome = Outcome {
            head: base.to_owned(),
            applied: Vec::new(),
            conflict: None,
        };
        for (branch, head) in heads {
            match self.step(&outcome.head, head).await? {
                Step::Contained => {}
                Step::Clean(tree) => {
                    let message = self.message(&format!("Merge {branch} into {}", self.into));
                    outcome.head = self.commit(&tree, &[&outcome.head, head], &message).await?;
                }
                Step::Conflicted(tree, files) => {
                    let message = self.message(&format!(
                        "Conflicts merging {branch} into {}\n\nThe files {} hold git's conflict markers.",
                        self.into,
                        files.join(", ")
                    ));
                    let work = self.commit(&tree, &[&outcome.head, head], &message).await?;
                    outcome.conflict = Some(Conflict {
                        branch: (*branch).to_owned(),
                        files,
                        work_branch: Some(format!("{}-conflict", self.into)),
                        work_head: Some(work),
                    });
                    break;
                }
            }
            outcome.applied.push(AppliedBranch {
                branch: (*branch).to_owned(),
                head: head.clone(),
            });
        }
        Ok(outcome)
    }

    /// One merge commit whose parents are the base and every branch it
    /// lacks; any conflict applies none.
    async fn octopus(&self, base: &str, heads: &[(&str, String)]) -> Result<Outcome, MergeError> {
        // The merged tree is built up through commits nothing refers to:
        // each next merge needs the previous one's history for its base.
        let mut so_far = base.to_owned();
        let mut tree = None;
        let mut parents = vec![base];
        for (branch, head) in heads {
            match self.step(&so_far, head).await? {
                Step::Contained => {}
                Step::Clean(merged) => {
                    so_far = self
                        .commit(&merged, &[&so_far, head], "octopus step")
                        .await?;
                    tree = Some(merged);
                    parents.push(head);
                }
                Step::Conflicted(_, files) => {
                    return Ok(Outcome {
                        head: base.to_owned(),
                        applied: Vec::new(),
                        conflict: Some(Conflict {
                            branch: (*branch).to_owned(),
                            files,
                            work_branch: None,
                            work_head: None,
                        }),
                    });
                }
            }
        }
        let applied = heads
            .iter()
            .map(|(branch, head)| AppliedBranch {
                branch: (*branch).to_owned(),
                head: head.clone(),
            })
            .collect();
        let head = match tree {
            None => base.to_owned(),
            Some(tree) => {
                let names: Vec<&str> = heads.iter().map(|(branch, _)| *branch).collect();
                let subject = format!("Merge {} into {}", names.join(", "), self.into);
                self.commit(&tree, &parents, &self.message(&subject))
                    .await?
            }
        };
        Ok(Outcome {
            head,
            applied,
            conflict: None,
        })
    }

    /// The branch's head when it descends from the base, else it merged
    /// onto the base.
    async fn pick(&self, base: &str, branch: &str, head: &str) -> Result<Outcome, MergeError> {
        let applied = vec![AppliedBranch {
            branch: branch.to_owned(),
            head: head.to_owned(),
        }];
        if is_ancestor(self.git, self.repo, base, head).await? {
            return Ok(Outcome {
                head: head.to_owned(),
                applied,
                conflict: None,
            });
        }
        let mut outcome = self.sequence(base, &[(branch, head.to_owned())]).await?;
        if outcome.conflict.is_none() {
            outcome.applied = applied;
        }
        Ok(outcome)
    }

    /// Merging `head` onto `onto`, written as objects only.
    async fn step(&self, onto: &str, head: &str) -> Result<Step, MergeError> {
        if is_ancestor(self.git, self.repo, head, onto).await? {
            return Ok(Step::Contained);
        }
        let (clean, out) = self
            .git
            .run_answer(
                self.repo,
                &[
                    "merge-tree",
                    "--write-tree",
                    "--name-only",
                    "--no-messages",
                    onto,
                    head,
                ],
            )
            .await?;
        let mut lines = out.lines();
        let tree = lines.next().unwrap_or_default().to_owned();
        if clean {
            return Ok(Step::Clean(tree));
        }
        let mut files: Vec<String> = lines
            .take_while(|line| !line.is_empty())
            .map(str::to_owned)
            .collect();
        files.dedup();
        Ok(Step::Conflicted(tree, crate::merge::cap_files(files)))
    }

    /// A commit of `tree` with `parents`, by swarmd.
    async fn commit(
        &self,
        tree: &str,
        parents: &[&str],
        message: &str,
    ) -> Result<String, MergeError> {
        let name = format!("user.name={AUTHOR_NAME}");
        let email = format!("user.email={AUTHOR_EMAIL}");
        let mut args = vec!["-c", &name, "-c", &email, "commit-tree", tree];
        for parent in parents {
            args.extend(["-p", parent]);
        }
        args.extend(["-m", message]);
        Ok(self.git.run(self.repo, &args).await?)
    }

    fn message(&self, subject: &str) -> String {
        format!("{subject}\n\nSwarmd-Task: {}", self.task)
    }
}

/// A record's `summary`: the strategy over the `given` branches, and
/// where a conflict with branch `conflicted` stopped it, `applied` merged
/// before it.
pub(crate) fn summary(
    strategy: Strategy,
    given: usize,
    applied: usize,
    conflicted: Option<&str>,
) -> String {
    let branches = if given == 1 { "branch" } else { "branches" };
    let asked = match strategy {
        Strategy::Pick => format!("pick 1 of {given} {branches}"),
        Strategy::Sequence | Strategy::Octopus => {
            format!("{} merge of {given} {branches}", strategy.as_str())
        }
    };
    match (strategy, conflicted) {
        (_, None) => asked,
        (Strategy::Sequence, Some(branch)) => {
            format!("{asked}, stopped at a conflict with {branch} after {applied}")
        }
        (Strategy::Octopus, Some(branch)) => {
            format!("{asked}, none applied: a conflict with {branch}")
        }
        (Strategy::Pick, Some(branch)) => format!("{asked}, stopped at a conflict with {branch}"),
    }
}

/// Whether `ancestor` is an ancestor of (or is) `of`.
async fn is_ancestor(git: &Git, repo: &Path, ancestor: &str, of: &str) -> Result<bool, MergeError> {
    Ok(git
        .run_answer(repo, &["merge-base", "--is-ancestor", ancestor, of])
        .await?
        .0)
}
