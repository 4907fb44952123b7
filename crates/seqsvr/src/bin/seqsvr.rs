//! `seqsvr`: runs seqsvr's servers. See `seqsvr --help`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use seqsvr::certs::Identities;
use seqsvr::dev::DevOptions;
use seqsvr::error::{Context, Error, Result};
use seqsvr::outln;
use seqsvr_alloc::node::{AllocListeners, AllocNode, AllocNodeConfig};
use seqsvr_store::{StoreConfig, StoreListeners, StoreNode};
use seqsvr_store_core::backup::{MarginArgs, RestorePlan};

/// The environment variable that stands for `--config` (the flag wins when
/// both are given): one image, one command line, the file chosen by the
/// environment (a container's, a pod's).
const CONFIG_ENV: &str = "SEQSVR_CONFIG";

#[derive(Parser)]
#[command(
    name = "seqsvr",
    version,
    about = "Per-uid monotonic sequence numbers (StoreSvr + AllocSvr)"
)]
struct Cli {
    /// Log format: `text` or `json` (one JSON object a line; the
    /// container configs set it through `SEQSVR_LOG_FORMAT`).
    #[arg(long, default_value = "text", global = true, env = "SEQSVR_LOG_FORMAT",
          value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum StoreSub {
    /// Runs the replica of a new group seeded from a backup (`seqctl store
    /// backup`): while it leads it writes the backup's state with every
    /// ceiling raised by the margin, each section served only once it
    /// landed; then it runs as `seqsvr store`. The backup must be of the
    /// config's set, and the data directory empty or holding that set
    /// (a restore resumed: sections already landed are left alone); see
    /// docs/operations.md, Backup and disaster recovery.
    Restore {
        /// The backup file.
        #[arg(long)]
        backup: PathBuf,
        /// Numbers added to every ceiling: at least what any section's
        /// ceiling can have grown since the backup, and at least one step.
        #[arg(long)]
        margin: Option<u64>,
        /// Instead of --margin: the fastest any section's ceiling grows,
        /// in numbers per second; the margin is that times the backup's
        /// age (whole seconds, by this machine's clock) plus one step.
        #[arg(long)]
        raise_rate: Option<u64>,
    },
}

#[derive(Subcommand)]
enum AllocSub {
    /// Stops the AllocSvr that runs from --config (this machine, its admin
    /// plane over loopback, its own certificate) the planned way, as
    /// SIGTERM does: it hands every section to live peers, records its
    /// stop and exits; this waits until it has. For a Kubernetes preStop
    /// hook (docs/deploy.md).
    Drain {
        /// Drain the AllocSvr of --config (the only one this command
        /// drains; `seqctl alloc drain ID` drains any, as an operator).
        #[arg(long = "self", required = true)]
        own: bool,
        /// How long to wait for it to exit, in seconds.
        #[arg(long, default_value_t = 25)]
        wait_secs: u64,
    },
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs one StoreSvr replica from a TOML config.
    Store {
        /// The replica's config file (see config/store-1.toml).
        #[arg(long, env = CONFIG_ENV, global = true)]
        config: Option<PathBuf>,
        /// `restore`: seed a new group from a backup.
        #[command(subcommand)]
        sub: Option<StoreSub>,
    },
    /// Runs one AllocSvr from a TOML config.
    Alloc {
        /// The AllocSvr's config file (see config/alloc-1.toml).
        #[arg(long, env = CONFIG_ENV, global = true)]
        config: Option<PathBuf>,
        /// Runtime worker threads (1 is fastest when clients share the
        /// machine's cores).
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// `drain --self`: stop the running AllocSvr of --config the
        /// planned way.
        #[command(subcommand)]
        sub: Option<AllocSub>,
    },
    /// Starts a local cluster (3 store replicas, 2 allocs, and as many for
    /// named counters) as child processes, with nothing to configure. Ctrl-C stops it; running it again resumes.
    Dev {
        /// Where the cluster keeps its data and logs.
        #[arg(long, default_value = seqsvr::defaults::DEV_DIR)]
        dir: PathBuf,
        /// Restart a server that died after this many seconds (0: never),
        /// as a process supervisor would.
        #[arg(long, default_value_t = 3)]
        restart_after: u64,
        /// TLS on every plane of every process, with a development PKI
        /// under the dev dir (`pki/`); prints the seqctl flags to use.
        #[arg(long)]
        tls: bool,
        /// How many uid sets to run: 2 adds set 1 (3 more store replicas, 2
        /// more AllocSvrs) serving the next range of uids, so multi-set
        /// paths (`seqctl set move`) can be tried locally. The names set
        /// (named counters) always runs.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=2))]
        sets: u32,
        /// Every port the cluster binds is this plus a fixed offset (store-1's
        /// peer plane N+1 … alloc-6's HTTP API N+156; see docs/operations.md):
        /// choose another base when the default ports are taken, and give
        /// seqctl the same `--port-base`.
        #[arg(long, default_value_t = seqsvr::defaults::DEV_PORT_BASE,
              value_parser = seqsvr::defaults::parse_port_base)]
        port_base: u16,
    },
    /// Writes a PKI for a cluster: a CA (made once, then reused) and one
    /// certificate per store replica, AllocSvr and operator, each carrying
    /// its role. Existing certificates are kept unless --overwrite, except
    /// store certificates of the old form (no set), which are re-issued.
    Certs {
        /// Where to write them (`ca.pem`, `<name>.pem`, `<name>-key.pem`).
        #[arg(long)]
        dir: PathBuf,
        /// Store replica ids, comma-separated: Raft node ids in the group
        /// of the set --set names. Each certificate names set and id
        /// (`urn:seqsvr:store:<set>:<id>`); its files are `store-<id>` for
        /// set 0, `store-<set>-<id>` for other sets.
        #[arg(long, value_delimiter = ',')]
        store: Vec<u64>,
        /// The set whose store group the --store replicas belong to.
        #[arg(long, default_value_t = 0)]
        set: u32,
        /// AllocSvr ids, comma-separated.
        #[arg(long, value_delimiter = ',')]
        alloc: Vec<String>,
        /// Operator names (what seqctl presents), comma-separated.
        #[arg(long, value_delimiter = ',')]
        operator: Vec<String>,
        /// A host name or IP address every certificate is valid for, besides
        /// localhost and 127.0.0.1 (repeat, or comma-separate).
        #[arg(long, value_delimiter = ',')]
        host: Vec<String>,
        /// Re-issue certificates that already exist.
        #[arg(long)]
        overwrite: bool,
    },
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if e.is_closed_output() => std::process::ExitCode::SUCCESS,
        // A missing or conflicting argument is a usage error, as clap's
        // own are (exit status 2).
        Err(e @ Error::Usage(_)) => {
            eprintln!("seqsvr: error: {e}");
            std::process::ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("seqsvr: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    seqsvr::logging::init(cli.log_format == "json");
    let rt = runtime(&cli.cmd)?;
    rt.block_on(async move {
        match cli.cmd {
            Cmd::Store { config, sub } => {
                let config = config.ok_or_else(|| {
                    Error::Usage(format!("--config (or {CONFIG_ENV}) is required"))
                })?;
                run_store(config, restore_plan(sub)?).await
            }
            Cmd::Alloc { config, sub, .. } => {
                let config = config.ok_or_else(|| {
                    Error::Usage(format!("--config (or {CONFIG_ENV}) is required"))
                })?;
                match sub {
                    None => run_alloc(config).await,
                    Some(AllocSub::Drain { own: _, wait_secs }) => {
                        let cfg = read_alloc_config(&config)?;
                        let wait = std::time::Duration::from_secs(wait_secs);
                        seqsvr::drain_self::drain_self(&cfg, wait).await
                    }
                }
            }
            Cmd::Dev {
                dir,
                restart_after,
                tls,
                sets,
                port_base,
            } => {
                let restart_after =
                    (restart_after > 0).then(|| std::time::Duration::from_secs(restart_after));
                seqsvr::dev::run(DevOptions {
                    dir,
                    restart_after,
                    tls,
                    sets,
                    port_base,
                })
                .await
            }
            Cmd::Certs {
                dir,
                store,
                set,
                alloc,
                operator,
                host,
                overwrite,
            } => {
                let who = Identities {
                    stores: store
                        .into_iter()
                        .map(|id| seqsvr_net::StoreId::new(set, id))
                        .collect(),
                    allocs: alloc,
                    operators: operator,
                    hosts: host,
                };
                certs(&dir, &who, overwrite)
            }
        }
    })
}

/// The runtime `cmd` runs on: an AllocSvr's `--threads` workers (its
/// allocator set up first), two for everything else.
fn runtime(cmd: &Cmd) -> Result<tokio::runtime::Runtime> {
    let threads = match cmd {
        Cmd::Alloc { threads, .. } => {
            // Before any cells are allocated: the cells of lost sections
            // go back to the operating system, not only to malloc.
            seqsvr_alloc::malloc::fix_mmap_threshold();
            (*threads).max(1)
        }
        _ => 2,
    };
    // One thread: the current-thread scheduler, whose queue is a plain
    // one, not the work-stealing one a second worker would need (the
    // Redis door's -c 50, docs/benchmarks.md).
    let mut builder = match threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
    };
    builder
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the runtime", e))
}

