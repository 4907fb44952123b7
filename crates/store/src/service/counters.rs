//! The store's counter calls (docs/counters.md, Declared counters) on the
//! peer plane: a declaration written by the owner of the name's section
//! (the certificate names the AllocSvr, served by the leader only, fenced
//! by owner, incarnation and epoch in the state machine), and the
//! declarations a new owner loads before it serves a section, read after
//! a barrier.

use seqsvr_core::{check_name, CounterRules};
use seqsvr_proto::{self as pb};
use seqsvr_store_api::counters::CounterShown;
use seqsvr_store_api::Error;
use seqsvr_store_core::command::CounterOp;
use seqsvr_store_core::counters::CounterRecord;

use super::{check_id, unexpected, StoreApi};
use crate::types::{Command, Reply};

/// Most declarations one `Counters` reply lists.
const MAX_LIST: u32 = 1000;

/// The write a request asks, checked at the edge (the state machine checks
/// it again).
fn op_of(r: &pb::CounterWriteRequest) -> Result<CounterOp, Error> {
    match pb::CounterOp::try_from(r.op) {
        Ok(pb::CounterOp::CounterCreate) => {
            let rules = CounterRules {
                max: r.has_max.then_some(r.max),
                increment: r.increment,
                offset: r.offset,
            };
            rules
                .validate(r.floor)
                .map_err(|e| Error::Invalid(e.to_string()))?;
            Ok(CounterOp::Create {
                floor: r.floor,
                rules,
            })
        }
        Ok(pb::CounterOp::CounterSetFloor) => Ok(CounterOp::SetFloor { floor: r.floor }),
        Ok(pb::CounterOp::CounterDelete) => Ok(CounterOp::Delete),
        _ => Err(Error::Invalid(format!("not a counter write: op {}", r.op))),
    }
}

fn shown(name: &[u8], r: &CounterRecord) -> pb::CounterDecl {
    (&CounterShown {
        name: name.to_vec(),
        section: r.section,
        decl: r.decl,
    })
        .into()
}

impl StoreApi {
    /// Writes a counter's declaration for the owner of its section.
    pub(super) async fn counter_write(
        &self,
        r: pb::CounterWriteRequest,
    ) -> Result<pb::CounterWriteReply, Error> {
        check_name(&r.name).map_err(|e| Error::Invalid(e.to_string()))?;
        if r.incarnation == 0 {
            return Err(Error::Invalid("incarnation must not be 0".into()));
        }
        let op = op_of(&r)?;
        let cmd = Command::Counter {
            alloc: check_id(&r.alloc)?,
            incarnation: r.incarnation,
            section: r.section,
            epoch: r.epoch,
            name: r.name.clone(),
            op,
            handed_out: r.handed_out,
        };
        self.require_leader()?;
        match self.write(cmd).await? {
            Reply::Counter { decl, changed } => {
                let section = r.section;
                let rec = CounterRecord { section, decl };
                Ok(pb::CounterWriteReply {
                    counter: Some(shown(&r.name, &rec)),
                    changed,
                })
            }
            r => Err(unexpected(r)),
        }
    }

    /// The declarations of a run of sections, or a page of all of them
    /// by name, after a barrier (linearizable).
    pub(super) async fn counters(
        &self,
        r: pb::CountersRequest,
    ) -> Result<pb::CountersReply, Error> {
        if r.after.len() > seqsvr_core::MAX_NAME_LEN {
            return Err(Error::Invalid("`after` is longer than a name".into()));
        }
        self.require_leader()?;
        self.barrier().await?;
        let a = self.sm.read();
        let counters = &a.state.counters;
        if r.count > 0 {
            let counters = (counters.of_sections(r.first, r.count))
                .map(|(n, rec)| shown(n, rec))
                .collect();
            return Ok(pb::CountersReply {
                counters,
                more: false,
            });
        }
        let limit = if r.limit == 0 {
            MAX_LIST
        } else {
            r.limit.min(MAX_LIST)
        };
        let (page, more) = counters.after(&r.after, limit as usize);
        Ok(pb::CountersReply {
            counters: page.into_iter().map(|(n, rec)| shown(n, rec)).collect(),
            more,
        })
    }
}
