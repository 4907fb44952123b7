//! Faults: what each one does, and running them at their times.

use std::path::Path;
use std::time::{Duration, Instant};

use seqsvr_store_api::ReadClient;
use serde::{Deserialize, Serialize};

use crate::error::{Context, Error, Result};

/// The fault actions, as named in `AT:ACTION:TARGET`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ActionKind {
    /// SIGKILL a dev process.
    Kill,
    /// SIGSTOP a dev process.
    Stop,
    /// SIGCONT a dev process.
    Cont,
    /// Cut a dev store replica off from its peers.
    Isolate,
    /// Undo `isolate`.
    Heal,
    /// Run a shell command.
    Exec,
}

/// What a fault does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// SIGKILL a dev process (by name, or `store-leader`).
    Kill(String),
    /// SIGSTOP a dev process.
    Stop(String),
    /// SIGCONT a dev process.
    Cont(String),
    /// Cut a dev store replica off from its peers (clients still reach it).
    Isolate(String),
    /// Undo `Isolate`.
    Heal(String),
    /// Run a shell command.
    Exec(String),
}

impl Action {
    /// The action `kind` on `target` (a process name, or a command).
    pub fn new(kind: ActionKind, target: String) -> Action {
        match kind {
            ActionKind::Kill => Action::Kill(target),
            ActionKind::Stop => Action::Stop(target),
            ActionKind::Cont => Action::Cont(target),
            ActionKind::Isolate => Action::Isolate(target),
            ActionKind::Heal => Action::Heal(target),
            ActionKind::Exec => Action::Exec(target),
        }
    }
}

/// A fault at a time after the drill starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// When, after the start (in ms, in JSON).
    #[serde(serialize_with = "ser_ms", deserialize_with = "de_ms")]
    pub at: Duration,
    /// What.
    pub action: Action,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

fn de_ms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let ms = f64::deserialize(d)?;
    Duration::try_from_secs_f64(ms / 1000.0).map_err(serde::de::Error::custom)
}

/// A fault as it was run.
#[derive(Debug, Clone)]
pub(super) struct Applied {
    /// The fault.
    pub fault: Fault,
    /// When it ran.
    pub at: Instant,
    /// What it did (or why it failed).
    pub outcome: String,
    /// Whether it happened (see `FaultReport::applied`).
    pub applied: bool,
}

/// Where the faults act.
pub(super) struct Targets<'a> {
    /// Where `seqsvr dev` keeps its pid files and replica directories.
    pub dev_dir: &'a Path,
    /// The store group (to find `store-leader`).
    pub store: &'a ReadClient,
}

/// Runs the faults at their times after `t0`, then waits until `end`;
/// returns what happened and when, in time order.
pub(super) async fn run_faults(
    faults: &[Fault],
    targets: Targets<'_>,
    t0: Instant,
    end: Instant,
) -> Vec<Applied> {
    let mut faults = faults.to_vec();
    faults.sort_by_key(|f| f.at);
    let mut done = Vec::new();
    for fault in faults {
        tokio::time::sleep_until((t0 + fault.at).into()).await;
        let at = Instant::now();
        let (outcome, applied) = match act(&fault.action, &targets).await {
            Ok(s) => (s, true),
            Err(e) => (format!("FAILED: {e}"), false),
        };
        done.push(Applied {
            fault,
            at,
            outcome,
            applied,
        });
    }
    tokio::time::sleep_until(end.into()).await;
    done
}

async fn act(action: &Action, targets: &Targets<'_>) -> Result<String> {
    let (name, sig) = match action {
        Action::Isolate(n) => return partition(n, true, targets).await,
        Action::Heal(n) => return partition(n, false, targets).await,
        Action::Kill(n) => (n, libc::SIGKILL),
        Action::Stop(n) => (n, libc::SIGSTOP),
        Action::Cont(n) => (n, libc::SIGCONT),
        Action::Exec(cmd) => {
            let out = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .output()
                .await
                .map_err(|e| Error::io(format!("running `{cmd}`"), e))?;
            let said = format!("`{cmd}` exited with {}", out.status);
            if !out.status.success() {
                // The command's own words say why it did not happen (their
                // end, if they are long).
                let err = String::from_utf8_lossy(&out.stderr);
                let err = err.trim();
                let err = match err.char_indices().rev().nth(399) {
                    Some((i, _)) => &err[i..],
                    None => err,
                };
                return Err(Error::Failed(if err.is_empty() {
                    said
                } else {
                    format!("{said}: {err}")
                }));
            }
            return Ok(said);
        }
    };
    let name = resolve(name, targets.store).await?;
    let path = targets.dev_dir.join(format!("{name}.pid"));
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let pid: i32 = text.trim().parse().map_err(|e| {
        Error::Failed(format!(
            "{} holds no pid ({:?}): {e}",
            path.display(),
            text.trim()
        ))
    })?;
    // SAFETY: kill(2) has no memory effects; the pid is the dev cluster's child.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(Error::io(
            format!("kill({pid})"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(format!("signal {sig} sent to {name} (pid {pid})"))
}

/// Why `isolate` and `heal` cannot run in this build.
const NO_HOOKS: &str = "the isolate and heal faults need a build with fault hooks \
     (`cargo build -p seqsvr --features seqsvr-store/fault-hooks`, or the binaries \
     `cargo test` builds); release builds have none";

/// How long a replica gets to acknowledge `isolate` (it looks every 50 ms).
const ISOLATE_ACK_WAIT: Duration = Duration::from_secs(2);

/// Refuses, before the drill starts, faults this build cannot run and
/// faults the drill would not see (at or after the end of a drill of
/// `duration`).
pub(super) fn check(faults: &[Fault], duration: Duration) -> Result<()> {
    if let Some(late) = faults.iter().find(|f| f.at >= duration) {
        return Err(Error::Usage(format!(
            "the fault at {:?} ({:?}) is not before the drill's end ({duration:?}): \
             no call would see it",
            late.at, late.action
        )));
    }
    let partitions = faults
        .iter()
        .any(|f| matches!(f.action, Action::Isolate(_) | Action::Heal(_)));
    if partitions && seqsvr_store::fault::isolate_file().is_none() {
        return Err(Error::Usage(NO_HOOKS.into()));
    }
    Ok(())
}

/// Cuts dev store replica `name` off from its peers (`isolate`), or heals
/// it, through its partition file (see `docs/architecture/failover.md`).
/// `isolate` waits for the replica to acknowledge; one that does not (a
/// stopped process, or a binary without the hook) is left as it was.
async fn partition(name: &str, isolate: bool, targets: &Targets<'_>) -> Result<String> {
    let file = seqsvr_store::fault::isolate_file().ok_or_else(|| Error::Usage(NO_HOOKS.into()))?;
    let name = resolve(name, targets.store).await?;
    let path = targets.dev_dir.join(&name).join(file);
    if !isolate {
        std::fs::remove_file(&path)
            .map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
        return Ok(format!("{name} healed"));
    }
    std::fs::write(&path, b"").map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    let deadline = Instant::now() + ISOLATE_ACK_WAIT;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(25)).await;
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > 0) {
            return Ok(format!("{name} cut off from its peers"));
        }
    }
    let _ = std::fs::remove_file(&path);
    Err(Error::Failed(format!(
        "{name} did not acknowledge the partition within {ISOLATE_ACK_WAIT:?} \
         (stopped, not running, or its binary has no fault hooks); left connected"
    )))
}

