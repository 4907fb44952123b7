//! `next_batch`: one call for many uids, split by owner and sent in
//! parallel.
//!
//! A batch runs in *rounds*. Each round groups the uids still pending by
//! their cached owner (keeping request order within each group), sends the
//! groups in parallel, and keeps what came back. What failed goes into the
//! next round, after the usual retry decision (see [`crate::retry`]).
//!
//! Duplicates: a uid listed k times must get k increasing numbers in
//! request order. All occurrences of a uid share a section, hence an owner
//! and a group; within a group they keep their order. A group larger than
//! [`MAX_BATCH`] is cut into chunks sent one after another, and a failed
//! chunk stops the group: so the occurrences that got numbers are always a
//! prefix, and the rest are sent in a later round, after the earlier ones
//! returned — so they get larger numbers (promise 1).

use std::collections::HashMap;

use futures::future::join_all;
use seqsvr_core::MAX_BATCH;
use seqsvr_proto::{self as pb};

use crate::client::{read, request, SeqClient};
use crate::error::{Error, Result};
use crate::retry::{Attempt, Failure, Retry};
use crate::routes::{Located, RouteCache, Target};

/// The uids of a batch bound for one AllocSvr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part {
    /// Where they go.
    pub target: Target,
    /// Their positions in the caller's batch, ascending.
    pub idx: Vec<usize>,
}

/// A batch's pending positions grouped by owner.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Split {
    /// One part per owner.
    pub parts: Vec<Part>,
    /// Positions whose section has no owner in the cached routes.
    pub unowned: Vec<usize>,
}

/// What one part's sends achieved.
#[derive(Debug, Default)]
struct PartOutcome {
    /// (position, seq) for every uid that got a number.
    done: Vec<(usize, u64)>,
    /// Positions still without one (a suffix of the part).
    left: Vec<usize>,
    /// Why the part stopped early.
    failure: Option<Failure>,
}

/// Groups the `pending` positions of `uids` by owner. A uid in no known
/// set fails the whole batch at once, before anything is sent.
pub(crate) fn split(routes: &RouteCache, uids: &[u64], pending: &[usize]) -> Attempt<Split> {
    let mut split = Split::default();
    let mut by_addr: HashMap<&str, usize> = HashMap::new();
    for &i in pending {
        let (t, e) = match routes.locate(uids[i]) {
            Located::Owner(t, e) => (t, e),
            Located::Unowned => {
                split.unowned.push(i);
                continue;
            }
            Located::NoSet => return Err(Failure::NoSet { uid: uids[i] }),
        };
        let n = *by_addr.entry(e.addr.as_str()).or_insert_with(|| {
            split.parts.push(Part {
                target: Target {
                    set_id: t.set.set_id,
                    version: t.version,
                    addr: e.addr.clone(),
                },
                idx: Vec::new(),
            });
            split.parts.len() - 1
        });
        split.parts[n].idx.push(i);
    }
    Ok(split)
}

impl SeqClient {
    /// Hands out the next sequence number of every uid in `uids`;
    /// `result[i]` is for `uids[i]`, and a uid listed k times gets k
    /// increasing numbers in list order. Uids are grouped by owning
    /// AllocSvr and the groups sent in parallel, in requests of at most
    /// [`MAX_BATCH`] uids. An empty list returns an empty result without a
    /// call. If any uid is in no known set, nothing is sent and the call
    /// fails with [`Error::OutOfRange`]. On failure, numbers already handed
    /// out to part of the batch are lost (a gap, never a repeat).
    pub async fn next_batch(&self, uids: &[u64]) -> Result<Vec<u64>> {
        let mut out = vec![0; uids.len()];
        let mut pending: Vec<usize> = (0..uids.len()).collect();
        let mut retry = Retry::new(&self.inner.options);
        while !pending.is_empty() {
            if let Some(f) = self.batch_round(uids, &mut pending, &mut out, &retry).await {
                self.recover(&mut retry, f).await?;
            }
        }
        Ok(out)
    }

    /// One round: sends every pending uid to its cached owner, fills `out`,
    /// leaves the failed positions in `pending` (in request order), and
    /// returns the failure that should steer the retry.
    async fn batch_round(
        &self,
        uids: &[u64],
        pending: &mut Vec<usize>,
        out: &mut [u64],
        retry: &Retry,
    ) -> Option<Failure> {
        let split = match split(&read(&self.inner.routes), uids, pending) {
            Ok(s) => s,
            Err(f) => return Some(f),
        };
        let sends = split
            .parts
            .into_iter()
            .map(|p| self.send_part(p, uids, retry));
        let outcomes = join_all(sends).await;
        let mut failure = split
            .unowned
            .first()
            .map(|&i| Failure::NoRoute { uid: uids[i] });
        let mut left = split.unowned;
        for o in outcomes {
            for (i, seq) in o.done {
                out[i] = seq;
            }
            left.extend(o.left);
            failure = match (failure, o.failure) {
                (Some(a), Some(b)) => Some(Failure::worst(a, b)),
                (a, b) => a.or(b),
            };
        }
        // Back to request order. Each part's leftovers already are, and a
        // uid's copies are all in one part, so this is not needed for
        // duplicates' order — but it keeps every round grouping alike.
        left.sort_unstable();
        *pending = left;
        failure
    }

