//! `seqctl`: the operator's tool. With no address flags it talks to the
//! `seqsvr dev` cluster. See `seqctl --help`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use seqsvr::ctl::{self, Ctl};
use seqsvr::{defaults, drill, outln, Error, Result};
use seqsvr_client::{ClientOptions, ClientTls, SeqClient};
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
    /// Prints the next sequence number of a uid, or of a named counter
    /// with `--name` (docs/counters.md).
    Next {
        /// The uid.
        #[arg(required_unless_present = "name", conflicts_with = "name")]
        uid: Option<u64>,
        /// A named counter (1..=256 bytes) instead of a uid.
        #[arg(long)]
        name: Option<String>,
        /// Reserve this many numbers in one step; the last is printed (the
        /// caller owns (v − count, v]).
        #[arg(long, default_value_t = 1)]
        count: u64,
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
        op: ctl::alloc::AllocOp,
    },
    /// Store group settings.
    Store {
        #[command(subcommand)]
        op: ctl::store::StoreOp,
    },
    /// Sets: add a set, move a uid range between sets, show every set.
    Set {
        #[command(subcommand)]
        op: ctl::set::SetOp,
    },
    /// Probes one process (store replica or AllocSvr) through its own
    /// status on its client plane; prints one line. Exit 0: healthy (with
    /// --ready: ready), 1: answered but not ready, 2: unreachable or bad
    /// flags.
    Health(ctl::health::HealthArgs),
    /// Failover drill: drive a workload, inject faults, report regressions,
    /// unavailability and skipped numbers. Exits non-zero, with the reason,
    /// on any regression or repeat, no numbers, fewer calls than
    /// --min-calls, a fault that did not happen, a section jump over one
    /// step or an outage over --max-outage.
    Drill(drill::DrillArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A probe's failure to even try (bad address, unreadable CA) is exit
    // 2, like an unreachable process; other commands fail with 1.
    let failure = match cli.cmd {
        Cmd::Health(_) => ExitCode::from(2),
        _ => ExitCode::FAILURE,
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) if e.is_closed_output() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("seqctl: error: {e}");
            failure
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
    fn from_cli(cli: &Cli) -> Result<Dial> {
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
            (None, Some(_), _) | (None, _, Some(_)) => {
                Err(Error::Usage("--cert and --key need --ca".into()))
            }
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

    fn operator(cfg: &TlsConfig) -> Result<Dial> {
        Ok(Dial {
            tls: Some(cfg.client()?),
            operator: true,
        })
    }

    /// Fails unless admin planes will take these credentials.
    fn need_operator(&self) -> Result<()> {
        if !self.operator {
            return Err(Error::Usage(
                "this command uses admin planes, which need an operator certificate: give --cert and --key".into(),
            ));
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

fn run(cli: Cli) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the runtime", e))?;
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
        let done = match cli.cmd {
            Cmd::Next { uid, name, count } => {
                let c = seq().await?;
                let v = match (uid, name) {
                    (_, Some(name)) => c.next_name_n(name, count).await?,
                    (Some(uid), None) => c.next_n(uid, count).await?,
                    (None, None) => unreachable!("clap requires a uid or --name"),
                };
                outln!("{v}")?;
                Ok(())
            }
            Cmd::NextBatch { uids } => {
                for n in seq().await?.next_batch(&uids).await? {
                    outln!("{n}")?;
                }
                Ok(())
            }
            Cmd::Current { uid } => {
                outln!("{}", seq().await?.current(uid).await?)?;
                Ok(())
            }
            Cmd::Status { json } => {
                let sets = seqsvr::sets::Sets::new(&store, dial.tls.clone());
                if json {
                    ctl::set::print_view(&sets, true).await
                } else {
                    ctl::status(&ctl()?).await?;
                    // Every set too, when there are several.
                    match seqsvr::sets::view::view(&sets).await {
                        Ok(v) if v.sets.len() > 1 || v.moving.is_some() => {
                            outln!("\n{}", v.to_string().trim_end())
                        }
                        _ => Ok(()),
                    }
                }
            }
            Cmd::Set { op } => {
                if op.needs_operator() {
                    dial.need_operator()?;
                }
                let sets = seqsvr::sets::Sets::new(&store, dial.tls.clone());
                ctl::set::run(&sets, op).await
            }
            Cmd::Sections { first, count } => ctl::sections(&ctl()?, first, count).await,
            Cmd::Alloc { op } => {
                dial.need_operator()?;
                ctl::alloc::run(&ctl()?, op).await
            }
            Cmd::Store { op } => {
                dial.need_operator()?;
                ctl::store::run(&ctl()?, op).await
            }
            Cmd::Health(args) => {
                let health = ctl::health::probe(&args, dial.tls.as_ref()).await?;
                // The exit code is the verdict: a reader gone early does
                // not turn "unreachable" into success.
                match outln!("{}", health.line()) {
                    Err(e) if !e.is_closed_output() => return Err(e),
                    _ => return Ok(ExitCode::from(health.exit_code())),
                }
            }
            Cmd::Drill(args) => {
                let cfg = args.into_config(&store, &seeds, &dev_dir, dial.tls.clone());
                let report = drill::run(cfg).await?;
                let breaches = drill::judge(&report, &args.bounds());
                let reasons: Vec<String> = breaches.iter().map(ToString::to_string).collect();
                report.print_judged(args.json, &reasons)?;
                if !reasons.is_empty() {
                    return Err(Error::Failed(format!(
                        "drill failed: {}",
                        reasons.join("; ")
                    )));
                }
                Ok(())
            }
        };
        done.map(|()| ExitCode::SUCCESS)
    })
}
