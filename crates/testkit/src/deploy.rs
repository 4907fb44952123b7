//! How the deployment suite runs commands (with a time limit, killing
//! the whole process group when it is up) and whether it can run its
//! parts that need outside tools here: skip or fail ([`decide`]).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Runs `cmd` to completion, killing its process group after `limit`.
pub fn run(cmd: &mut Command, limit: Duration) -> Output {
    use std::os::unix::process::CommandExt;
    let shown = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("{shown}: {e}"));
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap_or_else(|e| panic!("{shown}: {e}")),
        Err(_) => {
            // SAFETY: kill(2) on the process group this test started.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            panic!("{shown} did not finish within {limit:?}");
        }
    }
}

/// Runs `cmd`; panics with its output unless it succeeds; returns stdout.
pub fn ok(cmd: &mut Command, limit: Duration) -> String {
    let shown = format!("{cmd:?}");
    let out = run(cmd, limit);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{shown} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs a command, ignoring how it ends (teardown).
pub fn quietly(cmd: &mut Command) {
    let _ = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The opt-out: with `SEQSVR_SKIP_DEPLOY=1` the parts of the suite that
/// need tools beyond cargo (Docker and compose, the Kubernetes validator's
/// python3) are skipped on purpose, also in CI.
pub const OPT_OUT: &str = "SEQSVR_SKIP_DEPLOY";

/// What to do about a part of the suite that needs outside tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The tools are there: run it.
    Run,
    /// Skip it, and say why (passes).
    Skip(String),
    /// Fail, and say why: in CI a missing tool is a failure, not a skip.
    Fail(String),
}

/// Whether `CI` (as CI services set it: `true`, `1`, any name) says this
/// is a CI run; unset, empty, `false` and `0` say it is not.
pub fn is_ci(ci: Option<&str>) -> bool {
    ci.map(str::trim)
        .is_some_and(|v| !v.is_empty() && !v.eq_ignore_ascii_case("false") && v != "0")
}

/// Skip or fail: `ci` is the `CI` variable, `opt_out` the
/// [`OPT_OUT`] variable, `missing` why the tools cannot be used here
/// (`None`: they can).
///
/// The opt-out wins (a skip asked for is intended); then tools that are
/// there run; a missing tool fails under CI (a skip there would pass a
/// suite that tested nothing) and is skipped elsewhere (a developer's
/// machine without Docker).
pub fn decide(ci: Option<&str>, opt_out: Option<&str>, missing: Option<String>) -> Decision {
    if opt_out.is_some_and(|v| v.trim() == "1") {
        return Decision::Skip(format!("{OPT_OUT}=1"));
    }
    match missing {
        None => Decision::Run,
        Some(why) if is_ci(ci) => Decision::Fail(format!(
            "{why}; CI is set, so this is a failure, not a skip \
             (install it, or set {OPT_OUT}=1 to skip on purpose)"
        )),
        Some(why) => Decision::Skip(why),
    }
}

/// [`decide`] with this process's environment.
pub fn decide_here(missing: impl FnOnce() -> Option<String>) -> Decision {
    let ci = std::env::var("CI").ok();
    let opt_out = std::env::var(OPT_OUT).ok();
    // The opt-out needs no probe.
    let missing = if opt_out.as_deref().is_some_and(|v| v.trim() == "1") {
        None
    } else {
        missing()
    };
    decide(ci.as_deref(), opt_out.as_deref(), missing)
}

/// Runs `bin args`; why it cannot be used, if it cannot.
fn probe(bin: &str, args: &[&str]) -> Result<(), String> {
    match Command::new(bin).args(args).stdin(Stdio::null()).output() {
        Err(e) => Err(format!("`{bin}` cannot be run: {e}")),
        Ok(o) if !o.status.success() => Err(format!(
            "`{bin} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => Ok(()),
    }
}

/// Why the container suite cannot run here (no Docker daemon, no
/// compose), if it cannot.
pub fn docker_missing() -> Option<String> {
    if let Err(why) = probe("docker", &["info", "--format", "{{.ServerVersion}}"]) {
        return Some(why);
    }
    // docker-compose 1.x, or the compose plugin.
    let compose = probe("docker-compose", &["version", "--short"])
        .or_else(|_| probe("docker", &["compose", "version", "--short"]));
    compose.err()
}

/// Why the Kubernetes validation cannot run here (no python3 for
/// `deploy/k8s/validate.sh`'s validator), if it cannot.
pub fn validator_missing() -> Option<String> {
    probe("python3", &["--version"]).err()
}

pub fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_or_fail_table() {
        let no_docker = || Some("`docker` cannot be run: No such file or directory".to_string());
        let fail = |why: &str| {
            Decision::Fail(format!(
                "{why}; CI is set, so this is a failure, not a skip \
                 (install it, or set SEQSVR_SKIP_DEPLOY=1 to skip on purpose)"
            ))
        };
        let why = no_docker().unwrap();
        let cases = [
            // (CI, SEQSVR_SKIP_DEPLOY, missing) -> decision
            (None, None, None, Decision::Run),
            (Some("true"), None, None, Decision::Run),
            (None, None, no_docker(), Decision::Skip(why.clone())),
            (Some("true"), None, no_docker(), fail(&why)),
            (Some("1"), None, no_docker(), fail(&why)),
            (Some("yes"), None, no_docker(), fail(&why)),
            (Some("TRUE"), None, no_docker(), fail(&why)),
            (Some(""), None, no_docker(), Decision::Skip(why.clone())),
            (
                Some("false"),
                None,
                no_docker(),
                Decision::Skip(why.clone()),
            ),
            (
                Some("False"),
                None,
                no_docker(),
                Decision::Skip(why.clone()),
            ),
            (Some("0"), None, no_docker(), Decision::Skip(why.clone())),
            // The opt-out is a skip on purpose, in CI too, tools or not.
            (
                Some("true"),
                Some("1"),
                no_docker(),
                Decision::Skip("SEQSVR_SKIP_DEPLOY=1".into()),
            ),
            (
                Some("true"),
                Some("1"),
                None,
                Decision::Skip("SEQSVR_SKIP_DEPLOY=1".into()),
            ),
            (
                None,
                Some("1"),
                None,
                Decision::Skip("SEQSVR_SKIP_DEPLOY=1".into()),
            ),
            // Only `1` opts out.
            (Some("true"), Some("0"), no_docker(), fail(&why)),
            (Some("true"), Some("yes"), no_docker(), fail(&why)),
            (Some("true"), Some(""), None, Decision::Run),
        ];
        for (ci, opt_out, missing, want) in cases {
            assert_eq!(
                decide(ci, opt_out, missing.clone()),
                want,
                "CI={ci:?} SEQSVR_SKIP_DEPLOY={opt_out:?} missing={missing:?}"
            );
        }
    }
}
