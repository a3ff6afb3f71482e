//! The `swarmd` binary: parses the command line, installs logging, runs the
//! subcommand on a tokio runtime and turns its outcome into an exit status.
//! The daemon's wiring is `commands::serve`.

use std::process::ExitCode;

use clap::Parser;
use swarmd_config::environment::Environment;
use swarmd_server::cli::{Cli, Command, exit};
use swarmd_server::commands;
use swarmd_server::telemetry;

/// jemalloc serves the daemon's allocations: its per-thread caches keep the
/// tokio workers from contending on glibc's arena locks when one worker frees
/// what another allocated, which every request does (docs/benchmarks.md).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    // Every file swarmd creates (database, WAL, blobs, keys, admin token)
    // is private whatever umask it was started with; the agents it starts
    // inherit this umask, as under the shipped unit's `UMask=0077`.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let code = if error.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
            // Printing help or a usage error can only fail on a closed stream.
            let _ = error.print();
            return ExitCode::from(code);
        }
    };
    // A process agent's supervisor starts no runtime, no logger, no thread.
    let command = match cli.command {
        Command::Supervise(args) => return ExitCode::from(commands::supervise(&args)),
        command => command,
    };
    let env = Environment::from_process();
    if let Err(error) = telemetry::init(cli.log_format, env.get("RUST_LOG")) {
        eprintln!("swarmd: {error}");
        return ExitCode::from(exit::CONFIG);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("swarmd: cannot start the async runtime: {error}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let relay = matches!(command, Command::Mcp(_));
    let outcome = runtime.block_on(commands::execute(command, &env));
    if relay {
        // `swarmd mcp` reads stdin on a blocking thread that nothing can
        // interrupt: a relay stopped by a signal does not wait for it.
        runtime.shutdown_background();
    }
    match outcome {
        Ok(code) => ExitCode::from(code),
        // `swarmd task … | head`: the reader has all it wanted.
        Err(error) if error.is_broken_pipe() => ExitCode::from(exit::BROKEN_PIPE),
        Err(error) => {
            // One line: an invalid configuration must print exactly one.
            // The text may quote what a client, a worker or a file held:
            // no escape sequence of it reaches the terminal.
            eprintln!(
                "swarmd: {}",
                swarmd_client::render::clean(&error.to_string(), usize::MAX)
            );
            ExitCode::from(error.exit_code())
        }
    }
}
