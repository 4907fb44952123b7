//! `seqsvr dev`: a whole local cluster on one machine, nothing to configure:
//! 3 store replicas and 2 AllocSvrs for uids, and as many for the range
//! reserved for named counters (the names set, `docs/counters.md`), each
//! serving its three planes on its own loopback ports (see
//! [`crate::defaults`]). Any AllocSvr's doors answer uids and names alike.
//!
//! Each server is its own child process (so a drill can kill or pause one),
//! its config written to `<dir>/<name>.toml` on every start (so `--tls` on
//! or off takes effect; the data directories are what a run resumes), its
//! log in `<dir>/logs/`, its pid in `<dir>/<name>.pid`. Ctrl-C (or SIGTERM)
//! stops every child; running again resumes from the same data.
//!
//! With `--tls` every plane of every process runs TLS (mutual on the peer
//! and admin planes), with a development PKI in `<dir>/pki/`: a CA made on
//! the first such run and kept, a certificate per process, and one for
//! `seqctl` as an operator.
//!
//! Every port it will bind is checked before anything starts ([`ports`]);
//! every port follows `--port-base` ([`crate::defaults`]). A child that
//! keeps dying is reported in the terminal with the end of its log
//! ([`watch`]).

pub mod ports;
pub mod watch;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use seqsvr_alloc::node::AllocNodeConfig;
use seqsvr_net::{DevPki, PlaneLimits, TlsConfig};
use seqsvr_store::node::{InitialAlloc, LeaseSection, Member, RaftTiming};
use seqsvr_store::StoreConfig;
use tokio::process::{Child, Command};

use crate::certs::{issue, Identities};
use crate::defaults::{
    dev_config_path, dev_names_span, dev_pki, dev_ports, dev_sets, dev_sets_at, dev_store_addrs,
    DevAlloc, DevSet, DevStore, DEV_NAMES_SET, DEV_OPERATOR, DEV_PORT_BASE, DEV_UID_END,
};
use crate::error::{Context, Error, Result};
use crate::outln;

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// The dev cluster's config for store replica `s`, data under `dir`, with
/// TLS files from `pki` if given.
pub fn dev_store_config(dir: &Path, s: &DevStore, pki: Option<&DevPki>) -> StoreConfig {
    dev_set_store_config(dir, &dev_sets(1)[0], s, pki)
}

/// The dev cluster's config for store replica `s` of `set`.
pub fn dev_set_store_config(
    dir: &Path,
    set: &DevSet,
    s: &DevStore,
    pki: Option<&DevPki>,
) -> StoreConfig {
    StoreConfig {
        id: s.id,
        data_dir: dir.join(s.name()),
        listen: None,
        client_addr: s.client.to_string(),
        admin_addr: s.admin.to_string(),
        client_listen: None,
        admin_listen: None,
        tls: pki.map(|p| {
            p.tls_config(&crate::certs::store_cert_name(seqsvr_net::StoreId::new(
                set.spec.set_id,
                s.id,
            )))
        }),
        insecure: false,
        legacy_store_certificates: false,
        limits: PlaneLimits::default(),
        metrics_addr: Some(s.metrics.to_string()),
        members: set
            .stores
            .iter()
            .map(|m| Member {
                id: m.id,
                addr: m.peer.to_string(),
            })
            .collect(),
        join: false,
        set: set.spec.clone(),
        added_set: set.spec.set_id != 0,
        raft: RaftTiming::default(),
        allocs: dev_initial_allocs(set),
        lease: LeaseSection::default(),
        rebalance: Default::default(),
        max_concurrent_reads: seqsvr_store::node::DEFAULT_MAX_CONCURRENT_READS,
    }
}

/// The dev cluster's AllocSvrs, each first routed an equal share of sections.
fn dev_initial_allocs(set: &DevSet) -> Vec<InitialAlloc> {
    InitialAlloc::even_split(
        set.allocs.iter().map(|a| a.id.to_string()),
        set.spec.section_count(),
    )
}

/// The dev cluster's config for AllocSvr `a`, with TLS files from `pki` if
/// given.
pub fn dev_alloc_config(a: &DevAlloc, pki: Option<&DevPki>) -> AllocNodeConfig {
    dev_set_alloc_config(&dev_sets(1)[0], a, pki)
}

