//! `seqsvr`: runs seqsvr's servers. See `seqsvr --help`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use seqsvr_alloc::node::{AllocNode, AllocNodeConfig};
use seqsvr_store::{StoreConfig, StoreNode};

#[derive(Parser)]
#[command(
    name = "seqsvr",
    version,
    about = "Per-uid monotonic sequence numbers (StoreSvr + AllocSvr)"
)]
struct Cli {
    /// Log format: `text` or `json`.
    #[arg(long, default_value = "text", global = true)]
    log_format: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs one StoreSvr replica from a TOML config.
    Store {
        /// The replica's config file (see config/store-1.toml).
        #[arg(long)]
        config: PathBuf,
    },
    /// Runs one AllocSvr from a TOML config.
    Alloc {
        /// The AllocSvr's config file (see config/alloc-1.toml).
        #[arg(long)]
        config: PathBuf,
        /// Runtime worker threads (1 is fastest when clients share the
        /// machine's cores).
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// Starts a local cluster (3 store replicas, 2 allocs) as child processes, with
    /// nothing to configure. Ctrl-C stops it; running it again resumes.
    Dev {
        /// Where the cluster keeps its data and logs.
        #[arg(long, default_value = seqsvr::defaults::DEV_DIR)]
        dir: PathBuf,
        /// Restart a server that died after this many seconds (0: never),
        /// as a process supervisor would.
        #[arg(long, default_value_t = 3)]
        restart_after: u64,
    },
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("seqsvr: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    seqsvr::logging::init(cli.log_format == "json");
    let threads = match &cli.cmd {
        Cmd::Alloc { threads, .. } => (*threads).max(1),
        _ => 2,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match cli.cmd {
            Cmd::Store { config } => run_store(config).await,
            Cmd::Alloc { config, .. } => run_alloc(config).await,
            Cmd::Dev { dir, restart_after } => {
                let delay =
                    (restart_after > 0).then(|| std::time::Duration::from_secs(restart_after));
                seqsvr::dev::run(dir, delay).await
            }
        }
    })
}

async fn run_alloc(path: PathBuf) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let cfg = AllocNodeConfig::from_toml(&text).map_err(anyhow::Error::msg)?;
    let listen = cfg.listen.clone().unwrap_or_else(|| cfg.addr.clone());
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let node = AllocNode::start(cfg, listener).await?;
    seqsvr::dev::shutdown_signal().await;
    tracing::info!("shutting down");
    node.shutdown();
    Ok(())
}

async fn run_store(path: PathBuf) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let cfg = StoreConfig::from_toml(&text)?;
    let listen = cfg.listen.clone().unwrap_or_else(|| cfg.addr().to_string());
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let node = StoreNode::start(cfg, listener).await?;
    seqsvr::dev::shutdown_signal().await;
    tracing::info!("shutting down");
    node.shutdown().await;
    Ok(())
}