/// `store-leader` → `store-<id>`; other names as they are.
async fn resolve(name: &str, store: &ReadClient) -> Result<String> {
    if name != "store-leader" {
        return Ok(name.to_string());
    }
    let l = store
        .leader_status()
        .await
        .context("no store leader to find")?;
    Ok(format!("store-{}", l.node_id))
}

#[cfg(test)]
mod tests {
    use seqsvr_store::fault::{Isolation, ISOLATE_ACK, ISOLATE_FILE};
    use seqsvr_store_api::client::plaintext;

    use super::*;

    /// A dev dir with an (empty) replica directory `store-1`.
    fn dev_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("store-1")).unwrap();
        d
    }

    #[tokio::test]
    async fn isolate_waits_for_the_replica_and_heal_undoes_it() {
        let d = dev_dir();
        // Nothing answers here: only `store-leader` would need the store.
        let store = ReadClient::new(&["127.0.0.1:1".into()], &plaintext()).unwrap();
        let targets = Targets {
            dev_dir: d.path(),
            store: &store,
        };
        let file = d.path().join("store-1").join(ISOLATE_FILE);
        // No replica watches the file: refused, and nothing is left behind.
        let err = partition("store-1", true, &targets).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("did not acknowledge the partition"),
            "{err}"
        );
        assert!(!file.exists());
        // A replica with the hook acknowledges.
        let iso = Isolation::default();
        let watcher = tokio::spawn(iso.clone().watch(file.clone()));
        let said = partition("store-1", true, &targets).await.unwrap();
        assert_eq!(said, "store-1 cut off from its peers");
        assert!(iso.is_on());
        assert_eq!(std::fs::read(&file).unwrap(), ISOLATE_ACK);
        assert_eq!(
            partition("store-1", false, &targets).await.unwrap(),
            "store-1 healed"
        );
        assert!(!file.exists());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!iso.is_on());
        watcher.abort();
    }

    #[test]
    fn partitions_are_allowed_in_a_build_with_hooks() {
        let isolate = Fault {
            at: Duration::ZERO,
            action: Action::Isolate("store-1".into()),
        };
        let long = Duration::from_secs(10);
        assert_eq!(
            check(std::slice::from_ref(&isolate), long).is_ok(),
            seqsvr_store::fault::FAULT_HOOKS
        );
        let kill = Fault {
            at: Duration::ZERO,
            action: Action::Kill("alloc-1".into()),
        };
        assert!(check(std::slice::from_ref(&kill), long).is_ok());
    }

    #[test]
    fn faults_the_drill_would_not_see_are_refused() {
        let at = |ms| Fault {
            at: Duration::from_millis(ms),
            action: Action::Exec("true".into()),
        };
        let d = Duration::from_secs(2);
        assert!(check(&[at(0), at(1999)], d).is_ok());
        for late in [2000, 5000] {
            let err = check(&[at(0), at(late)], d).unwrap_err().to_string();
            assert!(err.contains("is not before the drill's end (2s)"), "{err}");
        }
    }

    #[tokio::test]
    async fn a_command_that_fails_is_a_fault_that_did_not_happen() {
        let d = dev_dir();
        let store = ReadClient::new(&["127.0.0.1:1".into()], &plaintext()).unwrap();
        let targets = Targets {
            dev_dir: d.path(),
            store: &store,
        };
        let said = act(&Action::Exec("true".into()), &targets).await.unwrap();
        assert_eq!(said, "`true` exited with exit status: 0");
        let err = act(
            &Action::Exec("echo no such container >&2; exit 3".into()),
            &targets,
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.ends_with("exited with exit status: 3: no such container"),
            "{err}"
        );
        let err = act(&Action::Kill("alloc-9".into()), &targets)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("alloc-9.pid"), "{err}");
    }
}
