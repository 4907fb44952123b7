//! `seqctl id …`: time-ordered ids, offline (docs/ids.md): the layout
//! presets with the date each runs out, and taking an id apart.

use clap::Subcommand;
use seqsvr_core::ids::{format_unix_ms, Layout};

use crate::error::{Error, Result};
use crate::outln;

/// What `seqctl id` does.
#[derive(Debug, Subcommand)]
pub enum IdOp {
    /// Prints each layout preset: bits, tick, workers, ids per tick and
    /// the date its time bits run out.
    Layouts,
    /// Takes an id apart: time, worker id, sequence.
    Decode {
        /// The id.
        id: u64,
        /// The layout preset it was built with (twitter, sonyflake, js53).
        #[arg(long, default_value = "twitter")]
        layout: String,
    },
}

/// Runs one `seqctl id` command.
pub fn run(op: IdOp) -> Result<()> {
    match op {
        IdOp::Layouts => {
            for name in ["twitter", "sonyflake", "js53"] {
                let l = Layout::preset(name).expect("a preset");
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
        IdOp::Decode { id, layout } => {
            let l = Layout::preset(&layout)
                .ok_or_else(|| Error::Usage(format!("unknown layout {layout:?}")))?;
            let d = l.decode(id).map_err(|e| Error::Usage(e.to_string()))?;
            outln!(
                "time={} tick={} worker={} seq={}",
                format_unix_ms(d.unix_ms),
                d.tick,
                d.worker,
                d.seq
            )
        }
    }
}
