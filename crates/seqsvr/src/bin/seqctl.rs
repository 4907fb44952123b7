//! `seqctl`: the operator's tool. With no address flags it talks to the
//! `seqsvr dev` cluster. See `seqctl --help`.

use std::path::PathBuf;

use anyhow::bail;
use clap::{Parser, Subcommand};
use seqsvr::ctl::{self, Ctl};
use seqsvr::{defaults, drill};
use seqsvr_client::{ClientOptions, ClientTls, SeqClient};
use seqsvr_core::LeaseTerms;
use seqsvr_net::TlsConfig;

#[derive(Parser)]
#[command(name = "seqctl", version, about = "Operate a seqsvr cluster")]
struct Cli {
    /// Store replicas' client-plane addresses, comma-separated (default:
    /// the dev cluster's).
    #[arg(long, value_delimiter = ',', global = true)]
    store: Vec<String>,
    /// Store replicas' admin-plane addresses, comma-separated (default: the
    /// dev cluster's).
    #[arg(long, value_delimiter = ',', global = true)]
    store_admin: Vec<String>,
    /// AllocSvr client-plane addresses (seeds), comma-separated (default:
    /// the dev cluster's).
    #[arg(long, value_delimiter = ',', global = true)]
    alloc: Vec<String>,
    /// The cluster's CA certificate (PEM): dial every plane with TLS.
    #[arg(long, global = true)]
    ca: Option<PathBuf>,
    /// The operator certificate (PEM) presented on admin planes; with --key.
    #[arg(long, global = true, requires = "key")]
    cert: Option<PathBuf>,
    /// The operator certificate's private key (PEM); with --cert.
    #[arg(long, global = true, requires = "cert")]
    key: Option<PathBuf>,
    /// Where `seqsvr dev` keeps its pid files (for drill faults) and, with
    /// `--tls`, its PKI: without --ca and address flags, seqctl uses that
    /// PKI's operator certificate if the dev cluster runs with TLS.
    #[arg(long, global = true, default_value = defaults::DEV_DIR)]
    dev_dir: PathBuf,
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
    /// Shows the store group (members, leader, term), the set, routes and
    /// the AllocSvrs' leases; then, when there are several, every set (as
    /// `set status`).
    Status {
        /// Print every set as JSON (as `set status --json`).
        #[arg(long)]
        json: bool,
    },
    /// Shows sections' ceilings, epochs and owners.
    Sections {
        /// First section.
        #[arg(default_value_t = 0)]
        first: u32,
        /// How many (default: all).
        count: Option<u32>,
    },
    /// AllocSvr maintenance: planned moves with an explicit lease release,
    /// fencing.
    Alloc {
        #[command(subcommand)]
        op: AllocOp,
    },
    /// Store group settings and membership (add, remove, replace a
    /// replica).
    Store {
        #[command(subcommand)]
        op: StoreOp,
    },
    /// Sets: add a set, move a uid range between sets, show every set.
    Set {
        #[command(subcommand)]
        op: SetOp,
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
    /// Refuses one incarnation of an AllocSvr from now on (as `seqctl
    /// status` shows it, in hex): its renewals fail, its sections move once
    /// its lease has certainly expired.
    Fence {
        /// The AllocSvr's id.
        id: String,
        /// The incarnation to refuse (hexadecimal).
        #[arg(value_parser = ctl::parse_incarnation)]
        incarnation: u64,
    },
}

#[derive(Subcommand)]
enum SetOp {
    /// Brings a fresh store group (started with this set id, serving
    /// nothing yet) into service for a free uid range. Running it again
    /// finishes or reports it done.
    Add {
        /// The new set's id (as in its stores' config).
        #[arg(long)]
        id: u32,
        /// The uids it serves, BEGIN..END (whole sections, free).
        #[arg(long, value_parser = seqsvr::sets::parse_range)]
        range: (u64, u64),
        /// Its store replicas' client-plane addresses, comma-separated.
        #[arg(long = "set-store", value_delimiter = ',', required = true)]
        set_store: Vec<String>,
    },
    /// Moves a uid range (whole sections) to another set, online: freeze in
    /// the source, install in the destination above the source's final
    /// ceilings, flip the directory. Running it again resumes or reports it
    /// done.
    Move {
        /// The uids to move, BEGIN..END.
        #[arg(long, value_parser = seqsvr::sets::parse_range)]
        range: (u64, u64),
        /// The destination set.
        #[arg(long)]
        to: u32,
        /// Stop after this step (for drills: crash something, run again).
        #[arg(long, value_enum)]
        stop_after: Option<seqsvr::sets::mover::Step>,
    },
    /// Shows the directory and every set: ranges, stores (leader, term,
    /// members), sections served, AllocSvrs.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum StoreOp {
    /// Changes the lease terms (replicated store state; the store config's
    /// `[lease]` only gives a new group its first terms).
    Lease {
        /// How long a granted renewal lets an AllocSvr serve, in ms.
        #[arg(long)]
        lease_ms: u64,
        /// Extra wait before a section moves, for clock-rate drift, in ms.
        #[arg(long)]
        margin_ms: u64,
    },
    #[command(flatten)]
    Members(seqsvr::ctl_store::MemberOp),
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

/// How seqctl dials: TLS (and whether it holds an operator certificate),
/// or plaintext.
struct Dial {
    /// TLS settings, if any.
    tls: Option<ClientTls>,
    /// Whether admin planes will take these credentials (an operator
    /// certificate under TLS; anything in plaintext on loopback).
    operator: bool,
}

impl Dial {
    /// From the flags: `--ca` (and `--cert`/`--key`), or else the dev
    /// cluster's PKI when seqctl talks to the dev cluster, or else
    /// plaintext.
    fn from_cli(cli: &Cli) -> anyhow::Result<Dial> {
        match (&cli.ca, &cli.cert, &cli.key) {
            (Some(ca), Some(cert), Some(key)) => {
                let cfg = TlsConfig {
                    ca: ca.clone(),
                    cert: cert.clone(),
                    key: key.clone(),
                };
                Ok(Dial::operator(&cfg)?)
            }
            (Some(ca), _, _) => Ok(Dial {
                tls: Some(ClientTls::server_only(ca)?),
                operator: false,
            }),
            (None, Some(_), _) | (None, _, Some(_)) => bail!("--cert and --key need --ca"),
            (None, None, None) => {
                let dev =
                    cli.store.is_empty() && cli.store_admin.is_empty() && cli.alloc.is_empty();
                match dev
                    .then(|| defaults::dev_operator_tls(&cli.dev_dir))
                    .flatten()
                {
                    Some(cfg) => Dial::operator(&cfg),
                    None => Ok(Dial {
                        tls: None,
                        operator: true,
                    }),
                }
            }
        }
    }

