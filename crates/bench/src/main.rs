//! `swarmd-bench`: the load generator of the swarmd benchmark. It talks to
//! the daemon over HTTP, WebSocket and MCP only (never links the server), reads
//! the daemon's CPU time and RSS from `/proc`, and prints Markdown tables
//! for `docs/benchmarks.md`. Exit status: 0 when every run finished without
//! an error, 1 when a run saw errors, 2 when the benchmark itself failed.

mod cleanup;
mod cli;
mod config;
mod daemon;
mod flow_defs;
mod flow_load;
mod flow_recovery;
mod http_load;
mod idle;
mod machine;
mod mcp;
mod measure;
mod pacer;
mod plan;
mod procfs;
mod remote_pool;
mod report;
mod session;
mod stats;
mod subagent;
mod ws_delegated;

use std::process::ExitCode;

use clap::Parser;

/// jemalloc, as in the daemon: the generator shares the machine with it, and
/// glibc malloc cost it 3–6 % of its CPU per task.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let runtime = match cli.threads {
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n.max(1))
            .enable_all()
            .build(),
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("swarmd-bench: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    // Ctrl-C drops the PostgreSQL databases the run created, then exits.
    runtime.spawn(cleanup::drop_databases_on_ctrl_c());
    match runtime.block_on(plan::run(cli)) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(errors) => {
            eprintln!("swarmd-bench: {errors} errors");
            ExitCode::from(1)
        }
        Err(error) => {
            eprintln!("swarmd-bench: {error:#}");
            ExitCode::from(2)
        }
    }
}
