//! The golden-script runner the pure state machines' tests share (the
//! store's set state and arbiter, the AllocSvr's control loop, the range
//! mover): every `*.golden` file of a directory is a script whose lines
//! the machine under test answers (its answers written after each command
//! as `> ` lines); the file must equal what running it prints. With
//! `UPDATE_GOLDEN` set the files are rewritten instead, to review the
//! change as a diff.

use std::path::{Path, PathBuf};

/// Runs every `*.golden` script in `dir` through `run` and returns the
/// scripts whose output differs from the file (printing each output);
/// with `UPDATE_GOLDEN` set, rewrites them and returns none. A directory
/// without scripts is an error, so a moved directory cannot pass by
/// running nothing.
pub fn check_dir(dir: &Path, run: impl Fn(&str) -> String) -> Result<Vec<PathBuf>, String> {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut failed = Vec::new();
    let mut scripts = 0;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("golden") {
            continue;
        }
        scripts += 1;
        let input =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let got = run(&input);
        if got == input {
            continue;
        }
        if update {
            std::fs::write(&path, &got).map_err(|e| format!("{}: {e}", path.display()))?;
        } else {
            eprintln!("--- {} differs; got:\n{got}", path.display());
            failed.push(path);
        }
    }
    if scripts == 0 {
        return Err(format!("no golden scripts in {}", dir.display()));
    }
    Ok(failed)
}

/// [`check_dir`] as a test: panics naming every script that differs.
pub fn assert_dir(dir: &Path, run: impl Fn(&str) -> String) {
    let failed = check_dir(dir, run).unwrap_or_else(|e| panic!("{e}"));
    assert!(failed.is_empty(), "golden mismatch: {failed:?}");
}
