//! Faults: what each one does, and running them at their times.

use std::path::Path;
use std::time::{Duration, Instant};

use seqsvr_store_api::ReadClient;
use serde::Serialize;

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    /// When, after the start.
    #[serde(serialize_with = "ser_ms")]
    pub at: Duration,
    /// What.
    pub action: Action,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
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
        let outcome = match act(&fault.action, &targets).await {
            Ok(s) => s,
            Err(e) => format!("FAILED: {e:#}"),
        };
        done.push(Applied { fault, at, outcome });
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
            return Ok(format!("`{cmd}` exited with {}", out.status));
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

/// Cuts dev store replica `name` off from its peers (`isolate`), or heals
/// it, through its partition file (see `docs/architecture/failover.md`).
async fn partition(name: &str, isolate: bool, targets: &Targets<'_>) -> Result<String> {
    let name = resolve(name, targets.store).await?;
    let path = targets
        .dev_dir
        .join(&name)
        .join(seqsvr_store::node::ISOLATE_FILE);
    if isolate {
        std::fs::write(&path, b"")
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        return Ok(format!("{name} cut off from its peers"));
    }
    std::fs::remove_file(&path)
        .map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
    Ok(format!("{name} healed"))
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
