//! The `merge` node with a resolver that does not resolve its conflict
//! (docs/flows.md, Merging coding branches), on the real binary and real
//! `git`: a resolver that commits nothing, one whose commits leave the
//! conflicting file alone, and one that commits it with git's markers
//! still in it all leave the conflict in the result, with the branches
//! merged before it, and no later round merges onto the markers.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use super::{node, run, start, write_files};
use crate::daemon::Swarmd;
use crate::worktrees::{git, make_repo};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `coder` writes, for prompt `<file> <text>`, `<text>` to `<file>` and
/// commits; `lazy` works in a worktree and commits nothing; `careless`
/// commits a review note and leaves the conflicting file as it found it;
/// `sloppy` changes the conflicting file but leaves git's markers in it;
/// `echo` works in no worktree, which lint refuses as a resolver.
const AGENTS: &str = r#"
[agents.coder]
kind = "process"
program = "/bin/sh"
args = ["-c", """
set -- $(cat)
echo "$2" > "$1"
git add -A
git -c user.name=w -c user.email=w@w commit -qm "coder $1 $2"
printf '"done"'
"""]
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.lazy]
kind = "process"
program = "/bin/sh"
args = ["-c", "printf '\"looked, nothing to do\"'"]
stdin = "none"
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.careless]
kind = "process"
program = "/bin/sh"
args = ["-c", """
echo "looked at it" > review.txt
git add review.txt
git -c user.name=w -c user.email=w@w commit -qm "review"
printf '"reviewed"'
"""]
stdin = "none"
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.sloppy]
kind = "process"
program = "/bin/sh"
args = ["-c", """
echo "merged by hand" >> shared.txt
git add shared.txt
git -c user.name=w -c user.email=w@w commit -qm "resolve"
printf '"resolved"'
"""]
stdin = "none"
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.echo]
kind = "process"
program = "/bin/sh"
args = ["-c", "cat > /dev/null; printf '\"seen\"'"]
env = { PATH = "/usr/bin:/bin" }

[agents.merge]
kind = "merge"
repo = "@DIR@/repo"
base = "main"

[flows_dir]
path = "@DIR@/flows"
"#;

/// Coders writing `shared.txt` "A3", `shared.txt` "B3" and `z.txt` "Z",
/// then a `sequence` merge node over their changes with resolver
/// `resolver`.
fn flow(resolver: &str) -> Value {
    let path = |at: &str| json!({"op": "path", "at": at});
    json!({
        "name": resolver,
        "output": path("$.merged"),
        "body": {"kind": "seq", "children": [
            {"kind": "fanout",
             "items": {"op": "lit", "value": ["shared.txt A3", "shared.txt B3", "z.txt Z"]},
             "bind": path("$.n"), "concurrency": 3, "join": "all", "out": path("$.tries"),
             "body": {"kind": "step", "ref": "coder",
                      "in": {"op": "template", "text": "{{ n }}"},
                      "out": path("$.said"), "changes": path("$.git")}},
            {"kind": "merge", "ref": "merge", "strategy": "sequence", "on_conflict": resolver,
             "branches": {"op": "select", "at": "$.tries[*].git"}, "out": path("$.merged")}
        ]}
    })
}

