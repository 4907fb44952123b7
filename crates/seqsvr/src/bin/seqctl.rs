//! `seqctl`: the operator's tool. With no address flags it talks to the
//! `seqsvr dev` cluster. See `seqctl --help`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use seqsvr::ctl::reach::{self, need_listener};
use seqsvr::ctl::settings::{self, Layer, Settings};
use seqsvr::ctl::{self, Ctl};
use seqsvr::{defaults, drill, outln, Error, Result};
use seqsvr_client::{ClientOptions, ClientTls, SeqClient};
use seqsvr_net::TlsConfig;

#[derive(Parser)]
#[command(
    name = "seqctl",
    version,
    about = "Operate a seqsvr cluster",
    after_help = "Every address and credential flag can also come from the environment \
(SEQCTL_STORE, SEQCTL_STORE_ADMIN, SEQCTL_ALLOC, SEQCTL_CA, SEQCTL_CERT, SEQCTL_KEY, \
SEQCTL_DEV_DIR, SEQCTL_PORT_BASE) or a profile (--profile NAME, or SEQCTL_PROFILE: a table \
of $SEQCTL_PROFILES, else $XDG_CONFIG_HOME/seqctl/profiles.toml, else \
~/.config/seqctl/profiles.toml). Flags win over the environment, the environment over the \
profile; with none of them seqctl talks to the `seqsvr dev` cluster."
)]
struct Cli {
    /// Store replicas' client-plane addresses, comma-separated (or
    /// SEQCTL_STORE; default: the dev cluster's).
    #[arg(long, value_delimiter = ',', global = true)]
    store: Vec<String>,
    /// Store replicas' admin-plane addresses, comma-separated (or
    /// SEQCTL_STORE_ADMIN; default: the dev cluster's).
    #[arg(long, value_delimiter = ',', global = true)]
    store_admin: Vec<String>,
    /// AllocSvr client-plane addresses (seeds), comma-separated (or
    /// SEQCTL_ALLOC; default: the dev cluster's).
    #[arg(long, value_delimiter = ',', global = true)]
    alloc: Vec<String>,
    /// The cluster's CA certificate (PEM): dial every plane with TLS (or
    /// SEQCTL_CA).
    #[arg(long, global = true)]
    ca: Option<PathBuf>,
    /// The operator certificate (PEM) presented on admin planes; with --key
    /// (or SEQCTL_CERT).
    #[arg(long, global = true)]
    cert: Option<PathBuf>,
    /// The operator certificate's private key (PEM); with --cert (or
    /// SEQCTL_KEY).
    #[arg(long, global = true)]
    key: Option<PathBuf>,
    /// A profile: a table of the profile file holding any of the settings
    /// above (or SEQCTL_PROFILE).
    #[arg(long, global = true)]
    profile: Option<String>,
    /// Where `seqsvr dev` keeps its pid files (for drill faults) and, with
    /// `--tls`, its PKI: without --ca and address flags, seqctl uses that
    /// PKI's operator certificate if the dev cluster runs with TLS (or
    /// SEQCTL_DEV_DIR; default .seqsvr-dev).
    #[arg(long, global = true)]
    dev_dir: Option<PathBuf>,
    /// The dev cluster's port base, as given to `seqsvr dev --port-base`
    /// (or SEQCTL_PORT_BASE; default 7100).
    #[arg(long, global = true, value_parser = defaults::parse_port_base)]
    port_base: Option<u16>,
    #[command(subcommand)]
    cmd: Cmd,
}

