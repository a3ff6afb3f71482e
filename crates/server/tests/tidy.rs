//! Repository-wide checks that no compiler lint covers: every Rust file under
//! `crates/` and `tests/` opens with a `//!` line saying what it is for.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file below `dir`, skipping `target/` directories, sorted.
fn rust_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                if entry.file_name() != "target" {
                    pending.push(path);
                }
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The files below `root`'s `dirs` whose first line is not a `//!` comment,
/// relative to `root`.
fn files_without_module_doc(root: &Path, dirs: &[&str]) -> io::Result<Vec<String>> {
    let mut missing = Vec::new();
    for dir in dirs {
        for path in rust_files(&root.join(dir))? {
            let text = fs::read_to_string(&path)?;
            if !text
                .lines()
                .next()
                .is_some_and(|line| line.starts_with("//!"))
            {
                let relative = path.strip_prefix(root).unwrap_or(&path);
                missing.push(relative.display().to_string());
            }
        }
    }
    Ok(missing)
}

#[test]
fn every_rust_file_opens_with_a_module_doc_line() {
    let missing = files_without_module_doc(&repo_root(), &["crates", "tests"]).unwrap();
    assert!(
        missing.is_empty(),
        "these files must open with a `//!` line saying what they are for:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn the_check_names_each_file_without_a_module_doc_and_skips_target() {
    let root = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let path = root.path().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    };
    write("crates/a/src/lib.rs", "//! Documented.\n");
    write(
        "crates/a/src/plain.rs",
        "// A line comment is not a module doc.\n//! Too late.\n",
    );
    write("crates/a/src/empty.rs", "");
    write("crates/a/target/debug/build/out.rs", "fn generated() {}\n");
    write("crates/a/README.md", "not Rust\n");
    write(
        "tests/outer.rs",
        "\n//! A blank first line does not count.\n",
    );
    write("other/ignored.rs", "fn outside() {}\n");

    let missing = files_without_module_doc(root.path(), &["crates", "tests"]).unwrap();
    assert_eq!(
        missing,
        [
            "crates/a/src/empty.rs",
            "crates/a/src/plain.rs",
            "tests/outer.rs"
        ]
    );
}
