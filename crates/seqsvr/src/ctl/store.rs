//! `seqctl store …`: store group settings, over the store's admin plane.

use clap::Subcommand;
use seqsvr_core::LeaseTerms;

use super::Ctl;
use crate::error::{Error, Result};
use crate::outln;

/// `seqctl store …`.
#[derive(Subcommand, Debug, Clone)]
pub enum StoreOp {
    /// Changes the lease terms (replicated store state; the store config's
    /// `[lease]` only gives a new group its first terms).
    Lease {
        /// How long a granted renewal lets an AllocSvr serve, in ms.
        #[arg(long)]
        lease_ms: u64,
        /// Extra wait before a section moves, for clock-rate drift, in ms.
        #[arg(long)]
        margin_ms: u64,
        /// Print the terms in force as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Builds a snapshot now on the first store replica that answers (each
    /// replica keeps its own: give `--store-admin` one address to choose
    /// it) and prints its size and build time.
    Snapshot {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Takes a backup on the leader (every ceiling acknowledged before the
    /// call is in it) and writes it to `--out`, durably: restore it with
    /// `seqsvr store restore` (docs/operations.md, Backup and disaster
    /// recovery).
    Backup {
        /// The file to write (replaced only once the new one is on disk).
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Store group membership: add, remove, replace replicas.
    #[command(flatten)]
    Members(super::members::MemberOp),
}

/// Runs `seqctl store <op>`.
pub async fn run(ctl: &Ctl, op: StoreOp) -> Result<()> {
    match op {
        StoreOp::Lease {
            lease_ms,
            margin_ms,
            json,
        } => {
            let terms = LeaseTerms {
                lease_ms,
                margin_ms,
            };
            set_lease(ctl, terms, json).await
        }
        StoreOp::Snapshot { json } => {
            let r = ctl.admin.snapshot().await?;
            if json {
                return super::print::json(&serde_json::json!({
                    "last_log_index": r.last_log_index,
                    "bytes": r.bytes,
                    "build_us": r.build_us,
                }));
            }
            outln!(
                "snapshot up to log index {}: {} bytes, built and stored in {:.1} ms",
                r.last_log_index,
                r.bytes,
                r.build_us as f64 / 1e3
            )?;
            Ok(())
        }
        StoreOp::Backup { out } => backup(ctl, &out).await,
        StoreOp::Members(op) => super::members::run(ctl, op).await,
    }
}

/// `seqctl store backup --out FILE`.
pub async fn backup(ctl: &Ctl, out: &std::path::Path) -> Result<()> {
    let bytes = ctl.admin.backup().await?;
    let b = seqsvr_store_core::backup::Backup::decode(&bytes)
        .map_err(|e| Error::Failed(format!("the leader's backup does not read back: {e}")))?;
    crate::restore::write_durably(out, &bytes)?;
    let now = crate::restore::now_unix_ms();
    outln!("{}", crate::restore::describe(&b, now))?;
    outln!("written to {} ({} bytes)", out.display(), bytes.len())?;
    Ok(())
}

/// Changes the lease terms (replicated, so every leader judges leases by
/// the terms they were granted under); prints the terms in force.
pub async fn set_lease(ctl: &Ctl, terms: LeaseTerms, json: bool) -> Result<()> {
    terms.validate().map_err(Error::Usage)?;
    let now = ctl.admin.set_lease(terms).await?;
    if json {
        return super::print::json(&serde_json::json!({
            "lease_ms": now.lease_ms,
            "margin_ms": now.margin_ms,
        }));
    }
    outln!(
        "lease {} ms + margin {} ms (clock drift tolerated: {:.1} %)",
        now.lease_ms,
        now.margin_ms,
        100.0 * now.margin_ms as f64 / now.lease_ms as f64
    )?;
    Ok(())
}