impl Cli {
    /// The flags' layer of the settings.
    fn layer(&self) -> Layer {
        let some = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        Layer {
            store: some(&self.store),
            store_admin: some(&self.store_admin),
            alloc: some(&self.alloc),
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            dev_dir: self.dev_dir.clone(),
            port_base: self.port_base,
        }
    }
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
        /// Print `{"uid": …, "seq": …}` (or `{"name": …, "seq": …}`).
        #[arg(long)]
        json: bool,
    },
    /// Prints the next sequence number of each uid, one per line, in order.
    NextBatch {
        /// The uids (a uid listed k times gets k increasing numbers).
        #[arg(required = true)]
        uids: Vec<u64>,
        /// Print a JSON array of `{"uid": …, "seq": …}`.
        #[arg(long)]
        json: bool,
    },
    /// Prints the last sequence number handed out for a uid.
    Current {
        /// The uid.
        uid: u64,
        /// Print `{"uid": …, "seq": …}`.
        #[arg(long)]
        json: bool,
    },
    /// Shows the store group (members, leader, term), the set, routes and
    /// the AllocSvrs' leases; then, when there are several, every set (as
    /// `set status`).
    Status {
        /// Print every set as JSON (as `set status --json`).
        #[arg(long)]
        json: bool,
    },
    /// Shows sections' ceilings, epochs and owners: COUNT sections from
    /// FIRST on (`sections 500 2`: sections 500 and 501).
    Sections {
        /// The first section shown (sections are numbered from 0).
        #[arg(default_value_t = 0)]
        first: u32,
        /// How many (default: every one from FIRST to the set's last).
        count: Option<u32>,
        /// Print a JSON array.
        #[arg(long)]
        json: bool,
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
    /// Declared counters (docs/counters.md): a floor moved only forward,
    /// a maximum, an increment/offset; delete leaves a tombstone.
    Counter {
        #[command(subcommand)]
        op: ctl::counter::CounterCmd,
    },
    /// Time-ordered ids: layout presets (with the date each runs out),
    /// decoding, ids of a namespace, namespaces created and shown.
    Id {
        #[command(subcommand)]
        op: ctl::id::IdOp,
    },
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
    /// From the settings: a CA (and an operator certificate and key), or
    /// else the dev cluster's PKI when seqctl talks to the dev cluster, or
    /// else plaintext.
    fn from_settings(s: &Settings) -> Result<Dial> {
        match (&s.ca, &s.cert, &s.key) {
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
            (None, Some(_), _) | (None, _, Some(_)) => Err(Error::Usage(
                "an operator certificate needs the CA too: give --ca (or SEQCTL_CA)".into(),
            )),
            (None, None, None) => match s
                .dev
                .then(|| defaults::dev_operator_tls(&s.dev_dir))
                .flatten()
            {
                Some(cfg) => Dial::operator(&cfg),
                None => Ok(Dial {
                    tls: None,
                    operator: true,
                }),
            },
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

fn run(cli: Cli) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the runtime", e))?;
    let env = |k: &str| std::env::var(k).ok();
    let s = settings::resolve(cli.layer(), cli.profile.clone(), &env)
        .map_err(|e| Error::Usage(e.to_string()))?;
    let dial = Dial::from_settings(&s)?;
    let tls_on = dial.tls.is_some();
    rt.block_on(listened(&cli.cmd, &s))?;
    let done = rt.block_on(dispatch(cli.cmd, &s, &dial));
    // A TLS mismatch reads as one, whatever call met it first.
    done.map_err(|e| match reach::tls_sentence(&e.to_string(), tls_on) {
        Some(sentence) if !e.is_closed_output() => Error::Failed(format!("{sentence} ({e})")),
        _ => e,
    })
}

/// Commands that read the store, or call the AllocSvrs, first make sure
/// something listens there (well under a second when nothing does).
async fn listened(cmd: &Cmd, s: &Settings) -> Result<()> {
    let (store, store_from) = &s.store;
    let (seeds, seeds_from) = &s.alloc;
    match cmd {
        Cmd::Next { .. } | Cmd::NextBatch { .. } | Cmd::Current { .. } => {
            need_listener(seeds, reach::ALLOC, seeds_from).await
        }
        Cmd::Status { .. }
        | Cmd::Sections { .. }
        | Cmd::Alloc { .. }
        | Cmd::Store { .. }
        | Cmd::Set { .. } => need_listener(store, reach::STORE, store_from).await,
        // An import's plan reads only its source.
        Cmd::Counter {
            op: ctl::counter::CounterCmd::Import(args),
        } if args.dry_run => Ok(()),
        Cmd::Counter { .. } => need_listener(store, reach::STORE, store_from).await,
        Cmd::Health(_) | Cmd::Drill(_) | Cmd::Id { .. } => Ok(()),
    }
}

/// Runs `cmd` against the cluster `s` names, dialled as `dial` says.
async fn dispatch(cmd: Cmd, s: &Settings, dial: &Dial) -> Result<ExitCode> {
    let (store, seeds) = (&s.store.0, &s.alloc.0);
    let seq = || {
        let options = ClientOptions {
            tls: dial.tls.clone(),
            ..Default::default()
        };
        SeqClient::connect(seeds, options)
    };
    let ctl = || Ctl::new(store, &s.store_admin.0, dial.tls.clone());
    let done = match cmd {
        Cmd::Next {
            uid,
            name,
            count,
            json,
        } => next(&seq().await?, uid, name, count, json).await,
        Cmd::NextBatch { uids, json } => {
            let ns = seq().await?.next_batch(&uids).await?;
            ctl::print::numbers(&uids, &ns, json, true)
        }
        Cmd::Current { uid, json } => {
            let n = seq().await?.current(uid).await?;
            ctl::print::numbers(&[uid], &[n], json, false)
        }
        Cmd::Status { json } => status(store, dial, json, ctl).await,
        Cmd::Set { op } => {
            if op.needs_operator() {
                dial.need_operator()?;
            }
            let sets = seqsvr::sets::Sets::new(store, dial.tls.clone());
            ctl::set::run(&sets, op).await
        }
        Cmd::Id { op } => match op.needs() {
            ctl::id::IdNeeds::Offline => ctl::id::run(op),
            ctl::id::IdNeeds::Alloc => ctl::id::run_alloc(&seq().await?, op).await,
            ctl::id::IdNeeds::Store => {
                dial.need_operator()?;
                ctl::id::run_store(&ctl()?, op).await
            }
        },
        Cmd::Counter {
            op: ctl::counter::CounterCmd::Import(args),
        } if args.dry_run => ctl::import::dry_run(&args).await,
        Cmd::Counter { op } => {
            dial.need_operator()?;
            let admin = ctl::counter::CounterAdmin::new(store, dial.tls.clone());
            ctl::counter::run(&admin, op).await
        }
        Cmd::Sections { first, count, json } => ctl::sections(&ctl()?, first, count, json).await,
        Cmd::Alloc { op } => {
            dial.need_operator()?;
            ctl::alloc::run(&ctl()?, op).await
        }
        Cmd::Store { op } => {
            dial.need_operator()?;
            ctl::store::run(&ctl()?, op).await
        }
        Cmd::Health(args) => return health(&args, dial).await,
        Cmd::Drill(args) => run_drill(args, s, dial).await,
    };
    done.map(|()| ExitCode::SUCCESS)
}

/// `seqctl next`: `count` numbers for a uid or a name.
async fn next(
    c: &SeqClient,
    uid: Option<u64>,
    name: Option<String>,
    count: u64,
    json: bool,
) -> Result<()> {
    match (uid, name) {
        (_, Some(name)) => {
            let v = c.next_name_n(&name, count).await?;
            if json {
                ctl::print::json(&serde_json::json!({ "name": name, "seq": v }))
            } else {
                outln!("{v}")?;
                Ok(())
            }
        }
        (Some(uid), None) => {
            let v = c.next_n(uid, count).await?;
            ctl::print::numbers(&[uid], &[v], json, false)
        }
        (None, None) => unreachable!("clap requires a uid or --name"),
    }
}

/// `seqctl status`: the cluster's state, and every set's when there are
/// several.
async fn status(
    store: &[String],
    dial: &Dial,
    json: bool,
    ctl: impl FnOnce() -> Result<Ctl>,
) -> Result<()> {
    let sets = seqsvr::sets::Sets::new(store, dial.tls.clone());
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

/// `seqctl health`: the verdict is the exit code.
async fn health(args: &ctl::health::HealthArgs, dial: &Dial) -> Result<ExitCode> {
    let health = ctl::health::probe(args, dial.tls.as_ref()).await?;
    // The exit code is the verdict: a reader gone early does not turn
    // "unreachable" into success.
    let shown = match args.json {
        true => health.json(&args.addr),
        false => health.line().to_string(),
    };
    match outln!("{shown}") {
        Err(e) if !e.is_closed_output() => Err(e),
        _ => Ok(ExitCode::from(health.exit_code())),
    }
}

/// `seqctl drill`: runs the drill and judges it against its bounds.
async fn run_drill(args: drill::DrillArgs, s: &Settings, dial: &Dial) -> Result<()> {
    let cfg = args.into_config(&s.store.0, &s.alloc.0, &s.dev_dir, dial.tls.clone());
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
