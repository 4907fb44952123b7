//! Names the commit the binaries were built from, for
//! `seqsvr_build_info{version,commit}`: `SEQSVR_COMMIT` when the build
//! sets it (the container build, which has no repository), else `git
//! rev-parse` of the source tree, else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=SEQSVR_COMMIT");
    let commit = std::env::var("SEQSVR_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| {
            // Rebuild when HEAD moves (a checkout or a new commit).
            if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
                println!("cargo:rerun-if-changed={dir}/HEAD");
                println!("cargo:rerun-if-changed={dir}/logs/HEAD");
            }
            git(&["rev-parse", "--short=12", "HEAD"])
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SEQSVR_COMMIT={commit}");
}
