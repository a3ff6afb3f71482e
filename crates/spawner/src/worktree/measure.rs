//! Measurements of the worktree lifecycle (docs/benchmarks.md, Worktrees),
//! ignored by default: they print numbers and check nothing.

use super::*;

/// docs/benchmarks.md, Worktrees: creation + cleanup cost per attempt on a
/// repository of 10 000 files. Run with
/// `cargo test --release -p swarmd-spawner --lib worktree_cost -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn worktree_cost_on_ten_thousand_files() {
    let temp = tempfile::tempdir().unwrap();
    let repo = temp.path().join("repo");
    for d in 0..100 {
        let dir = repo.join(format!("dir{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f:03}.txt")), format!("{d} {f}\n")).unwrap();
        }
    }
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "ten thousand files"]);
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let mut costs = Vec::new();
    for n in 1..=40 {
        let started = std::time::Instant::now();
        let checkout = trees
            .create(&spec(&repo, KeepRule::Never), "T-cost", n)
            .await
            .unwrap();
        std::fs::write(checkout.dir.join("dir000/f000.txt"), "changed\n").unwrap();
        trees.conclude(&checkout).await.unwrap();
        trees.release(&checkout, true).await.unwrap();
        costs.push(started.elapsed());
    }
    costs.sort();
    let at = |q: f64| costs[((costs.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "worktree add + commit + diff + remove, 10 000 files, {} attempts: p50 {:?}, p99 {:?}, max {:?}",
        costs.len(),
        at(0.5),
        at(0.99),
        costs[costs.len() - 1]
    );
}

/// docs/benchmarks.md, Worktrees: attempts/s through the worktree lifecycle
/// at 8 in flight on one small repository (100 files), where the
/// per-repository lock is what parallel attempts share. Run with
/// `cargo test -p swarmd-spawner --lib worktree_throughput -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn worktree_throughput_at_eight_in_flight() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    for f in 0..100 {
        std::fs::write(repo.join(format!("f{f:03}.txt")), format!("{f}\n")).unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "a hundred files"]);
    let trees = Arc::new(Worktrees::new(temp.path().join("worktrees"), &host()));
    let slots = Arc::new(tokio::sync::Semaphore::new(8));
    let attempts = 200;
    let started = std::time::Instant::now();
    let runs: Vec<_> = (1..=attempts)
        .map(|n| {
            let (trees, slots, spec) = (
                Arc::clone(&trees),
                Arc::clone(&slots),
                spec(&repo, KeepRule::Never),
            );
            tokio::spawn(async move {
                let _slot = slots.acquire().await.unwrap();
                let checkout = trees.create(&spec, "T-rate", n).await?;
                std::fs::write(checkout.dir.join("f000.txt"), format!("{n}\n")).unwrap();
                let report = trees.conclude(&checkout).await?;
                trees.release(&checkout, true).await?;
                Ok::<_, WorktreeError>(report)
            })
        })
        .collect();
    let done = futures_all(runs).await.len();
    let elapsed = started.elapsed();
    println!(
        "{done} worktree attempts at 8 in flight, 100 files: {:.1} attempts/s ({elapsed:?})",
        done as f64 / elapsed.as_secs_f64()
    );
}