/// The backup a store starts from (`seqsvr store restore`), planned with
/// its margin; `None` for a plain start.
fn restore_plan(sub: Option<StoreSub>) -> Result<Option<RestorePlan>> {
    Ok(match sub {
        None => None,
        Some(StoreSub::Restore {
            backup,
            margin,
            raise_rate,
        }) => {
            let args = MarginArgs { margin, raise_rate };
            let now = seqsvr::restore::now_unix_ms();
            let plan = seqsvr::restore::plan(&backup, args, now)?;
            tracing::info!("{}", seqsvr::restore::describe(&plan.backup, now));
            Some(plan)
        }
    })
}

fn read_alloc_config(path: &std::path::Path) -> Result<AllocNodeConfig> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    AllocNodeConfig::from_toml(&text).with_context(|| path.display().to_string())
}

async fn run_alloc(path: PathBuf) -> Result<()> {
    let cfg = read_alloc_config(&path)?;
    let listeners = AllocListeners::bind(&cfg)
        .await
        .map_err(|e| Error::io(path.display().to_string(), e))?;
    let node = AllocNode::start(cfg, listeners)
        .await
        .with_context(|| path.display().to_string())?;
    // A planned stop hands the sections to live peers first
    // (docs/operations.md, Stopping an AllocSvr): on SIGTERM, or when asked
    // over the admin plane (`seqsvr alloc drain --self`, a preStop hook).
    tokio::select! {
        _ = seqsvr::dev::shutdown_signal() => {}
        _ = node.stop_asked() => tracing::info!("drain asked over the admin plane"),
    }
    tracing::info!("stopping: handing sections to live peers");
    node.stop(seqsvr_alloc::node::STOP_HANDOFF_BOUND).await;
    Ok(())
}

