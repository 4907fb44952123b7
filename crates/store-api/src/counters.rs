//! The store's counter calls (docs/counters.md, Declared counters), on the
//! peer plane: the owner of a name's section writes its declaration,
//! fenced by owner, incarnation and epoch like a raise; a new owner reads
//! the declarations of its sections before serving them. Every write is
//! safe to repeat: the same create, floor or delete again changes nothing
//! and answers the declaration in force.

use seqsvr_core::{CounterDecl, CounterRules, Epoch, Incarnation, SectionId};
use seqsvr_proto::{self as pb};

use crate::client::PeerClient;
use crate::error::Result;

/// A counter write, as the owner of the name's section asks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterWrite {
    /// Declare with these rules, floor at least `floor`.
    Create {
        /// The start floor.
        floor: u64,
        /// The rules.
        rules: CounterRules,
    },
    /// Move the floor to `floor` (only forward).
    SetFloor {
        /// The new floor.
        floor: u64,
    },
    /// Delete: the floor stays (at least what was handed out).
    Delete,
}

/// One declaration as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterShown {
    /// The name.
    pub name: Vec<u8>,
    /// The section of its position.
    pub section: SectionId,
    /// The declaration.
    pub decl: CounterDecl,
}

impl From<&pb::CounterDecl> for CounterShown {
    fn from(d: &pb::CounterDecl) -> Self {
        let rules = d.declared.then_some(CounterRules {
            max: d.has_max.then_some(d.max),
            increment: d.increment,
            offset: d.offset,
        });
        Self {
            name: d.name.clone(),
            section: d.section,
            decl: CounterDecl {
                floor: d.floor,
                rules,
            },
        }
    }
}

impl From<&CounterShown> for pb::CounterDecl {
    fn from(c: &CounterShown) -> Self {
        let r = c.decl.rules_or_default();
        Self {
            name: c.name.clone(),
            floor: c.decl.floor,
            declared: c.decl.rules.is_some(),
            has_max: r.max.is_some(),
            max: r.max.unwrap_or(0),
            increment: r.increment,
            offset: r.offset,
            section: c.section,
        }
    }
}

impl PeerClient {
    /// Writes `name`'s declaration as the owner (`alloc`'s `incarnation`)
    /// of `section` at `epoch`, whose current value of the name is
    /// `handed_out`. Returns the declaration in force and whether this
    /// call changed it.
    #[allow(clippy::too_many_arguments)]
    pub async fn counter_write(
        &self,
        alloc: &str,
        incarnation: Incarnation,
        section: SectionId,
        epoch: Epoch,
        name: &[u8],
        write: CounterWrite,
        handed_out: u64,
    ) -> Result<(CounterShown, bool)> {
        let mut req = pb::CounterWriteRequest {
            alloc: alloc.into(),
            incarnation,
            section,
            epoch,
            name: name.to_vec(),
            handed_out,
            ..Default::default()
        };
        match write {
            CounterWrite::Create { floor, rules } => {
                req.op = pb::CounterOp::CounterCreate as i32;
                req.floor = floor;
                req.has_max = rules.max.is_some();
                req.max = rules.max.unwrap_or(0);
                req.increment = rules.increment;
                req.offset = rules.offset;
            }
            CounterWrite::SetFloor { floor } => {
                req.op = pb::CounterOp::CounterSetFloor as i32;
                req.floor = floor;
            }
            CounterWrite::Delete => req.op = pb::CounterOp::CounterDelete as i32,
        }
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.counter_write(r).await })
            .await?;
        let shown = r.counter.as_ref().map(CounterShown::from).ok_or_else(|| {
            crate::Error::Internal("a counter write's reply without the counter".into())
        })?;
        Ok((shown, r.changed))
    }

    /// The declarations of sections `first..first+count` (linearizable).
    pub async fn counters_of(&self, first: SectionId, count: u32) -> Result<Vec<CounterShown>> {
        let req = pb::CountersRequest {
            first,
            count,
            ..Default::default()
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.counters(r).await })
            .await?;
        Ok(r.counters.iter().map(CounterShown::from).collect())
    }

    /// Up to `limit` declarations by name after `after`, and whether more
    /// follow (linearizable).
    pub async fn counters_after(
        &self,
        after: &[u8],
        limit: u32,
    ) -> Result<(Vec<CounterShown>, bool)> {
        let req = pb::CountersRequest {
            after: after.to_vec(),
            limit,
            ..Default::default()
        };
        let r = self
            .replicas
            .call_with(req, |mut c, r| async move { c.counters(r).await })
            .await?;
        Ok((r.counters.iter().map(CounterShown::from).collect(), r.more))
    }
}
