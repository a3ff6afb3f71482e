//! A fan-out's coding children start from one pinned base commit, on the
//! real binary and real `git`: the first child moves `main` while the
//! fan-out runs, and the second still starts where the first did.

use serde_json::json;

use super::{run, start, write_files};
use crate::daemon::Swarmd;
use crate::worktrees::{git, make_repo};

/// `coder` commits `file-<prompt>.txt`; the one given `1` first moves
/// `main` one empty commit on, behind the flow's back.
const AGENTS: &str = r#"
[agents.coder]
kind = "process"
program = "/bin/sh"
args = ["-c", """
n=$(cat)
if [ "$n" = 1 ]; then
  moved=$(git -c user.name=w -c user.email=w@w commit-tree -p main -m moved "$(git rev-parse 'main^{tree}')")
  git update-ref refs/heads/main "$moved"
fi
echo "change $n" > "file-$n.txt"
git add -A
git -c user.name=w -c user.email=w@w commit -qm "coder $n"
printf '"done"'
"""]
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[flows_dir]
path = "@DIR@/flows"
"#;

#[tokio::test]
async fn every_child_of_a_fanout_starts_from_one_pinned_base() {
    let path = |at: &str| json!({"op": "path", "at": at});
    let flow = json!({
        "name": "pinned",
        "output": path("$.tries"),
        "body": {"kind": "fanout", "items": {"op": "lit", "value": [1, 2]},
            "bind": path("$.n"), "concurrency": 1, "join": "all", "out": path("$.tries"),
            "body": {"kind": "step", "ref": "coder",
                     "in": {"op": "template", "text": "{{ n }}"},
                     "out": path("$.said"), "changes": path("$.git")}}
    });
    let sw = Swarmd::new(AGENTS).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let repo = make_repo(sw.dir());
    write_files(sw.dir(), &[("pinned", flow)]);
    let sw = sw.start().await;
    let before = git(&repo, &["rev-parse", "main"]);

    let (status, body) = start(&sw, json!({"flow": "pinned", "input": {}})).await;
    assert_eq!(status, 201, "{body}");
    let view = run(&sw, body["id"].as_str().unwrap(), 60).await;
    assert_eq!(view["status"], "passed", "{view}\n{}", sw.log());

    let tries = view["result"].as_array().unwrap();
    let after = git(&repo, &["rev-parse", "main"]);
    assert_ne!(after, before, "the first child moved main");
    for child in tries {
        assert_eq!(child["git"]["base"], before.as_str(), "{child}");
    }
    // The second child's branch does not hold the commit that moved main.
    let second = tries[1]["git"]["branch"].as_str().unwrap();
    let holds = std::process::Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["merge-base", "--is-ancestor", &after, second])
        .status()
        .unwrap();
    assert!(!holds.success(), "{second} started from the moved main");
}
