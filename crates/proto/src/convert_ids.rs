//! Wire conversions of the id types (docs/ids.md), a part of
//! [`crate::convert`]'s one home. A layout from the wire is validated
//! here, before any component sees it.

use seqsvr_core::ids::{Layout, Order, WorkerGrant};

use crate::v1 as pb;

impl From<&Layout> for pb::IdLayout {
    fn from(l: &Layout) -> Self {
        pb::IdLayout {
            time_bits: l.time_bits,
            worker_bits: l.worker_bits,
            seq_bits: l.seq_bits,
            epoch_ms: l.epoch_ms,
            unit_ms: l.unit_ms,
            js_safe: l.js_safe,
            seq_before_worker: l.seq_before_worker(),
            shard_bits: l.shard_bits(),
        }
    }
}

impl TryFrom<&pb::IdLayout> for Layout {
    type Error = String;

    fn try_from(l: &pb::IdLayout) -> Result<Self, String> {
        let layout = Layout {
            time_bits: l.time_bits,
            worker_bits: l.worker_bits,
            seq_bits: l.seq_bits,
            epoch_ms: l.epoch_ms,
            unit_ms: l.unit_ms,
            js_safe: l.js_safe,
            order: if l.seq_before_worker {
                Order::TimeSeqWorker
            } else {
                Order::TimeWorkerSeq
            },
        }
        .with_shards(l.shard_bits);
        layout.validate().map_err(|e| e.to_string())?;
        Ok(layout)
    }
}

impl From<&WorkerGrant> for pb::WorkerHolding {
    fn from(g: &WorkerGrant) -> Self {
        pb::WorkerHolding {
            worker: g.worker,
            epoch: g.epoch,
            floor: g.floor,
            ceiling: g.ceiling,
        }
    }
}

impl From<&pb::WorkerHolding> for WorkerGrant {
    fn from(g: &pb::WorkerHolding) -> Self {
        WorkerGrant {
            worker: g.worker,
            epoch: g.epoch,
            floor: g.floor,
            ceiling: g.ceiling,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_round_trip_and_bad_ones_are_refused() {
        let scattered = Layout {
            time_bits: 38,
            ..Layout::twitter()
        }
        .with_shards(3);
        let sony = Layout {
            time_bits: 37,
            ..Layout::sonyflake()
        }
        .with_shards(2);
        for l in [
            Layout::twitter(),
            Layout::sonyflake(),
            Layout::js53(),
            scattered,
            sony,
        ] {
            assert_eq!(Layout::try_from(&pb::IdLayout::from(&l)), Ok(l));
        }
        let mut w = pb::IdLayout::from(&Layout::twitter());
        w.time_bits = 60;
        assert!(Layout::try_from(&w).is_err());
        // Shard bits count in the 63.
        let mut w = pb::IdLayout::from(&Layout::twitter());
        w.shard_bits = 1;
        assert!(Layout::try_from(&w).is_err());
    }
}
