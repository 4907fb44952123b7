//! How the deployment suite runs commands (with a time limit, killing
//! the whole process group when it is up) and whether it can run its
//! container part here at all.

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

/// Why the container suite cannot run here, if it cannot.
pub fn skip_reason() -> Option<String> {
    if std::env::var("SEQSVR_SKIP_DEPLOY").is_ok_and(|v| v == "1") {
        return Some("SEQSVR_SKIP_DEPLOY=1".into());
    }
    let probe = |bin: &str, args: &[&str]| -> Result<(), String> {
        match Command::new(bin).args(args).stdin(Stdio::null()).output() {
            Err(e) => Err(format!("`{bin}` cannot be run: {e}")),
            Ok(o) if !o.status.success() => Err(format!(
                "`{bin} {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Ok(_) => Ok(()),
        }
    };
    if let Err(why) = probe("docker", &["info", "--format", "{{.ServerVersion}}"]) {
        return Some(why);
    }
    // docker-compose 1.x, or the compose plugin.
    let compose = probe("docker-compose", &["version", "--short"])
        .or_else(|_| probe("docker", &["compose", "version", "--short"]));
    compose.err()
}

pub fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}
