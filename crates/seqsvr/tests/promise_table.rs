//! The promise → tests table (`docs/architecture/promises.md`) names only
//! tests, files and functions that exist.
//!
//! A table that names a test which was renamed or removed claims a check
//! nobody runs; this reads every table row of the chapter and finds each
//! name it cites:
//!
//! - `path/to/file.rs::name` (and `::name` after it, in the same cell):
//!   the file exists and defines `fn name`; a bare `other.rs::name` after
//!   it is in the same folder;
//! - `path/to/file.rs`, `path/to/dir/`, `path/to/x.golden` (and a bare
//!   `y.golden` after it, in the same cell: same folder): it exists;
//!   a path is taken from the workspace root, else from `crates/`;
//! - `Type::method`: some source file defines `fn method` (or a field
//!   `method`).
//!
//! Other spans (knob names, error kinds, prose in backticks) are left
//! alone.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() && name != "target" && !name.starts_with('.') {
            sources(&p, out);
        } else if name.ends_with(".rs") {
            if let Ok(text) = fs::read_to_string(&p) {
                out.push((p, text));
            }
        }
    }
}

/// Whether `text` defines a function `name`.
fn defines(text: &str, name: &str) -> bool {
    let pat = format!("fn {name}");
    text.match_indices(&pat).any(|(i, _)| {
        let next = text[i + pat.len()..].chars().next();
        matches!(next, Some('(') | Some('<'))
    })
}

/// The path `p` names: from the workspace root, else from `crates/`.
fn resolve(p: &str) -> Option<PathBuf> {
    let root = root();
    [root.join(p), root.join("crates").join(p)]
        .into_iter()
        .find(|c| c.exists())
}

/// The backticked spans of a line.
fn spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What is wrong with the names one table cell cites.
fn check_cell(cell: &str, all: &[(PathBuf, String)], problems: &mut Vec<String>) {
    let mut file: Option<PathBuf> = None;
    let mut folder: Option<PathBuf> = None;
    for span in spans(cell) {
        let span = span.trim();
        if let Some(name) = span.strip_prefix("::") {
            match &file {
                Some(f) if is_ident(name) => {
                    let text = fs::read_to_string(f).unwrap_or_default();
                    if !defines(&text, name) {
                        problems.push(format!("{}: no fn {name}", f.display()));
                    }
                }
                _ => problems.push(format!("`{span}` with no file before it in: {cell}")),
            }
        } else if let Some((path, name)) = span.split_once(".rs::") {
            let path = format!("{path}.rs");
            // A bare file name after another file: in that file's folder.
            let beside = (file.as_ref().and_then(|f| f.parent()))
                .map(|d| d.join(&path))
                .filter(|p| !path.contains('/') && p.exists());
            match beside.or_else(|| resolve(&path)) {
                Some(f) => {
                    let text = fs::read_to_string(&f).unwrap_or_default();
                    if !defines(&text, name) {
                        problems.push(format!("{path}: no fn {name}"));
                    }
                    file = Some(f);
                }
                None => problems.push(format!("no file {path}")),
            }
        } else if span.contains('/') && !span.contains(' ') && !span.contains("://") {
            let path = span.trim_end_matches(['.', ',']);
            let path = path.split_once(" (").map_or(path, |(p, _)| p);
            if !(path.ends_with(".rs") || path.ends_with(".golden") || path.ends_with('/')) {
                continue;
            }
            match resolve(path) {
                Some(f) => {
                    if path.ends_with(".golden") {
                        folder = f.parent().map(Path::to_path_buf);
                    }
                    if path.ends_with(".rs") {
                        file = Some(f);
                    }
                }
                None => problems.push(format!("no file {path}")),
            }
        } else if span.ends_with(".golden") && is_ident(span.trim_end_matches(".golden")) {
            match &folder {
                Some(d) if d.join(span).exists() => {}
                Some(d) => problems.push(format!("no file {}", d.join(span).display())),
                None => problems.push(format!("`{span}` with no folder before it in: {cell}")),
            }
        } else if let Some((ty, method)) = span.split_once("::") {
            let typed = ty.starts_with(|c: char| c.is_ascii_uppercase());
            let found = |text: &str| {
                defines(text, method)
                    || text.contains(&format!("pub {method}:"))
                    || text.contains(&format!("pub(crate) {method}:"))
            };
            if typed && is_ident(ty) && is_ident(method) && !all.iter().any(|(_, t)| found(t)) {
                problems.push(format!("no fn or field {method} (for {span})"));
            }
        }
    }
}

#[test]
fn every_name_the_promise_table_cites_exists() {
    let doc = root().join("docs/architecture/promises.md");
    let text = fs::read_to_string(&doc).expect("docs/architecture/promises.md");
    let mut all = Vec::new();
    for dir in ["crates", "tests"] {
        sources(&root().join(dir), &mut all);
    }
    assert!(all.len() > 100, "the sources were not found");
    let mut problems = Vec::new();
    let mut cited = 0;
    for line in text.lines().filter(|l| l.starts_with('|')) {
        for cell in line.split('|') {
            cited += spans(cell).len();
            check_cell(cell, &all, &mut problems);
        }
    }
    assert!(cited > 100, "the table was not read ({cited} names)");
    assert!(
        problems.is_empty(),
        "the promise table cites what does not exist:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_check_finds_what_is_missing() {
    let mut all = Vec::new();
    sources(&root().join("crates/core"), &mut all);
    let mut problems = Vec::new();
    check_cell(
        "`crates/core/src/rng.rs::same_seed_same_stream_and_ranges_hold`, `::no_such_test`; \
         `crates/store-core/src/testdata/handoff.golden`, `nothing.golden`; `no/such/file.rs`; \
         `Rng::no_such_method`",
        &all,
        &mut problems,
    );
    assert_eq!(problems.len(), 4, "{problems:#?}");
}
