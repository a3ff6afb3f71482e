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
    crate::testing::git::ten_thousand_files(&repo);
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

/// docs/benchmarks.md, Worktree bootstrap: a worktree made ready to work in
/// per attempt on a repository of 10 000 files: `git worktree add`, two
/// ignored files copied, a `node_modules` of 1 000 files linked, two
/// ports, the setup command `sh -c true`; then removal. The same attempts
/// without bootstrap run alongside, for the difference. Run with
/// `cargo test --release -p swarmd-spawner --lib worktree_bootstrap_cost -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn worktree_bootstrap_cost_on_ten_thousand_files() {
    let temp = tempfile::tempdir().unwrap();
    let repo = temp.path().join("repo");
    crate::testing::git::ten_thousand_files(&repo);
    std::fs::write(
        repo.join(".gitignore"),
        ".env\nconfig/local.toml\nnode_modules\n",
    )
    .unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "ten thousand files"]);
    std::fs::write(repo.join(".env"), "KEY=value\n").unwrap();
    std::fs::create_dir_all(repo.join("config")).unwrap();
    std::fs::write(repo.join("config/local.toml"), "port = 1\n").unwrap();
    for p in 0..10 {
        let dir = repo.join(format!("node_modules/pkg{p}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("m{f:03}.js")), "module.exports = 1;\n").unwrap();
        }
    }
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let setup = SetupSpec {
        command: vec!["sh".into(), "-c".into(), "true".into()],
        timeout: std::time::Duration::from_secs(60),
    };
    let booted = WorktreeSpec {
        bootstrap: Bootstrap {
            copy: vec![".env".into(), "config/*.toml".into()],
            link: vec!["node_modules".into()],
            setup: Some(setup.clone()),
            ports: Some(PortsSpec::new("20000-20999", 2).unwrap()),
        },
        ..spec(&repo, KeepRule::Never)
    };
    let plain = spec(&repo, KeepRule::Never);
    let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for n in 1..=20 {
        let started = std::time::Instant::now();
        let checkout = trees.create(&booted, "T-boot", n).await.unwrap();
        let (sender, mut received) = tokio::sync::mpsc::channel(64);
        let drain = tokio::spawn(async move { while received.recv().await.is_some() {} });
        setup::run(&setup, &checkout.dir, &env, sender)
            .await
            .unwrap();
        drain.await.unwrap();
        let ready = started.elapsed();
        trees.release(&checkout, true).await.unwrap();
        with.push((ready, started.elapsed()));
        let started = std::time::Instant::now();
        let checkout = trees.create(&plain, "T-plain", n).await.unwrap();
        let ready = started.elapsed();
        trees.release(&checkout, true).await.unwrap();
        without.push((ready, started.elapsed()));
    }
    for (name, costs) in [("with bootstrap", with), ("without", without)] {
        let mut ready: Vec<_> = costs.iter().map(|c| c.0).collect();
        let mut whole: Vec<_> = costs.iter().map(|c| c.1).collect();
        ready.sort();
        whole.sort();
        let at =
            |v: &[std::time::Duration], q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
        println!(
            "{name}, 10 000 files, {} attempts: ready p50 {:?} p99 {:?}; ready + removed p50 {:?} p99 {:?}",
            ready.len(),
            at(&ready, 0.5),
            at(&ready, 0.99),
            at(&whole, 0.5),
            at(&whole, 0.99),
        );
    }
}

/// docs/benchmarks.md, Worktree bootstrap: the bootstrap's own steps
/// without git, 200 times: two files copied and `node_modules` linked into
/// an empty directory, two ports taken and given back, `sh -c true` run as
/// the setup command. Run with
/// `cargo test --release -p swarmd-spawner --lib worktree_bootstrap_steps -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn worktree_bootstrap_steps() {
    let temp = tempfile::tempdir().unwrap();
    let repo = temp.path().join("repo");
    std::fs::create_dir_all(repo.join("config")).unwrap();
    std::fs::create_dir_all(repo.join("node_modules/pkg")).unwrap();
    std::fs::write(repo.join(".env"), "KEY=value\n").unwrap();
    std::fs::write(repo.join("config/local.toml"), "port = 1\n").unwrap();
    let bootstrap = Bootstrap {
        copy: vec![".env".into(), "config/*.toml".into()],
        link: vec!["node_modules".into()],
        setup: None,
        ports: None,
    };
    let ports = PortsSpec::new("20000-20999", 2).unwrap();
    let pool = super::ports::PortPool::default();
    let setup = SetupSpec {
        command: vec!["sh".into(), "-c".into(), "true".into()],
        timeout: std::time::Duration::from_secs(60),
    };
    let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
    let (mut files, mut taken, mut ran) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..200 {
        let dir = temp.path().join(format!("wt{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        let started = std::time::Instant::now();
        bootstrap::place_files(&repo, &dir, &bootstrap).unwrap();
        files.push(started.elapsed());
        let started = std::time::Instant::now();
        let held = pool.take(&ports).unwrap();
        pool.release(&held);
        taken.push(started.elapsed());
        let started = std::time::Instant::now();
        let (sender, mut received) = tokio::sync::mpsc::channel(64);
        let drain = tokio::spawn(async move { while received.recv().await.is_some() {} });
        setup::run(&setup, &dir, &env, sender).await.unwrap();
        drain.await.unwrap();
        ran.push(started.elapsed());
    }
    for (name, mut costs) in [
        ("copy 2 + link 1", files),
        ("2 ports taken and released", taken),
        ("setup `sh -c true`", ran),
    ] {
        costs.sort();
        let at = |q: f64| costs[((costs.len() as f64 - 1.0) * q).round() as usize];
        println!(
            "{name}, {} times: p50 {:?}, p99 {:?}",
            costs.len(),
            at(0.5),
            at(0.99)
        );
    }
}

/// docs/benchmarks.md, Listing branches: `Branches::list` over 500 swarmd
/// branches, each a commit ahead of `main`, counted in the listing (the
/// host's git, 2.41 or later) and one `rev-list` per branch (Debian's
/// 2.39). Run with
/// `cargo test --release -p swarmd-git --lib listing_cost -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn listing_cost_of_five_hundred_branches() {
    let temp = tempfile::tempdir().unwrap();
    let repo = temp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "base"]);
    let tree = git(&repo, &["rev-parse", "main^{tree}"]);
    for n in 0..500 {
        let commit = git(&repo, &["commit-tree", "-p", "main", "-m", "work", &tree]);
        git(
            &repo,
            &["branch", &format!("swarmd/t-{n:08x}-work/1"), &commit],
        );
    }
    for (name, path) in [
        ("counted in the listing", "/usr/local/bin:/usr/bin:/bin"),
        ("a rev-list per branch", "/usr/bin:/bin"),
    ] {
        let branches = branches::Branches::new(&HostEnv::from_pairs([("PATH", path)]));
        let mut costs = Vec::new();
        for _ in 0..10 {
            let started = std::time::Instant::now();
            let listed = branches.list(&repo, "main").await.unwrap();
            costs.push(started.elapsed());
            assert_eq!(listed.len(), 500);
        }
        costs.sort();
        println!("{name}: p50 {:?}, max {:?}", costs[5], costs[9]);
    }
}