/// The local branches whose trees hold a line starting a conflict
/// marker, read with `git grep` on their commits.
fn marked(repo: &Path) -> BTreeSet<String> {
    let refs = git(
        repo,
        &["for-each-ref", "--format=%(refname:short)", "refs/heads"],
    );
    refs.lines()
        .filter(|branch| {
            let out = Command::new("git")
                .arg("-C")
                .arg(repo)
                .args(["grep", "-q", "-e", "^<<<<<<< ", "-e", "^>>>>>>> "])
                .arg(branch)
                .arg("--")
                .output()
                .unwrap();
            assert!(
                out.status.code() == Some(0) || out.status.code() == Some(1),
                "git grep {branch}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.status.success()
        })
        .map(str::to_owned)
        .collect()
}

/// Runs flow `name` to its end and checks the conflict at `B3` is left in
/// its result; the conflict's work branch.
async fn left_unresolved(sw: &Swarmd, repo: &Path, name: &str) -> String {
    let (status, body) = start(sw, json!({"flow": name, "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let view = run(sw, body["id"].as_str().unwrap(), 90).await;
    assert_eq!(view["status"], "passed", "{name}: {view}\n{}", sw.log());

    let merged = &view["result"];
    // Round 1 merged A3 and stopped at B3; the resolver did not resolve
    // it, so the conflict is in the result and z.txt is never merged.
    let first = &merged["merge"];
    assert_eq!(first["applied"].as_array().unwrap().len(), 1, "{merged}");
    let conflict = &first["conflict"];
    assert_eq!(conflict["files"], json!(["shared.txt"]), "{merged}");
    assert_eq!(merged["conflict"], *conflict, "{name}: {merged}");
    assert!(merged.get("resolved").is_none(), "{name}: {merged}");
    assert_eq!(merged["rounds"], json!([{"merge": first.clone()}]));
    assert_eq!(merged["branch"], first["branch"], "{merged}");
    assert_eq!(merged["head"], first["head"], "{merged}");
    let keys: Vec<&str> = node(&view, "/body/children/1")["tries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        ["/body/children/1/merge", "/body/children/1/resolve"],
        "{name}"
    );

    // The result's branch holds A3 only, no markers, no z.txt.
    let branch = merged["branch"].as_str().unwrap();
    assert_eq!(
        git(repo, &["rev-parse", branch]),
        merged["head"].as_str().unwrap()
    );
    assert_eq!(git(repo, &["show", &format!("{branch}:shared.txt")]), "A3");
    let files = git(repo, &["ls-tree", "--name-only", branch]);
    assert!(!files.lines().any(|f| f == "z.txt"), "{files}");
    assert!(!marked(repo).contains(branch), "{branch} holds markers");
    conflict["work_branch"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_resolver_that_resolves_nothing_leaves_the_conflict_in_the_result() {
    let sw = Swarmd::new(AGENTS).env("PATH", PATH);
    let repo = make_repo(sw.dir());
    let flows: Vec<(&str, Value)> = ["lazy", "careless", "sloppy"]
        .into_iter()
        .map(|resolver| (resolver, flow(resolver)))
        .collect();
    write_files(sw.dir(), &flows);
    let sw = sw.start().await;
    let main = git(&repo, &["rev-parse", "main"]);

    // A resolver that works in no worktree can never resolve: lint
    // refuses it (a flows_dir file naming it would stop the start).
    let response = sw
        .post("/v1/flows/lint", &sw.admin)
        .json(&json!({ "flow": flow("echo") }))
        .send()
        .await
        .unwrap();
    let (status, body) = crate::harness::parts(response).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ok"], false, "{body}");
    assert_eq!(body["problems"][0]["code"], "no_worktree", "{body}");
    assert_eq!(
        body["problems"][0]["pointer"],
        "/body/children/1/on_conflict"
    );

    // Committing nothing leaves no branch with markers but the conflict's
    // work branch.
    let mut works = BTreeSet::new();
    works.insert(left_unresolved(&sw, &repo, "lazy").await);
    assert_eq!(marked(&repo), works, "after lazy");
    // `careless` committed on top of the markers: its own branch holds
    // them too, and the node took it for no resolution.
    works.insert(left_unresolved(&sw, &repo, "careless").await);
    let others: Vec<String> = marked(&repo).difference(&works).cloned().collect();
    assert_eq!(others.len(), 1, "{others:?}");
    assert!(others[0].starts_with("swarmd/t-"), "{others:?}");
    // `sloppy` changed the conflicting file but left the markers in it:
    // no resolution either.
    works.insert(left_unresolved(&sw, &repo, "sloppy").await);
    let others: Vec<String> = marked(&repo).difference(&works).cloned().collect();
    assert_eq!(others.len(), 2, "{others:?}");
    assert_eq!(git(&repo, &["rev-parse", "main"]), main, "main never moves");
}