/// The dev cluster's config for AllocSvr `a` of `set`.
pub fn dev_set_alloc_config(set: &DevSet, a: &DevAlloc, pki: Option<&DevPki>) -> AllocNodeConfig {
    AllocNodeConfig {
        id: a.id.to_string(),
        addr: a.client.to_string(),
        peer_addr: a.peer.to_string(),
        admin_addr: a.admin.to_string(),
        listen: None,
        peer_listen: None,
        admin_listen: None,
        store: set.stores.iter().map(|s| s.peer.to_string()).collect(),
        tls: pki.map(|p| p.tls_config(a.id)),
        insecure: false,
        limits: None,
        metrics_addr: Some(a.metrics.to_string()),
        route_poll_ms: 250,
        renew_ms: 1000,
        wait_ms: 1000,
        raise_ahead_fraction: 0.25,
        resp: Some(seqsvr_alloc::node::RespSection::on(a.resp.clone())),
        forward: Default::default(),
        http_addr: Some(a.http.to_string()),
        adaptive_steps: None,
        max_names: seqsvr_alloc::names::DEFAULT_MAX_NAMES,
    }
}

/// Writes `cfg` to `path` as TOML, leaving out the `limits` table (the
/// dev cluster runs with every plane's default limits); returns the path.
fn write_config(path: PathBuf, cfg: &impl serde::Serialize) -> Result<PathBuf> {
    let mut value = toml::Value::try_from(cfg)?;
    if let Some(t) = value.as_table_mut() {
        t.remove("limits");
    }
    let text = toml::to_string_pretty(&value)?;
    std::fs::write(&path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    Ok(path)
}

/// Adds `set` for `range` once set 0 recorded its stores and the set's
/// group has a leader (running it again on a restarted dev cluster finds
/// it done).
async fn add_set(
    set: DevSet,
    range: std::ops::Range<u64>,
    base: u16,
    tls: Option<seqsvr_net::ClientTls>,
) {
    let sets = crate::sets::Sets::new(&dev_store_addrs(base), tls);
    let stores: Vec<String> = set.stores.iter().map(|s| s.client.to_string()).collect();
    let id = set.spec.set_id;
    let mut last = String::new();
    for _ in 0..120 {
        match crate::sets::add::add_set(&sets, id, range.start, range.end, &stores).await {
            Ok(r) => {
                let _ = outln!("set {id}        {}", r.to_string().trim_end());
                return;
            }
            Err(err) => last = err.to_string(),
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    eprintln!("could not add set {id}: {last}");
}

/// The id namespace a dev cluster creates, so `seqctl id next default`
/// and `redis-cli SEQ.ID default` work out of the box (docs/ids.md).
pub const DEV_ID_NAMESPACE: &str = "default";

/// Creates [`DEV_ID_NAMESPACE`] (Twitter's layout) in set 0's store group
/// once it has a leader; running it again on a restarted dev cluster
/// finds it there.
async fn create_dev_ids(set: DevSet, tls: Option<seqsvr_net::ClientTls>) {
    let admin: Vec<String> = set.stores.iter().map(|s| s.admin.to_string()).collect();
    let connect = seqsvr_store_api::client::connector(
        tls.map(|t| t.expecting(seqsvr_net::ServerRole::AnyStore)),
    );
    let client = match seqsvr_store_api::AdminClient::new(&admin, &connect) {
        Ok(c) => c,
        Err(e) => return eprintln!("could not create the id namespace: {e}"),
    };
    let layout = seqsvr_core::ids::Layout::twitter();
    let window = crate::ctl::id::DEFAULT_WINDOW_MS;
    let mut last = String::new();
    for _ in 0..120 {
        match client
            .create_id_space(DEV_ID_NAMESPACE, &layout, window)
            .await
        {
            Ok(_) => return,
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    eprintln!("could not create the id namespace {DEV_ID_NAMESPACE:?}: {last}");
}

/// Starts `exe args…` with output to `<dir>/logs/<name>.log`.
fn spawn(dir: &Path, name: &str, args: &[&str]) -> Result<Child> {
    let starting = |e| Error::io(format!("starting {name}"), e);
    let exe = std::env::current_exe().map_err(starting)?;
    let logs = dir.join("logs");
    let log_path = logs.join(format!("{name}.log"));
    let log_err = |e| Error::io(format!("opening {}", log_path.display()), e);
    std::fs::create_dir_all(&logs).map_err(log_err)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(log_err)?;
    let child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(log_err)?)
        .stderr(log)
        .kill_on_drop(true)
        // Its own process group: a terminal's Ctrl-C reaches `seqsvr dev`
        // alone, which then stops the children one at a time (AllocSvrs
        // first, each handing its sections to one still running).
        .process_group(0)
        .spawn()
        .map_err(starting)?;
    if let Some(pid) = child.id() {
        let pid_path = dir.join(format!("{name}.pid"));
        std::fs::write(&pid_path, pid.to_string())
            .map_err(|e| Error::io(format!("writing {}", pid_path.display()), e))?;
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
    /// Its recent deaths (to tell one that keeps dying).
    deaths: watch::Deaths,
}

/// How to run the dev cluster.
#[derive(Debug, Clone)]
pub struct DevOptions {
    /// Where it keeps its data, configs, logs, pid files and PKI.
    pub dir: PathBuf,
    /// Restart a child this long after it died (`None`: leave it dead).
    pub restart_after: Option<std::time::Duration>,
    /// TLS on every plane of every process.
    pub tls: bool,
    /// How many uid sets (1 or 2): set 1 is added for `[DEV_UID_END, 2 ×
    /// DEV_UID_END)` once its stores are up. The names set
    /// ([`DEV_NAMES_SET`]) is started and added whatever this is.
    pub sets: u32,
    /// Every port is this plus an offset (see [`crate::defaults`]).
    pub port_base: u16,
}

/// Runs the dev cluster until Ctrl-C. A child that dies (a drill's kill -9,
/// a crash) is started again after `restart_after`, like a supervisor would
/// (`None`: left dead); a paused child (SIGSTOP) is left alone.
pub async fn run(opts: DevOptions) -> Result<()> {
    let sets = dev_sets_at(opts.port_base, opts.sets);
    let taken = ports::taken(&dev_ports(&sets));
    if !taken.is_empty() {
        return Err(ports::taken_error(&taken, opts.port_base));
    }
    let (dir, pki) = prepare_dir(&opts)?;
    let mut children = start_children(&dir, &sets, pki.as_ref())?;
    let operator_tls = match &pki {
        Some(p) => Some(p.tls_config(DEV_OPERATOR).client()?),
        None => None,
    };
    tokio::spawn(create_dev_ids(sets[0].clone(), operator_tls.clone()));
    // Set 1 (`--sets 2`) for `[DEV_UID_END, 2 × DEV_UID_END)`, and the
    // names set for its whole span, are added once their stores are up.
    for set in sets.iter().filter(|s| s.spec.set_id != 0) {
        let tls = operator_tls.clone();
        let range = if set.spec.set_id == DEV_NAMES_SET {
            dev_names_span()
        } else {
            DEV_UID_END..2 * DEV_UID_END
        };
        tokio::spawn(add_set(set.clone(), range, opts.port_base, tls));
    }
    outln!("data and logs  {}", dir.display())?;
    print_usage(&opts, &sets[0].allocs[0], pki.as_ref())?;
    outln!("stop:          Ctrl-C")?;
    let mut shutdown = std::pin::pin!(shutdown_signal());
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tick.tick() => supervise(&dir, &mut children, opts.restart_after)?,
        }
    }
    outln!("stopping…")?;
    stop_children(&dir, &mut children).await;
    Ok(())
}

/// Creates the dev cluster's directory and, with TLS, issues its PKI
/// there; returns the directory's canonical path and the PKI.
fn prepare_dir(opts: &DevOptions) -> Result<(PathBuf, Option<DevPki>)> {
    let dir_err = |e| Error::io(format!("creating {}", opts.dir.display()), e);
    std::fs::create_dir_all(&opts.dir).map_err(dir_err)?;
    let dir = opts.dir.canonicalize().map_err(dir_err)?;
    let pki = if opts.tls {
        let pki = dev_pki(&dir);
        issue(pki.dir(), &Identities::dev(), false)
            .with_context(|| format!("issuing the dev PKI in {}", pki.dir().display()))?;
        Some(pki)
    } else {
        None
    };
    Ok((dir, pki))
}

/// Writes each replica's and AllocSvr's config and starts it, printing
/// its addresses: the stores of each set, then its AllocSvrs.
fn start_children(dir: &Path, sets: &[DevSet], pki: Option<&DevPki>) -> Result<Vec<Supervised>> {
    let mut children = Vec::new();
    let mut start = |name: String, cmd: &str, cfg: PathBuf| -> Result<()> {
        let args = vec![
            cmd.to_string(),
            "--config".into(),
            cfg.to_string_lossy().into_owned(),
        ];
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let child = spawn(dir, &name, &refs)?;
        children.push(Supervised {
            name,
            args,
            child,
            died: None,
            deaths: watch::Deaths::default(),
        });
        Ok(())
    };
    for set in sets {
        for s in &set.stores {
            let name = s.name();
            let cfg = dev_set_store_config(dir, set, s, pki);
            start(
                name.clone(),
                "store",
                write_config(dev_config_path(dir, &name), &cfg)?,
            )?;
            outln!(
                "{name:<13}peer {}  client {}  admin {}  (set {})",
                s.peer,
                s.client,
                s.admin,
                set.spec.set_id
            )?;
        }
        for a in &set.allocs {
            let cfg = dev_set_alloc_config(set, a, pki);
            start(
                a.id.to_string(),
                "alloc",
                write_config(dev_config_path(dir, a.id), &cfg)?,
            )?;
            outln!(
                "{:<13}client {}  peer {}  admin {}  resp {}  http {}  (set {})",
                a.id,
                a.client,
                a.peer,
                a.admin,
                a.resp,
                a.http,
                set.spec.set_id
            )?;
        }
    }
    Ok(children)
}

/// Stops every child, AllocSvrs first, then the stores, and removes
/// their pid files.
async fn stop_children(dir: &Path, children: &mut [Supervised]) {
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
}

/// Prints how to reach the cluster: `seqctl` (with `--port-base` when the
/// ports are not the default ones), redis-cli, curl; with TLS, where the
/// PKI is and the exact `seqctl` flags to use it.
fn print_usage(opts: &DevOptions, a: &DevAlloc, pki: Option<&DevPki>) -> Result<()> {
    let seqctl = seqctl_command(opts.port_base);
    if let Some(pki) = pki {
        return print_tls_usage(&opts.dir, pki, &seqctl);
    }
    let port = |addr: &str| addr.rsplit_once(':').map_or("", |p| p.1).to_string();
    outln!("try:           {seqctl} next 42        (prints a sequence number)")?;
    outln!(
        "               redis-cli -p {} INCR seq:42   (the Redis-protocol door)",
        port(&a.resp)
    )?;
    outln!(
        "               redis-cli -p {} INCR order:20261126   (a named counter)",
        port(&a.resp)
    )?;
    outln!("               {seqctl} next --name order:20261126")?;
    outln!("               {seqctl} status")?;
    outln!(
        "               curl -s http://{}/v1/next/42   (any AllocSvr, any uid)",
        a.http
    )?;
    outln!("               {seqctl} id next {DEV_ID_NAMESPACE}   (a time-ordered id)")?;
    outln!(
        "               redis-cli -p {} SEQ.ID {DEV_ID_NAMESPACE}",
        port(&a.resp)
    )
}

/// `seqctl`, with the port base when it is not the default one.
pub fn seqctl_command(port_base: u16) -> String {
    if port_base == DEV_PORT_BASE {
        "seqctl".into()
    } else {
        format!("seqctl --port-base {port_base}")
    }
}

/// Prints where the PKI is and the exact `seqctl` flags to use it.
fn print_tls_usage(dir_as_given: &Path, pki: &DevPki, seqctl: &str) -> Result<()> {
    let op = pki.tls_config(DEV_OPERATOR);
    let TlsConfig { ca, cert, key } = &op;
    outln!(
        "TLS            on every plane; CA and certificates in {}",
        pki.dir().display()
    )?;
    outln!(
        "seqctl:        {seqctl} --ca {} --cert {} --key {} status",
        ca.display(),
        cert.display(),
        key.display()
    )?;
    outln!(
        "               or: {seqctl} --dev-dir {} status   (finds the dev PKI itself)",
        dir_as_given.display()
    )?;
    outln!(
        "clients:       trust {} (the client plane asks for no certificate)",
        ca.display()
    )
}

/// Notices dead children and restarts them once their delay has passed;
/// tells the terminal about one that keeps dying (or, with no restarts,
/// one that died), with the end of its log.
fn supervise(
    dir: &Path,
    children: &mut [Supervised],
    restart_after: Option<std::time::Duration>,
) -> Result<()> {
    let now = tokio::time::Instant::now();
    for c in children.iter_mut() {
        if c.died.is_none() {
            if let Ok(Some(status)) = c.child.try_wait() {
                outln!("{} exited ({status})", c.name)?;
                c.died = Some(now);
                let looping = c.deaths.died(now.into_std());
                if looping || restart_after.is_none() {
                    let deaths = if looping { c.deaths.recent() } else { 1 };
                    let log = dir.join("logs").join(format!("{}.log", c.name));
                    let tail = watch::log_tail(&log, watch::TAIL_LINES).unwrap_or_default();
                    eprintln!(
                        "{}",
                        watch::report(&c.name, deaths, &status.to_string(), &log, &tail)
                    );
                }
            }
        }
        match (c.died, restart_after) {
            (Some(t), Some(delay)) if now >= t + delay => {
                let refs: Vec<&str> = c.args.iter().map(String::as_str).collect();
                c.child = spawn(dir, &c.name, &refs)?;
                c.died = None;
                outln!("{} restarted", c.name)?;
            }
            _ => {}
        }
    }
    Ok(())
}
