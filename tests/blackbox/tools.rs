//! The outside tools some black-box tests drive (the Python MCP client,
//! upstream's `mse`, the LLM CLIs, Chromium's driver), each installed by a
//! script of the repository that is idempotent and caches what it installs,
//! and prints the path the tests use.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::daemon::repo_root;

/// The path `script` (relative to the repository root) prints, run once per
/// test run and kept in `cell`. A failed install fails every test that
/// needs `what`, with the script's own message: these tests never skip.
pub(crate) fn installed(
    cell: &'static OnceLock<Result<PathBuf, String>>,
    script: &str,
    what: &str,
) -> PathBuf {
    cell.get_or_init(|| {
        let script = repo_root().join(script);
        let output = std::process::Command::new("bash")
            .arg(&script)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{} failed:\n{}",
                script.display(),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(PathBuf::from(
            String::from_utf8_lossy(&output.stdout).trim().to_owned(),
        ))
    })
    .clone()
    .unwrap_or_else(|e| panic!("{what} is not available: {e}"))
}