    /// Sends one owner's part, chunk by chunk, stopping at the first
    /// failure (see the module docs for why chunks are not parallel).
    async fn send_part(&self, part: Part, uids: &[u64], retry: &Retry) -> PartOutcome {
        let mut done = Vec::with_capacity(part.idx.len());
        for (n, chunk) in part.idx.chunks(MAX_BATCH).enumerate() {
            match self.send_chunk(&part.target, chunk, uids, retry).await {
                Ok(seqs) => done.extend(chunk.iter().copied().zip(seqs)),
                Err(f) => {
                    return PartOutcome {
                        done,
                        left: part.idx[n * MAX_BATCH..].to_vec(),
                        failure: Some(f),
                    }
                }
            }
        }
        PartOutcome {
            done,
            ..Default::default()
        }
    }

    /// One `NextBatch` RPC for the uids at positions `chunk`.
    async fn send_chunk(
        &self,
        target: &Target,
        chunk: &[usize],
        uids: &[u64],
        retry: &Retry,
    ) -> Attempt<Vec<u64>> {
        let batch: Vec<u64> = chunk.iter().map(|&i| uids[i]).collect();
        let mut c = self
            .alloc(&target.addr)
            .map_err(|message| Failure::Transport { message })?;
        let timeout = retry.attempt_timeout();
        let req = pb::NextBatchRequest {
            uids: batch.clone(),
        };
        let reply = tokio::time::timeout(timeout, c.next_batch(request(req, timeout))).await;
        let reply = self.outcome(reply, target, &batch, timeout)?.into_inner();
        if reply.seqs.len() != batch.len() {
            return Err(Failure::Fatal(Error::Internal(format!(
                "{} answered {} seqs for {} uids",
                target.addr,
                reply.seqs.len(),
                batch.len()
            ))));
        }
        self.note_version(
            target.set_id,
            target.version,
            reply.route_version,
            &target.addr,
        );
        Ok(reply.seqs)
    }
}

#[cfg(test)]
mod tests {
    use seqsvr_core::{RouteEntry, RouteTable, SetSpec};

    use super::*;

    fn cache() -> RouteCache {
        let entry = |first, count, addr: &str| RouteEntry {
            first,
            count,
            alloc: addr.into(),
            addr: addr.into(),
        };
        let set = |id, uids| SetSpec {
            section_size: 10,
            ..SetSpec::new(id, uids)
        };
        let mut c = RouteCache::default();
        c.install(RouteTable {
            version: 3,
            set: set(1, 0..100),
            entries: vec![entry(0, 5, "a"), entry(5, 4, "b")],
            placement: Default::default(),
            directory: None,
        });
        c.install(RouteTable {
            version: 9,
            set: set(2, 100..200),
            entries: vec![entry(0, 10, "c")],
            placement: Default::default(),
            directory: None,
        });
        c
    }

    fn parts(s: &Split) -> Vec<(&str, u64, Vec<usize>)> {
        s.parts
            .iter()
            .map(|p| (p.target.addr.as_str(), p.target.version, p.idx.clone()))
            .collect()
    }

    #[test]
    fn groups_by_owner_in_request_order() {
        let uids = [60, 1, 150, 60, 95, 2, 1];
        let all: Vec<usize> = (0..uids.len()).collect();
        let s = split(&cache(), &uids, &all).unwrap();
        assert_eq!(
            parts(&s),
            vec![
                ("b", 3, vec![0, 3]),
                ("a", 3, vec![1, 5, 6]),
                ("c", 9, vec![2])
            ]
        );
        assert_eq!(s.unowned, vec![4]);
        let s = split(&cache(), &uids, &[3, 6]).unwrap();
        assert_eq!(parts(&s), vec![("b", 3, vec![3]), ("a", 3, vec![6])]);
    }

    #[test]
    fn unknown_uid_fails_the_whole_batch() {
        let uids = [1, 200, 300];
        let r = split(&cache(), &uids, &[0, 1, 2]);
        assert_eq!(r, Err(Failure::NoSet { uid: 200 }));
    }
}
