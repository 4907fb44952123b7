//! `seqctl set …`: add a set, move a uid range between sets, show every
//! set. The work is done by [`crate::sets`]; this is its command line.

use clap::Subcommand;

use crate::error::Result;
use crate::outln;
use crate::sets::{self, Sets};

/// `seqctl set …`.
#[derive(Subcommand, Debug, Clone)]
pub enum SetOp {
    /// Brings a fresh store group (started with this set id and
    /// `added_set = true`, serving nothing yet) into service for a free uid
    /// range. Running it again finishes or reports it done; while a move
    /// into or out of the set is under way it is refused, naming the move
    /// (finish that first).
    Add {
        /// The new set's id (as in its stores' config).
        #[arg(long)]
        id: u32,
        /// The uids it serves, BEGIN..END (whole sections, free).
        #[arg(long, value_parser = sets::parse_range)]
        range: (u64, u64),
        /// Its store replicas' client-plane addresses, comma-separated.
        #[arg(long = "set-store", value_delimiter = ',', required = true)]
        set_store: Vec<String>,
    },
    /// Moves a uid range (whole sections) to another set, online: freeze in
    /// the source, install in the destination above the source's final
    /// ceilings, flip the directory. Running it again resumes or reports it
    /// done; another move, or a `set add` of either set, is refused until
    /// it finishes.
    Move {
        /// The uids to move, BEGIN..END.
        #[arg(long, value_parser = sets::parse_range)]
        range: (u64, u64),
        /// The destination set.
        #[arg(long)]
        to: u32,
        /// Stop after this step (for drills: crash something, run again).
        #[arg(long, value_enum)]
        stop_after: Option<sets::mover::Step>,
    },
    /// Shows the directory and every set: ranges, stores (leader, term,
    /// members), sections served, AllocSvrs.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

impl SetOp {
    /// Whether the command uses admin planes (needs an operator
    /// certificate under TLS).
    pub fn needs_operator(&self) -> bool {
        !matches!(self, SetOp::Status { .. })
    }
}

/// Runs `seqctl set <op>`.
pub async fn run(sets: &Sets, op: SetOp) -> Result<()> {
    match op {
        SetOp::Add {
            id,
            range: (b, e),
            set_store,
        } => {
            let r = sets::add::add_set(sets, id, b, e, &set_store).await?;
            outln!("{}", r.to_string().trim_end())?;
        }
        SetOp::Move {
            range: (b, e),
            to,
            stop_after,
        } => {
            let r = sets::mover::move_range(sets, b, e, to, stop_after).await?;
            outln!("{}", r.to_string().trim_end())?;
        }
        SetOp::Status { json } => print_view(sets, json).await?,
    }
    Ok(())
}

/// Prints every set (as text, or as JSON).
pub async fn print_view(sets: &Sets, json: bool) -> Result<()> {
    let v = sets::view::view(sets).await?;
    if json {
        let text = serde_json::to_string_pretty(&v)
            .map_err(|e| crate::error::Error::Failed(format!("status as JSON: {e}")))?;
        outln!("{text}")?;
    } else {
        outln!("{}", v.to_string().trim_end())?;
    }
    Ok(())
}
