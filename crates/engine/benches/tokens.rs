//! Token mint and verify throughput (the floor is 5 µs each: docs/benchmarks.md).
//!
//! Run with `cargo bench -p swarmd-engine --bench tokens`. Each operation runs
//! a warm-up, then `ROUNDS` rounds of `ITERATIONS` timed calls.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use swarmd_engine::auth::{AuthorityConfig, Keyring, TokenAuthority};
use swarmd_engine::clock::SystemClock;
use swarmd_engine::gate::{Role, Verb};
use swarmd_engine::ids::TaskId;

const ITERATIONS: u32 = 200_000;
const ROUNDS: usize = 5;
const WARMUP: u32 = 20_000;
const BUDGET_NS: f64 = 5_000.0;

/// Runs `op` for `ROUNDS` rounds of `ITERATIONS` calls and prints the fastest,
/// median and slowest round in ns/op: the machine is shared, so the fastest
/// round is the best estimate of the code's own cost.
fn measure(name: &str, mut op: impl FnMut(u32)) {
    for i in 0..WARMUP {
        op(i);
    }
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for i in 0..ITERATIONS {
                op(i);
            }
            start.elapsed().as_nanos() as f64 / f64::from(ITERATIONS)
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    let (best, median, worst) = (rounds[0], rounds[ROUNDS / 2], rounds[ROUNDS - 1]);
    let verdict = if median <= BUDGET_NS {
        "ok"
    } else {
        "OVER BUDGET"
    };
    println!(
        "{name:<26} best {best:>7.0}  median {median:>7.0}  worst {worst:>7.0} ns/op  \
         ({ROUNDS} x {ITERATIONS}; budget 5000 ns: {verdict})"
    );
}

fn main() {
    let mut keyring = Keyring::generate();
    keyring.rotate();
    let auth = TokenAuthority::new(keyring, Arc::new(SystemClock), AuthorityConfig::default());
    let task = TaskId::new();

    let worker = auth.mint_worker(task, 1, 1800).expect("mint");
    let senior = auth.mint_role(Role::Senior, 3600, None).expect("mint");
    println!(
        "worker token: {} bytes, senior token: {} bytes",
        worker.token.expose().len(),
        senior.token.expose().len()
    );

    measure("mint_worker", |i| {
        black_box(auth.mint_worker(task, i, 1800).expect("mint"));
    });
    measure("mint (prepared claims)", |_| {
        black_box(auth.mint(black_box(&worker.claims)).expect("mint"));
    });
    measure("verify (worker)", |_| {
        black_box(
            auth.verify(black_box(worker.token.expose()))
                .expect("verify"),
        );
    });
    measure("verify_for (worker, gate)", |_| {
        black_box(
            auth.verify_for(black_box(worker.token.expose()), Verb::PostResult)
                .expect("verify"),
        );
    });
    let mut forged = worker.token.expose().to_owned().into_bytes();
    let last = forged.len() - 2;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    measure("verify (bad signature)", |_| {
        black_box(auth.verify_bytes(black_box(&forged)).unwrap_err());
    });
}