    fn operator(cfg: &TlsConfig) -> anyhow::Result<Dial> {
        Ok(Dial {
            tls: Some(cfg.client()?),
            operator: true,
        })
    }

    /// Fails unless admin planes will take these credentials.
    fn need_operator(&self) -> anyhow::Result<()> {
        if !self.operator {
            bail!("this command uses admin planes, which need an operator certificate: give --cert and --key");
        }
        Ok(())
    }
}

fn or_dev(given: &[String], dev: fn() -> Vec<String>) -> Vec<String> {
    if given.is_empty() {
        dev()
    } else {
        given.to_vec()
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let dial = Dial::from_cli(&cli)?;
    let store = or_dev(&cli.store, defaults::dev_store_addrs);
    let store_admin = or_dev(&cli.store_admin, defaults::dev_store_admin_addrs);
    let seeds = or_dev(&cli.alloc, defaults::dev_alloc_addrs);
    let dev_dir = cli.dev_dir.clone();
    rt.block_on(async move {
        let seq = || {
            let options = ClientOptions {
                tls: dial.tls.clone(),
                ..Default::default()
            };
            SeqClient::connect(&seeds, options)
        };
        let ctl = || Ctl::new(&store, &store_admin, dial.tls.clone());
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
            Cmd::Status { json } => {
                let sets = seqsvr::sets::Sets::new(&store, dial.tls.clone());
                if json {
                    let v = seqsvr::sets::view::view(&sets).await?;
                    println!("{}", serde_json::to_string_pretty(&v)?);
                    return Ok(());
                }
                ctl::status(&ctl()?).await?;
                if let Ok(v) = seqsvr::sets::view::view(&sets).await {
                    if v.sets.len() > 1 || v.moving.is_some() {
                        println!();
                        print!("{v}");
                    }
                }
                Ok(())
            }
            Cmd::Sections { first, count } => ctl::sections(&ctl()?, first, count).await,
            Cmd::Alloc { op } => {
                dial.need_operator()?;
                let ctl = ctl()?;
                match op {
                    AllocOp::Drain { id } => ctl::drain(&ctl, &id).await.map(drop),
                    AllocOp::Undrain { id } => ctl::undrain(&ctl, &id).await,
                    AllocOp::Rebalance => ctl::rebalance(&ctl).await,
                    AllocOp::Fence { id, incarnation } => ctl::fence(&ctl, &id, incarnation).await,
                }
            }
            Cmd::Store {
                op: StoreOp::Members(op),
            } => {
                dial.need_operator()?;
                seqsvr::ctl_store::run(&ctl()?, op).await
            }
            Cmd::Store {
                op:
                    StoreOp::Lease {
                        lease_ms,
                        margin_ms,
                    },
            } => {
                dial.need_operator()?;
                let terms = LeaseTerms {
                    lease_ms,
                    margin_ms,
                };
                ctl::set_lease(&ctl()?, terms).await
            }
            Cmd::Set { op } => {
                let sets = seqsvr::sets::Sets::new(&store, dial.tls.clone());
                match op {
                    SetOp::Add {
                        id,
                        range: (b, e),
                        set_store,
                    } => {
                        dial.need_operator()?;
                        let r = seqsvr::sets::add::add_set(&sets, id, b, e, &set_store).await?;
                        print!("{r}");
                    }
                    SetOp::Move {
                        range: (b, e),
                        to,
                        stop_after,
                    } => {
                        dial.need_operator()?;
                        let r =
                            seqsvr::sets::mover::move_range(&sets, b, e, to, stop_after).await?;
                        print!("{r}");
                    }
                    SetOp::Status { json } => {
                        let v = seqsvr::sets::view::view(&sets).await?;
                        if json {
                            println!("{}", serde_json::to_string_pretty(&v)?);
                        } else {
                            print!("{v}");
                        }
                    }
                }
                Ok(())
            }
            Cmd::Drill(args) => {
                let cfg = args.into_config(&store, &seeds, &dev_dir, dial.tls.clone());
                let report = drill::run(cfg).await?;
                report.print(args.json);
                if !report.ok() {
                    bail!(
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
