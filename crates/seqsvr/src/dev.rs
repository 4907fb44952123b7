//! `seqsvr dev`: a whole local cluster on one machine, nothing to configure.
//!
//! Each server is its own child process (so a drill can kill or pause one),
//! its config generated under the data directory on first start and reused
//! afterwards, its log in `<dir>/logs/`, its pid in `<dir>/<name>.pid`.
//! Ctrl-C (or SIGTERM) stops every child; running again resumes from the
//! same data.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;
use seqsvr_core::SetSpec;
use seqsvr_store::node::{Member, RaftTiming};
use seqsvr_store::StoreConfig;
use tokio::process::{Child, Command};

use crate::defaults::{DEV_STORES, DEV_UID_END};

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
    }
}

/// Writes `cfg` to `path` unless a config is already there (a resumed
/// cluster keeps its config); returns the path.
fn ensure_config(path: PathBuf, cfg: &StoreConfig) -> anyhow::Result<PathBuf> {
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

/// Runs the dev cluster until Ctrl-C.
pub async fn run(dir: PathBuf) -> anyhow::Result<()> {
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let mut children = Vec::new();
    for (id, addr) in DEV_STORES {
        let name = format!("store-{id}");
        let cfg = ensure_config(
            dir.join(format!("{name}.toml")),
            &dev_store_config(&dir, id),
        )?;
        let cfg = cfg.to_string_lossy().into_owned();
        children.push((
            name.clone(),
            spawn(&dir, &name, &["store", "--config", &cfg])?,
        ));
        println!("store {id}      {addr}");
    }
    println!("data and logs  {}", dir.display());
    println!("try:           seqctl status");
    println!("stop:          Ctrl-C");
    shutdown_signal().await;
    println!("stopping…");
    for (name, child) in &mut children {
        if let Some(pid) = child.id() {
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
        let _ = child.wait().await;
        let _ = std::fs::remove_file(dir.join(format!("{name}.pid")));
    }
    Ok(())
}
