//! `seqsvr dev`: a whole local cluster on one machine, nothing to configure:
//! 3 store replicas and 2 AllocSvrs.
//!
//! Each server is its own child process (so a drill can kill or pause one),
//! its config generated under the data directory on first start and reused
//! afterwards, its log in `<dir>/logs/`, its pid in `<dir>/<name>.pid`.
//! Ctrl-C (or SIGTERM) stops every child; running again resumes from the
//! same data.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;
use seqsvr_alloc::node::AllocNodeConfig;
use seqsvr_core::SetSpec;
use seqsvr_store::arbiter::LeaseConfig;
use seqsvr_store::node::{InitialAlloc, Member, RaftTiming};
use seqsvr_store::StoreConfig;
use tokio::process::{Child, Command};

use crate::defaults::{dev_store_addrs, DEV_ALLOCS, DEV_STORES, DEV_UID_END};

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// The dev cluster's config for store replica `id`, data under `dir`.
pub fn dev_store_config(dir: &Path, id: u64) -> StoreConfig {
    StoreConfig {
        id,
        data_dir: dir.join(format!("store-{id}")),
        listen: None,
        members: DEV_STORES
            .iter()
            .map(|(id, addr)| Member {
                id: *id,
                addr: addr.to_string(),
            })
            .collect(),
        set: SetSpec::new(0, 0..DEV_UID_END),
        raft: RaftTiming::default(),
        lease: LeaseConfig::default(),
        allocs: dev_initial_allocs(),
    }
}

/// The dev cluster's AllocSvrs, each first routed an equal share of sections.
fn dev_initial_allocs() -> Vec<InitialAlloc> {
    let sections = SetSpec::new(0, 0..DEV_UID_END).section_count();
    let share = sections / DEV_ALLOCS.len() as u32;
    DEV_ALLOCS
        .iter()
        .enumerate()
        .map(|(i, (id, addr))| InitialAlloc {
            id: id.to_string(),
            addr: addr.to_string(),
            first: i as u32 * share,
            count: if i + 1 == DEV_ALLOCS.len() {
                sections - i as u32 * share
            } else {
                share
            },
        })
        .collect()
}

/// The dev cluster's config for AllocSvr `id` at `addr`.
pub fn dev_alloc_config(id: &str, addr: &str) -> AllocNodeConfig {
    AllocNodeConfig {
        id: id.to_string(),
        addr: addr.to_string(),
        listen: None,
        store: dev_store_addrs(),
        route_poll_ms: 250,
        renew_ms: 1000,
        wait_ms: 1000,
        raise_ahead_fraction: 0.25,
    }
}

/// Writes `cfg` to `path` unless a config is already there (a resumed
/// cluster keeps its config); returns the path.
fn ensure_config(path: PathBuf, cfg: &impl serde::Serialize) -> anyhow::Result<PathBuf> {
    if !path.exists() {
        let text = toml::to_string_pretty(cfg)?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(path)
}

/// Starts `exe args…` with output to `<dir>/logs/<name>.log`.
fn spawn(dir: &Path, name: &str, args: &[&str]) -> anyhow::Result<Child> {
    let exe = std::env::current_exe()?;
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("{name}.log")))?;
    let child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    if let Some(pid) = child.id() {
        std::fs::write(dir.join(format!("{name}.pid")), pid.to_string())?;
    }
    Ok(child)
}

/// One supervised child.
struct Supervised {
    /// Its name (`store-1`, `alloc-2`…).
    name: String,
    /// Its `seqsvr` arguments.
    args: Vec<String>,
    /// The running process.
    child: Child,
    /// When it died, if it did (restarted after the delay).
    died: Option<tokio::time::Instant>,
}

/// Runs the dev cluster until Ctrl-C. A child that dies (a drill's kill -9,
/// a crash) is started again after `restart_after`, like a supervisor would
/// (`None`: left dead); a paused child (SIGSTOP) is left alone.
pub async fn run(dir: PathBuf, restart_after: Option<std::time::Duration>) -> anyhow::Result<()> {
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let mut children = Vec::new();
    let mut start = |name: String, args: Vec<String>| -> anyhow::Result<()> {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let child = spawn(&dir, &name, &refs)?;
        children.push(Supervised {
            name,
            args,
            child,
            died: None,
        });
        Ok(())
    };
    for (id, addr) in DEV_STORES {
        let name = format!("store-{id}");
        let cfg = ensure_config(
            dir.join(format!("{name}.toml")),
            &dev_store_config(&dir, id),
        )?;
        start(
            name,
            vec![
                "store".into(),
                "--config".into(),
                cfg.to_string_lossy().into_owned(),
            ],
        )?;
        println!("store {id}      {addr}");
    }
    for (id, addr) in DEV_ALLOCS {
        let cfg = ensure_config(dir.join(format!("{id}.toml")), &dev_alloc_config(id, addr))?;
        start(
            id.to_string(),
            vec![
                "alloc".into(),
                "--config".into(),
                cfg.to_string_lossy().into_owned(),
            ],
        )?;
        println!("{id:<13}{addr}");
    }
    println!("data and logs  {}", dir.display());
    println!("try:           seqctl next 42        (prints a sequence number)");
    println!("               seqctl status");
    println!("stop:          Ctrl-C");
    let mut shutdown = std::pin::pin!(shutdown_signal());
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tick.tick() => supervise(&dir, &mut children, restart_after)?,
        }
    }
    println!("stopping…");
    // AllocSvrs first, then the store.
    for c in children.iter_mut().rev() {
        if let Some(pid) = c.child.id() {
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            // SIGCONT first so a paused child can act on SIGTERM.
            unsafe {
                libc::kill(pid as i32, libc::SIGCONT);
                libc::kill(pid as i32, libc::SIGTERM);
            }
        }
        let _ = c.child.wait().await;
        let _ = std::fs::remove_file(dir.join(format!("{}.pid", c.name)));
    }
    Ok(())
}

/// Notices dead children and restarts them once their delay has passed.
fn supervise(
    dir: &Path,
    children: &mut [Supervised],
    restart_after: Option<std::time::Duration>,
) -> anyhow::Result<()> {
    let now = tokio::time::Instant::now();
    for c in children.iter_mut() {
        if c.died.is_none() {
            if let Ok(Some(status)) = c.child.try_wait() {
                println!("{} exited ({status})", c.name);
                c.died = Some(now);
            }
        }
        match (c.died, restart_after) {
            (Some(t), Some(delay)) if now >= t + delay => {
                let refs: Vec<&str> = c.args.iter().map(String::as_str).collect();
                c.child = spawn(dir, &c.name, &refs)?;
                c.died = None;
                println!("{} restarted", c.name);
            }
            _ => {}
        }
    }
    Ok(())
}
