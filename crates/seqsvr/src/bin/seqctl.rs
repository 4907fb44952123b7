//! `seqctl`: the operator's tool. With no address flags it talks to the
//! `seqsvr dev` cluster. See `seqctl --help`.

use clap::{Parser, Subcommand};
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
            Cmd::Status => status(&store).await,
            Cmd::Sections { first, count } => sections(&store, first, count).await,
        }
    })
}

async fn status(store: &StoreClient) -> anyhow::Result<()> {
    println!("store replicas:");
    for (addr, st) in store.status_all().await {
        match st {
            Ok(s) => println!(
                "  {:<3} {addr:<22} {:<10} term {:<4} leader {:<3} applied {:<8} fsyncs {}",
                s.node_id,
                s.state,
                s.term,
                if s.has_leader {
                    s.leader_id.to_string()
                } else {
                    "-".into()
                },
                s.last_applied,
                s.fsyncs
            ),
            Err(e) => println!("  ?   {addr:<22} unreachable: {e}"),
        }
    }
    let routes = store.routes().await?;
    let s = &routes.set;
    println!(
        "set {}: uids [{}, {}), {} sections of {}, step {}",
        s.set_id,
        s.uid_begin,
        s.uid_end,
        s.section_count(),
        s.section_size,
        s.step
    );
    println!("route version {}", routes.version);
    let mut per_alloc: std::collections::BTreeMap<&str, (u32, &str)> = Default::default();
    for e in &routes.entries {
        per_alloc.entry(&e.alloc).or_insert((0, &e.addr)).0 += e.count;
    }
    let owned: u32 = per_alloc.values().map(|(n, _)| n).sum();
    println!("allocs:");
    for (id, (n, addr)) in per_alloc {
        println!("  {id:<12} {addr:<22} {n} sections");
    }
    println!("  (unowned)    {} sections", s.section_count() - owned);
    Ok(())
}

async fn sections(store: &StoreClient, first: u32, count: Option<u32>) -> anyhow::Result<()> {
    let total = store.routes().await?.set.section_count();
    let count = count.unwrap_or(total.saturating_sub(first));
    println!("{:>8} {:>20} {:>8}  owner", "section", "max_seq", "epoch");
    for s in store.read_sections(first, count).await? {
        println!(
            "{:>8} {:>20} {:>8}  {}",
            s.section,
            s.max_seq,
            s.epoch,
            s.owner.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}
