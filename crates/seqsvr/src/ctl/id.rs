//! `seqctl id …`: time-ordered ids (docs/ids.md). Offline: the layout
//! presets with the date each runs out, and taking an id apart by a
//! preset. Against a cluster: ids of a namespace (`next`, through the
//! AllocSvrs), decoding by a namespace's own layout, and namespaces
//! created and shown on the store's admin plane.

use clap::{Args, Subcommand};
use seqsvr_client::SeqClient;
use seqsvr_core::ids::{format_unix_ms, parse_unix_ms, Layout};
use seqsvr_store_api::ids::IdSpaceShown;

use super::Ctl;
use crate::error::{Error, Result};
use crate::outln;

/// The window a namespace is created with unless told (ms).
pub const DEFAULT_WINDOW_MS: u64 = 3_000;

/// What `seqctl id` does.
#[derive(Debug, Subcommand)]
pub enum IdOp {
    /// Prints each layout preset: bits, tick, workers, ids per tick and
    /// the date its time bits run out.
    Layouts,
    /// Takes an id apart: time, worker id, sequence — offline by a layout
    /// (a preset, each field of which a flag may change, as `create`
    /// takes them), or by a namespace's own layout with --namespace.
    Decode {
        /// The id.
        id: u64,
        /// The layout it was built with (offline).
        #[command(flatten)]
        layout: LayoutArgs,
        /// Decode by this namespace's layout, asking the cluster.
        #[arg(long)]
        namespace: Option<String>,
    },
    /// Hands out ids of a namespace (one per line).
    Next {
        /// The namespace.
        namespace: String,
        /// How many.
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// Output as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Creates a namespace (operator): a layout (a preset, each field
    /// of which a flag may change) and the window holders raise their
    /// time ceilings ahead by. Prints the date the time bits run out.
    /// Running it again with the same layout and window changes nothing;
    /// another layout for an existing namespace is refused.
    Create {
        /// The namespace.
        namespace: String,
        /// The layout.
        #[command(flatten)]
        layout: LayoutArgs,
        /// The ceiling window, in ms.
        #[arg(long, default_value_t = DEFAULT_WINDOW_MS)]
        window_ms: u64,
    },
    /// Shows namespaces and their worker ids (operator).
    Show {
        /// Only this namespace.
        namespace: Option<String>,
        /// Output as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// A layout on the command line: a preset, then any field changed.
#[derive(Debug, Clone, Args)]
pub struct LayoutArgs {
    /// The preset the other flags start from (twitter, sonyflake, js53).
    #[arg(long, alias = "layout", default_value = "twitter")]
    pub preset: String,
    /// Bits of time.
    #[arg(long)]
    pub time_bits: Option<u32>,
    /// Bits of worker id (2^bits AllocSvrs may hold the namespace at once).
    #[arg(long)]
    pub worker_bits: Option<u32>,
    /// Bits of sequence (2^bits ids per tick per worker id).
    #[arg(long)]
    pub seq_bits: Option<u32>,
    /// One tick: 1ms, 10ms, 100ms, 1s, 1m, 1h or 1d.
    #[arg(long)]
    pub unit: Option<String>,
    /// Where time 0 is: a UTC date (2024-01-01, 2024-01-01T00:00:00Z) or
    /// Unix ms; not in the future.
    #[arg(long)]
    pub epoch: Option<String>,
    /// At most 53 bits in all, so that JavaScript holds every id exactly.
    #[arg(long)]
    pub js_safe: bool,
    /// Scatter the ids over 2^N shards (N bits on top of the id, counted
    /// in the 63 or 53); decoding takes them off. 0: not scattered.
    #[arg(long)]
    pub shard_bits: Option<u32>,
    /// Worker ids the namespace must have at least (AllocSvrs to come);
    /// the store also refuses fewer than its registered AllocSvrs.
    #[arg(long)]
    pub holders: Option<u64>,
}

impl LayoutArgs {
    /// The layout the flags say, validated at Unix time `now_ms`: every
    /// refusal names the flag, before anything is sent.
    pub fn layout(&self, now_ms: u64) -> Result<Layout> {
        let bad = |why: String| Error::Usage(why);
        let l = self.fields()?;
        l.check_epoch(now_ms).map_err(|e| bad(e.to_string()))?;
        if let Some(h) = self.holders {
            if l.workers() < h {
                return Err(bad(format!(
                    "--holders {h}: {} worker bits hold only {} worker ids",
                    l.worker_bits,
                    l.workers()
                )));
            }
        }
        Ok(l)
    }

    /// The layout's fields as the flags say them, checked for shape only
    /// (bit budget, unit, epoch syntax): what decoding needs. A layout
    /// whose time bits have run out still decodes the ids it made.
    pub fn fields(&self) -> Result<Layout> {
        let bad = |why: String| Error::Usage(why);
        let mut l = preset(&self.preset)?;
        l.time_bits = self.time_bits.unwrap_or(l.time_bits);
        l.worker_bits = self.worker_bits.unwrap_or(l.worker_bits);
        l.seq_bits = self.seq_bits.unwrap_or(l.seq_bits);
        if let Some(u) = &self.unit {
            l.unit_ms = Layout::unit_named(u).ok_or_else(|| {
                bad(format!(
                    "--unit {u:?}: one of 1ms, 10ms, 100ms, 1s, 1m, 1h, 1d"
                ))
            })?;
        }
        if let Some(e) = &self.epoch {
            l.epoch_ms = parse_unix_ms(e).ok_or_else(|| {
                bad(format!(
                    "--epoch {e:?}: a UTC date (2024-01-01T00:00:00Z) or Unix ms"
                ))
            })?;
        }
        l.js_safe |= self.js_safe;
        if let Some(s) = self.shard_bits {
            l = l.with_shards(s);
        }
        l.validate().map_err(|e| bad(e.to_string()))?;
        Ok(l)
    }
}

/// One line about a layout: its fields, workers, ids per tick, and the
/// date its time bits run out.
pub fn describe(l: &Layout) -> String {
    let end = l.end_ms().map_or("never".into(), format_unix_ms);
    let unit = seqsvr_core::ids::layout::UNITS
        .iter()
        .find(|(_, ms)| *ms == l.unit_ms)
        .map_or(format!("{}ms", l.unit_ms), |(n, _)| n.to_string());
    format!(
        "time={} worker={} seq={} shard={} unit={unit} epoch={} js_safe={} \
         workers={} ids/tick={} runs_out={end}",
        l.time_bits,
        l.worker_bits,
        l.seq_bits,
        l.shard_bits(),
        format_unix_ms(l.epoch_ms),
        l.js_safe,
        l.workers(),
        l.max_seq() + 1
    )
}

/// What a `seqctl id` command talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdNeeds {
    /// Nothing: offline.
    Offline,
    /// The AllocSvrs' client planes.
    Alloc,
    /// The store's admin planes (an operator).
    Store,
}

impl IdOp {
    /// What it talks to.
    pub fn needs(&self) -> IdNeeds {
        match self {
            IdOp::Layouts
            | IdOp::Decode {
                namespace: None, ..
            } => IdNeeds::Offline,
            IdOp::Decode { .. } | IdOp::Next { .. } => IdNeeds::Alloc,
            IdOp::Create { .. } | IdOp::Show { .. } => IdNeeds::Store,
        }
    }
}

fn preset(name: &str) -> Result<Layout> {
    Layout::preset(name).ok_or_else(|| {
        Error::Usage(format!(
            "unknown layout {name:?} (twitter, sonyflake or js53)"
        ))
    })
}

/// Runs an offline `seqctl id` command.
pub fn run(op: IdOp) -> Result<()> {
    match op {
        IdOp::Layouts => {
            for name in ["twitter", "sonyflake", "js53"] {
                outln!("{name}\t{}", describe(&preset(name)?))?;
            }
            Ok(())
        }
        IdOp::Decode { id, layout, .. } => {
            let l = layout.fields()?;
            let d = l.decode(id).map_err(|e| Error::Usage(e.to_string()))?;
            outln!(
                "time={} tick={} worker={} seq={}",
                format_unix_ms(d.unix_ms),
                d.tick,
                d.worker,
                d.seq
            )
        }
        _ => Err(Error::Usage("this command needs a cluster".into())),
    }
}

/// Runs a `seqctl id` command against the AllocSvrs.
pub async fn run_alloc(c: &SeqClient, op: IdOp) -> Result<()> {
    match op {
        IdOp::Next {
            namespace,
            count,
            json,
        } => {
            let ids = c.next_ids(&namespace, count).await?;
            if json {
                return super::print::json(
                    &serde_json::json!({ "namespace": namespace, "ids": ids }),
                );
            }
            for id in ids {
                outln!("{id}")?;
            }
            Ok(())
        }
        IdOp::Decode {
            id,
            namespace: Some(ns),
            ..
        } => {
            let d = c.decode_id(&ns, id).await?;
            outln!(
                "namespace={} time={} tick={} worker={} seq={}",
                d.namespace,
                format_unix_ms(d.unix_ms),
                d.tick,
                d.worker,
                d.sequence
            )
        }
        op => run(op),
    }
}

/// Runs a `seqctl id` command against the store's admin planes.
pub async fn run_store(ctl: &Ctl, op: IdOp) -> Result<()> {
    match op {
        IdOp::Create {
            namespace,
            layout,
            window_ms,
        } => {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let l = layout.layout(now_ms)?;
            let created = ctl.admin.create_id_space(&namespace, &l, window_ms).await?;
            outln!(
                "{namespace}: {} (window {window_ms} ms) {}",
                if created { "created" } else { "exists already" },
                describe(&l)
            )
        }
        IdOp::Show { namespace, json } => {
            let spaces = ctl
                .admin
                .id_spaces(namespace.as_deref().unwrap_or(""))
                .await?;
            if json {
                return super::print::json(&spaces.iter().map(to_json).collect::<Vec<_>>());
            }
            for s in &spaces {
                show(s)?;
            }
            Ok(())
        }
        op => run(op),
    }
}

fn show(s: &IdSpaceShown) -> Result<()> {
    let l = &s.layout;
    outln!("{}\twindow={}ms {}", s.name, s.window_ms, describe(l))?;
    for w in &s.workers {
        let holder = match &w.holder {
            Some((a, i)) => format!("{a} ({i:x}){}", if w.live { "" } else { " lapsed" }),
            None => "released".into(),
        };
        outln!(
            "  worker {}\tepoch {}\tceiling {}\t{holder}",
            w.grant.worker,
            w.grant.epoch,
            format_unix_ms(l.epoch_ms + w.grant.ceiling * l.unit_ms)
        )?;
    }
    if s.unrecorded_ceiling > 0 {
        outln!(
            "  other worker ids start above {} (restored)",
            format_unix_ms(l.epoch_ms + s.unrecorded_ceiling * l.unit_ms)
        )?;
    }
    Ok(())
}

fn to_json(s: &IdSpaceShown) -> serde_json::Value {
    let l = &s.layout;
    serde_json::json!({
        "namespace": s.name,
        "layout": {
            "time_bits": l.time_bits,
            "worker_bits": l.worker_bits,
            "seq_bits": l.seq_bits,
            "epoch_ms": l.epoch_ms,
            "unit_ms": l.unit_ms,
            "js_safe": l.js_safe,
            "seq_before_worker": l.seq_before_worker(),
            "shard_bits": l.shard_bits(),
            "runs_out_ms": l.end_ms(),
        },
        "window_ms": s.window_ms,
        "unrecorded_ceiling": s.unrecorded_ceiling,
        "workers": s.workers.iter().map(|w| serde_json::json!({
            "worker": w.grant.worker,
            "epoch": w.grant.epoch,
            "floor": w.grant.floor,
            "ceiling": w.grant.ceiling,
            "holder": w.holder.as_ref().map(|(a, _)| a),
            "incarnation": w.holder.as_ref().map(|(_, i)| format!("{i:x}")),
            "live": w.live,
        })).collect::<Vec<_>>(),
    })
}
