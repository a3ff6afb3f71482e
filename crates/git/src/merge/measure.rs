//! Hand-run measurement (docs/benchmarks.md, Merging five branches): the
//! merge agent's time to merge five coding branches of a repository of
//! 10 000 files by each strategy, git included.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use super::apply::{MergeTask, Merger};
use super::{MergeRequest, MergeSpec};
use crate::HostEnv;
use crate::testing::git::{git, ten_thousand_files};

/// 100 directories of 100 files on `main`, one commit; then five branches,
/// each changing 20 files of its own over four directories.
fn repo_with_five_branches(root: &Path) -> Vec<String> {
    ten_thousand_files(root);
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "ten thousand files"]);
    (0..5)
        .map(|b| {
            let name = format!("coder-{b}");
            git(root, &["checkout", "-q", "-b", &name, "main"]);
            for d in 0..4 {
                for f in 0..5 {
                    let file = root.join(format!("dir{:03}/f{:03}.txt", b * 20 + d, f));
                    std::fs::write(file, format!("changed by {name}\n")).unwrap();
                }
            }
            git(
                root,
                &["commit", "-q", "-am", &format!("{name} changes 20 files")],
            );
            git(root, &["checkout", "-q", "main"]);
            name
        })
        .collect()
}

fn summary(mut times: Vec<Duration>) -> String {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "p50 {:.1} ms, max {:.1} ms",
        ms(times[times.len() / 2]),
        ms(times[times.len() - 1])
    )
}

#[tokio::test]
#[ignore = "a hand-run measurement (docs/benchmarks.md)"]
async fn merge_cost_of_five_branches_on_ten_thousand_files() {
    let temp = tempfile::tempdir().unwrap();
    let branches = repo_with_five_branches(temp.path());
    let spec = MergeSpec {
        base: "main".into(),
        ..MergeSpec::new(temp.path())
    };
    let merger = Merger::new(&HostEnv::from_pairs([(
        "PATH",
        "/usr/local/bin:/usr/bin:/bin",
    )]));
    let runs = 20;
    for strategy in ["sequence", "octopus", "pick"] {
        let mut times = Vec::new();
        for n in 0..runs {
            let mut input = json!({"branches": branches, "strategy": strategy,
                                   "into": format!("merged-{strategy}-{n}")});
            if strategy == "pick" {
                input["pick"] = json!(2);
            }
            let request = MergeRequest::parse(Some(&input), "", spec.max_branches).unwrap();
            // A task of its own per run: fresh commits, nothing reused.
            let task = MergeTask {
                id: format!("T-0190f2a81b2c7d3e8f90a1b2c3d4e{n:03}"),
                created_ms: 1_700_000_000_000 + n * 1000,
            };
            let started = Instant::now();
            let record = merger.merge(&spec, &request, &task).await.unwrap();
            times.push(started.elapsed());
            assert!(record.conflict.is_none(), "{record:?}");
        }
        println!("{strategy:>8}: {} ({runs} runs)", summary(times));
    }
}
