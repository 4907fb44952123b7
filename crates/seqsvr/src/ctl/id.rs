//! `seqctl id …`: time-ordered ids (docs/ids.md). Offline: the layout
//! presets with the date each runs out, and taking an id apart by a
//! preset. Against a cluster: ids of a namespace (`next`, through the
//! AllocSvrs), decoding by a namespace's own layout, and namespaces
//! created and shown on the store's admin plane.

use clap::Subcommand;
use seqsvr_client::SeqClient;
use seqsvr_core::ids::{format_unix_ms, Layout};
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
    /// Takes an id apart: time, worker id, sequence (by a preset, or by a
    /// namespace's own layout with --namespace).
    Decode {
        /// The id.
        id: u64,
        /// The layout preset it was built with (twitter, sonyflake, js53).
        #[arg(long, default_value = "twitter")]
        layout: String,
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
    /// Creates a namespace (operator): a layout preset and the window
    /// holders raise their time ceilings ahead by. Running it again with
    /// the same layout and window changes nothing.
    Create {
        /// The namespace.
        namespace: String,
        /// The layout preset (twitter, sonyflake, js53).
        #[arg(long, default_value = "twitter")]
        layout: String,
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
                let l = preset(name)?;
                let end = l.end_ms().map_or("never".into(), format_unix_ms);
                outln!(
                    "{name}\ttime={} worker={} seq={} unit={}ms workers={} ids/tick={} runs_out={end}",
                    l.time_bits,
                    l.worker_bits,
                    l.seq_bits,
                    l.unit_ms,
                    l.workers(),
                    l.max_seq() + 1
                )?;
            }
            Ok(())
        }
        IdOp::Decode { id, layout, .. } => {
            let l = preset(&layout)?;
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
            let l = preset(&layout)?;
            let created = ctl.admin.create_id_space(&namespace, &l, window_ms).await?;
            let end = l.end_ms().map_or("never".into(), format_unix_ms);
            outln!(
                "{namespace}: {} ({layout}, window {window_ms} ms, {} worker ids, runs out {end})",
                if created { "created" } else { "exists already" },
                l.workers()
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
    let end = l.end_ms().map_or("never".into(), format_unix_ms);
    outln!(
        "{}\ttime={} worker={} seq={} unit={}ms window={}ms runs_out={end}",
        s.name,
        l.time_bits,
        l.worker_bits,
        l.seq_bits,
        l.unit_ms,
        s.window_ms
    )?;
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
            "runs_out_ms": l.end_ms(),
        },
        "window_ms": s.window_ms,
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