async fn run_store(path: PathBuf, restore: Option<RestorePlan>) -> Result<()> {
    // Errors name the file and the key (`StoreConfig::from_file`).
    let cfg = StoreConfig::from_file(&path)?;
    let listeners = StoreListeners::bind(&cfg)
        .await
        .with_context(|| path.display().to_string())?;
    let node = match restore {
        None => StoreNode::start(cfg, listeners).await,
        Some(plan) => StoreNode::start_restoring(cfg, listeners, plan).await,
    }
    .with_context(|| path.display().to_string())?;
    seqsvr::dev::shutdown_signal().await;
    tracing::info!("shutting down");
    node.shutdown().await;
    Ok(())
}

fn certs(dir: &std::path::Path, who: &Identities, overwrite: bool) -> Result<()> {
    if who.stores.is_empty() && who.allocs.is_empty() && who.operators.is_empty() {
        return Err(Error::Usage(
            "nothing to issue: give --store, --alloc and/or --operator".into(),
        ));
    }
    let issued = seqsvr::certs::issue(dir, who, overwrite)?;
    let pki = seqsvr_net::DevPki::open(dir);
    outln!("CA             {}", pki.ca_path().display())?;
    for leaf in who.leaves() {
        let kept = if issued.contains(&leaf.name) {
            ""
        } else {
            "  (kept)"
        };
        outln!(
            "{:<14} {}  {}{kept}",
            leaf.name,
            pki.cert_path(&leaf.name).display(),
            pki.key_path(&leaf.name).display()
        )?;
    }
    outln!(
        "each process's config: [tls] ca = \"<CA>\", cert = \"<name>.pem\", key = \"<name>-key.pem\""
    )?;
    outln!(
        "{} signs new certificates: keep it off the servers",
        pki.ca_key_path().display()
    )?;
    Ok(())
}
