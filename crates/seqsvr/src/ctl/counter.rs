//! `seqctl counter …`: declared counters (docs/counters.md, Declared
//! counters) — create, set-floor, delete, show, list — and
//! [`CounterAdmin`], the same calls as a library (an importer sets floors
//! with [`CounterAdmin::set_counter_floor`]).
//!
//! Each call goes to the admin plane of the AllocSvr that owns the name's
//! section (found through the directory, the set's route table and its
//! store leader's list of AllocSvrs); that AllocSvr records the write in
//! its set's store, fenced by its ownership, and puts it in force before
//! it answers. Should ownership move meanwhile, the AllocSvr asked passes
//! the call on to the new owner. Every call is safe to run again: the
//! same arguments change nothing and answer the declaration in force.

use clap::Subcommand;
use seqsvr_core::name_key;
use seqsvr_core::names::NAME_KEY_BEGIN;
use seqsvr_net::ClientTls;
use seqsvr_proto::{self as pb, CounterOp};

use crate::ctl::import::{FloorOutcome, SinkError};
use crate::error::{Error, Result};
use crate::outln;
use crate::sets::Sets;

/// `seqctl counter …`.
#[derive(Subcommand, Debug, Clone)]
pub enum CounterCmd {
    /// Declares a counter: a start floor (numbers handed out are above
    /// it), a maximum (past it, calls are refused COUNTER_MAX_REACHED), an
    /// increment/offset (every number ≡ offset mod increment). The same
    /// again changes nothing; other rules are refused (COUNTER_CONFLICT).
    Create {
        /// The name (1..=256 bytes).
        name: String,
        /// Start floor.
        #[arg(long, default_value_t = 0)]
        floor: u64,
        /// Maximum (none if not given).
        #[arg(long)]
        max: Option<u64>,
        /// Increment (1..=65536).
        #[arg(long, default_value_t = 1)]
        increment: u64,
        /// Offset (below the increment).
        #[arg(long, default_value_t = 0)]
        offset: u64,
    },
    /// Moves a counter's floor forward: every later number is above it.
    /// Below the floor in force, or below a number handed out: refused
    /// (COUNTER_FLOOR_BACKWARDS). A name never declared gets a floor and
    /// keeps the defaults.
    SetFloor {
        /// The name.
        name: String,
        /// The new floor.
        floor: u64,
    },
    /// Deletes a declaration: a tombstone keeps the floor (at least what
    /// was handed out), so the name, re-created or used undeclared,
    /// continues above everything it handed out.
    Delete {
        /// The name.
        name: String,
    },
    /// Shows a counter: its declaration and current value.
    Show {
        /// The name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists every declaration and tombstone, by name.
    List {
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Sets named counters' floors from Leaf, Tinyid or Redis, so no name
    /// hands out a number the old system gave: prints the plan with
    /// --dry-run, else a summary (imported, already above, refused).
    Import(crate::ctl::import::ImportArgs),
}

/// Declared counters of a cluster, through the owners' admin planes (an
/// operator certificate, or plaintext on a dev cluster).
#[derive(Debug, Clone)]
pub struct CounterAdmin {
    sets: Sets,
    /// Store client planes of any set.
    seeds: Vec<String>,
}

impl CounterAdmin {
    /// The cluster whose store client planes include `seeds` (any set),
    /// dialed with `tls` (the CA and an operator certificate).
    pub fn new(seeds: &[String], tls: Option<ClientTls>) -> Self {
        Self {
            sets: Sets::new(seeds, tls),
            seeds: seeds.to_vec(),
        }
    }

    /// Sets `name`'s floor (idempotent: the same floor again changes
    /// nothing) and returns the floor now in force. A floor below it, or
    /// below a number handed out, is refused (`COUNTER_FLOOR_BACKWARDS`,
    /// with the floor in the status detail's `current`).
    pub async fn set_counter_floor(&self, name: &[u8], floor: u64) -> Result<u64> {
        let req = pb::CounterRequest {
            op: CounterOp::CounterSetFloor as i32,
            name: name.to_vec(),
            floor,
            ..Default::default()
        };
        let r = self.call(req).await?;
        Ok(decl_of(&r).map_or(floor, |d| d.floor))
    }

    /// Sends one counter call to the owner of `req.name`'s section (for a
    /// list: to an AllocSvr of the set serving names).
    pub async fn call(&self, req: pb::CounterRequest) -> Result<pb::CounterReply> {
        let key = match req.op == CounterOp::CounterList as i32 {
            true => NAME_KEY_BEGIN,
            false => name_key(&req.name).map_err(|e| Error::Usage(e.to_string()))?,
        };
        let addr = self.admin_of(key).await?;
        let mut c = self.sets.alloc_admin(&addr)?;
        Ok(c.counter(req).await?.into_inner())
    }

    /// The admin address of the owner of `key`'s section, or of a live
    /// AllocSvr of its set (which passes the call on).
    async fn admin_of(&self, key: u64) -> Result<String> {
        // The set serving the key, by the directory; a cluster whose
        // directory names no store addresses yet (one set, just started)
        // is asked at the seeds.
        let (stores, admin, set_id) = match self.sets.directory().await {
            Ok(dir) => {
                let id = dir
                    .set_of(key)
                    .ok_or_else(|| Error::Usage("no set serves the names' positions".into()))?;
                let set = self.sets.set(&dir, id)?;
                (set.stores.clone(), set.admin.clone(), id)
            }
            Err(_) => (self.seeds.clone(), Vec::new(), 0),
        };
        let routes = self.sets.routes(&stores).await?;
        let owner = (routes.entry_for_uid(key))
            .map(|e| e.alloc.clone())
            .unwrap_or_default();
        let status = match self.sets.leader_status(&admin).await {
            Some(s) => Some(s),
            None => self.sets.leader_status_read(&stores).await?,
        };
        let status = status
            .ok_or_else(|| Error::Failed(format!("no store leader of set {set_id} answered")))?;
        let live = |a: &&pb::AllocLease| !a.expired && !a.admin_addr.is_empty();
        let pick = (status.allocs.iter().filter(live))
            .find(|a| a.alloc_id == owner)
            .or_else(|| status.allocs.iter().find(live));
        pick.map(|a| a.admin_addr.clone())
            .ok_or_else(|| Error::Failed(format!("no live AllocSvr of set {set_id} to ask")))
    }
}

/// An import sets each floor through the name's owner, as `set-floor`
/// does: a floor at or below the one in force, or below a number handed
/// out, is "already above" (the import never moves a counter back).
impl crate::ctl::import::FloorSink for CounterAdmin {
    async fn set_floor(
        &self,
        name: &[u8],
        floor: u64,
    ) -> std::result::Result<FloorOutcome, SinkError> {
        let req = pb::CounterRequest {
            op: CounterOp::CounterSetFloor as i32,
            name: name.to_vec(),
            floor,
            ..Default::default()
        };
        match self.call(req).await {
            Ok(r) if r.changed => Ok(FloorOutcome::Raised),
            // The same floor in force already: a re-run.
            Ok(r) => Ok(FloorOutcome::AlreadyAbove {
                current: decl_of(&r).map_or(floor, |d| d.floor),
            }),
            Err(Error::Rpc(st)) => {
                let d = pb::detail_of(&st).unwrap_or_default();
                match pb::ErrorKind::try_from(d.kind) {
                    Ok(pb::ErrorKind::CounterFloorBackwards) => {
                        Ok(FloorOutcome::AlreadyAbove { current: d.current })
                    }
                    Ok(
                        pb::ErrorKind::InvalidRequest
                        | pb::ErrorKind::CounterConflict
                        | pb::ErrorKind::CounterMaxReached,
                    ) => Err(SinkError::Refused(st.message().to_string())),
                    _ => Err(SinkError::Failed(st.message().to_string())),
                }
            }
            Err(Error::Usage(e)) => Err(SinkError::Refused(e)),
            Err(e) => Err(SinkError::Failed(e.to_string())),
        }
    }
}

fn decl_of(r: &pb::CounterReply) -> Option<&pb::CounterDecl> {
    r.counters.first().and_then(|c| c.decl.as_ref())
}

/// Runs `seqctl counter <cmd>`.
pub async fn run(admin: &CounterAdmin, cmd: CounterCmd) -> Result<()> {
    let req = |op: CounterOp, name: &str| pb::CounterRequest {
        op: op as i32,
        name: name.as_bytes().to_vec(),
        ..Default::default()
    };
    match cmd {
        CounterCmd::Import(args) => crate::ctl::import::import(&args, admin).await,
        CounterCmd::Create {
            name,
            floor,
            max,
            increment,
            offset,
        } => {
            let r = pb::CounterRequest {
                floor,
                has_max: max.is_some(),
                max: max.unwrap_or(0),
                increment,
                offset,
                ..req(CounterOp::CounterCreate, &name)
            };
            print_write(&admin.call(r).await?)
        }
        CounterCmd::SetFloor { name, floor } => {
            let r = pb::CounterRequest {
                floor,
                ..req(CounterOp::CounterSetFloor, &name)
            };
            print_write(&admin.call(r).await?)
        }
        CounterCmd::Delete { name } => {
            print_write(&admin.call(req(CounterOp::CounterDelete, &name)).await?)
        }
        CounterCmd::Show { name, json } => {
            let r = admin.call(req(CounterOp::CounterShow, &name)).await?;
            for c in &r.counters {
                print_state(c, json)?;
            }
            Ok(())
        }
        CounterCmd::List { json } => list(admin, json).await,
    }
}

async fn list(admin: &CounterAdmin, json: bool) -> Result<()> {
    let mut after = Vec::new();
    loop {
        let r = pb::CounterRequest {
            op: CounterOp::CounterList as i32,
            name: after.clone(),
            ..Default::default()
        };
        let r = admin.call(r).await?;
        for c in &r.counters {
            print_state(c, json)?;
        }
        match (r.more, r.counters.last().and_then(|c| c.decl.as_ref())) {
            (true, Some(d)) => after = d.name.clone(),
            _ => return Ok(()),
        }
    }
}

fn print_write(r: &pb::CounterReply) -> Result<()> {
    for c in &r.counters {
        print_state(c, false)?;
    }
    outln!(
        "{}",
        if r.changed {
            "changed"
        } else {
            "unchanged (already so)"
        }
    )
}

fn print_state(c: &pb::CounterState, json: bool) -> Result<()> {
    let Some(d) = &c.decl else { return Ok(()) };
    let name = String::from_utf8_lossy(&d.name);
    let max = d.has_max.then_some(d.max);
    let current = c.has_current.then_some(c.current);
    if json {
        return super::print::json(&serde_json::json!({
            "name": name, "declared": d.declared, "floor": d.floor, "max": max,
            "increment": d.increment, "offset": d.offset, "section": d.section,
            "current": current,
        }));
    }
    let state = if d.declared { "declared" } else { "undeclared" };
    let max = max.map_or("none".into(), |m| m.to_string());
    let current = current.map_or(String::new(), |v| format!(" current={v}"));
    outln!(
        "{name} {state} floor={} max={max} increment={} offset={} section={}{current}",
        d.floor,
        d.increment,
        d.offset,
        d.section
    )
}
