//! `seqctl`: the operator's tool. With no address flags it talks to the
//! `seqsvr dev` cluster. See `seqctl --help`.

use clap::{Parser, Subcommand};
use seqsvr::{ctl, drill};
use seqsvr_client::{ClientOptions, SeqClient};
use seqsvr_store::client::StoreClient;

#[derive(Parser)]
#[command(name = "seqctl", version, about = "Operate a seqsvr cluster")]
struct Cli {
    /// Store replica addresses, comma-separated (default: the dev cluster's).
    #[arg(long, value_delimiter = ',', global = true)]
    store: Vec<String>,
    /// AllocSvr addresses (seeds), comma-separated (default: the dev cluster's).
    #[arg(long, value_delimiter = ',', global = true)]
    alloc: Vec<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Prints the next sequence number of a uid.
    Next {
        /// The uid.
        uid: u64,
    },
    /// Prints the next sequence number of each uid, one per line, in order.
    NextBatch {
        /// The uids (a uid listed k times gets k increasing numbers).
        #[arg(required = true)]
        uids: Vec<u64>,
    },
    /// Prints the last sequence number handed out for a uid.
    Current {
        /// The uid.
        uid: u64,
    },
    /// Shows the store group (members, leader, term), the set and routes.
    Status,
    /// Shows sections' ceilings, epochs and owners.
    Sections {
        /// First section.
        #[arg(default_value_t = 0)]
        first: u32,
        /// How many (default: all).
        count: Option<u32>,
    },
    /// AllocSvr maintenance: planned moves with an explicit lease release.
    Alloc {
        #[command(subcommand)]
        op: AllocOp,
    },
    /// Failover drill: drive a workload, inject faults, report regressions,
    /// unavailability and skipped numbers. Exits non-zero on any regression.
    Drill(drill::DrillArgs),
}

#[derive(Subcommand)]
enum AllocOp {
    /// Hands every section of an AllocSvr to the others and keeps it empty.
    Drain {
        /// The AllocSvr's id.
        id: String,
    },
    /// Lets a drained AllocSvr take sections again.
    Undrain {
        /// The AllocSvr's id.
        id: String,
    },
    /// Evens out sections over the live AllocSvrs (after one joins).
    Rebalance,
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("seqctl: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let addrs = if cli.store.is_empty() {
            seqsvr::defaults::dev_store_addrs()
        } else {
            cli.store.clone()
        };
        let seeds = if cli.alloc.is_empty() {
            seqsvr::defaults::dev_alloc_addrs()
        } else {
            cli.alloc.clone()
        };
        let seq = || SeqClient::connect(&seeds, ClientOptions::default());
        let store = StoreClient::new(&addrs)?;
        match cli.cmd {
            Cmd::Next { uid } => {
                println!("{}", seq().await?.next(uid).await?);
                Ok(())
            }
            Cmd::NextBatch { uids } => {
                for n in seq().await?.next_batch(&uids).await? {
                    println!("{n}");
                }
                Ok(())
            }
            Cmd::Current { uid } => {
                println!("{}", seq().await?.current(uid).await?);
                Ok(())
            }
            Cmd::Status => ctl::status(&store).await,
            Cmd::Sections { first, count } => ctl::sections(&store, first, count).await,
            Cmd::Alloc { op } => match op {
                AllocOp::Drain { id } => ctl::drain(&store, &id).await.map(drop),
                AllocOp::Undrain { id } => ctl::undrain(&store, &id).await,
                AllocOp::Rebalance => ctl::rebalance(&store).await,
            },
            Cmd::Drill(args) => {
                let report = drill::run(args.into_config(&addrs, &seeds)).await?;
                report.print(args.json);
                if !report.ok() {
                    anyhow::bail!(
                        "promise 1 broken: {} regressions, {} repeats",
                        report.regressions,
                        report.repeats
                    );
                }
                Ok(())
            }
        }
    })
}
