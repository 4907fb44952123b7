//! `next_batch`: one call for many uids, split by owner and sent in
//! parallel.
//!
//! A batch runs in *rounds*. Each round groups the uids still pending by
//! their owner — the set serving each uid and the AllocSvr owning its
//! section there (see [`crate::routes`]), keeping request order within
//! each group —, sends the groups in parallel, and keeps what came back.
//! Sets the routes name but the cache lacks are fetched (from their
//! stores, in parallel) before the groups are made. What failed goes into
//! the next round, after the usual retry decision (see [`crate::retry`]).
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
use seqsvr_core::{SetId, MAX_BATCH};
use seqsvr_proto::{self as pb};

use crate::client::{missing, read, SeqClient};
use crate::error::{Error, Result};
use crate::retry::{Attempt, Failure, Retry};
use crate::routes::{Hold, Located, RouteCache, Target};

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
    /// One part per (set, AllocSvr).
    pub parts: Vec<Part>,
    /// Positions that cannot be sent now (no owner, not served, the
    /// set's table missing), ascending.
    pub held: Vec<usize>,
    /// Why the first of them cannot, per kind of hold (the worst steers).
    pub failure: Option<Failure>,
    /// Sets whose table is missing, without repeats.
    pub missing: Vec<SetId>,
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

/// Groups the `pending` positions of `uids` by (set, owner). A uid no set
/// serves fails the whole batch at once, before anything is sent.
pub(crate) fn split(routes: &RouteCache, uids: &[u64], pending: &[usize]) -> Attempt<Split> {
    let mut split = Split::default();
    let mut by_owner: HashMap<(SetId, &str), usize> = HashMap::new();
    // The part the previous uid went to: a batch's uids mostly share an
    // owner, and comparing with it is cheaper than hashing the key.
    let mut last: Option<((SetId, &str), usize)> = None;
    for &i in pending {
        let uid = uids[i];
        let (t, e) = match routes.locate(uid) {
            Located::Owner(t, e) => (t, e),
            Located::Held(hold) => {
                split.held.push(i);
                match hold {
                    Hold::Missing(set) if !split.missing.contains(&set) => split.missing.push(set),
                    Hold::Missing(_) => {}
                    // The first steers (all rank alike); the others' sets
                    // are refreshed in later rounds if still needed.
                    _ if split.failure.is_none() => {
                        split.failure = Some(Failure::Held { uid, hold });
                    }
                    _ => {}
                }
                continue;
            }
            Located::NoSet => return Err(Failure::NoSet { uid }),
        };
        let key = (t.set.set_id, e.addr.as_str());
        let n = match last {
            Some((k, n)) if k == key => n,
            _ => {
                let n = *by_owner.entry(key).or_insert_with(|| {
                    split.parts.push(Part {
                        target: Target::new(t, e),
                        idx: Vec::new(),
                    });
                    split.parts.len() - 1
                });
                last = Some((key, n));
                n
            }
        };
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
        let split = match self.split_fetching(uids, pending, retry).await {
            Ok(s) => s,
            Err(f) => return Some(f),
        };
        let sends = split
            .parts
            .into_iter()
            .map(|p| self.send_part(p, uids, retry));
        let outcomes = join_all(sends).await;
        let mut failure = split.failure;
        let mut left = split.held;
        for o in outcomes {
            for (i, seq) in o.done {
                out[i] = seq;
            }
            left.extend(o.left);
            if let Some(f) = o.failure {
                failure = Failure::fold(failure, f);
            }
        }
        // Back to request order. Each part's leftovers already are, and a
        // uid's copies are all in one part, so this is not needed for
        // duplicates' order — but it keeps every round grouping alike.
        left.sort_unstable();
        *pending = left;
        failure
    }

    /// Splits the pending positions, first fetching (in parallel, from
    /// their stores) the tables of sets the routes name but the cache
    /// lacks — each at most once a round.
    async fn split_fetching(
        &self,
        uids: &[u64],
        pending: &[usize],
        retry: &Retry,
    ) -> Attempt<Split> {
        let mut fetched: Vec<SetId> = Vec::new();
        loop {
            let mut s = split(&read(&self.inner.routes), uids, pending)?;
            let new: Vec<SetId> = s
                .missing
                .iter()
                .copied()
                .filter(|set| !fetched.contains(set))
                .collect();
            if new.is_empty() {
                // Still missing after a fetch: refresh from every source.
                if let Some(&set) = s.missing.first() {
                    s.failure = Failure::fold(s.failure, missing(set));
                }
                return Ok(s);
            }
            let timeout = retry.attempt_timeout();
            let fetches = new.iter().map(|&set| self.fetch_set(set, timeout));
            for r in join_all(fetches).await {
                if let Err(message) = r {
                    tracing::debug!(error = %message, "set fetch for a batch failed");
                }
            }
            fetched.extend(new);
        }
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
            .map_err(|message| Failure::Transport {
                message,
                set: Some(target.set_id),
            })?;
        let timeout = retry.attempt_timeout();
        let req = pb::NextBatchRequest {
            uids: batch.clone(),
        };
        let reply =
            tokio::time::timeout(timeout, c.next_batch(self.data_request(req, timeout))).await;
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
    use seqsvr_core::directory::{DirRange, DirSet};
    use seqsvr_core::rng::Rng;
    use seqsvr_core::{Directory, Place, Placement, RouteEntry, RouteTable, SetSpec};

    use super::*;

    fn entry(first: u32, count: u32, addr: &str) -> RouteEntry {
        RouteEntry {
            first,
            count,
            alloc: addr.into(),
            addr: addr.into(),
        }
    }

    fn set(id: u32, uids: std::ops::Range<u64>) -> SetSpec {
        SetSpec {
            section_size: 10,
            ..SetSpec::new(id, uids)
        }
    }

    fn table(
        version: u64,
        spec: SetSpec,
        entries: Vec<RouteEntry>,
        placement: Placement,
    ) -> RouteTable {
        RouteTable {
            version,
            set: spec,
            entries,
            placement,
            directory: None,
        }
    }

    fn cache() -> RouteCache {
        let mut c = RouteCache::default();
        c.install(table(
            3,
            set(1, 0..100),
            vec![entry(0, 5, "a"), entry(5, 4, "b")],
            Placement::default(),
        ));
        c.install(table(
            9,
            set(2, 100..200),
            vec![entry(0, 10, "c")],
            Placement::default(),
        ));
        c
    }

    fn parts(s: &Split) -> Vec<(u32, &str, u64, Vec<usize>)> {
        s.parts
            .iter()
            .map(|p| {
                let t = &p.target;
                (t.set_id, t.addr.as_str(), t.version, p.idx.clone())
            })
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
                (1, "b", 3, vec![0, 3]),
                (1, "a", 3, vec![1, 5, 6]),
                (2, "c", 9, vec![2])
            ]
        );
        assert_eq!(s.held, vec![4]);
        assert_eq!(
            s.failure,
            Some(Failure::Held {
                uid: 95,
                hold: Hold::Unowned(1)
            })
        );
        let s = split(&cache(), &uids, &[3, 6]).unwrap();
        assert_eq!(parts(&s), vec![(1, "b", 3, vec![3]), (1, "a", 3, vec![6])]);
    }

    /// `split`'s parts against a grouping that scans the parts for each
    /// uid, over many pseudo-random batches (runs of one owner, owners
    /// interleaved, one address in two sets, held uids).
    #[test]
    fn grouping_matches_a_plain_scan() {
        let naive = |c: &RouteCache, uids: &[u64], pending: &[usize]| {
            let mut parts: Vec<(u32, String, Vec<usize>)> = Vec::new();
            for &i in pending {
                if let Located::Owner(t, e) = c.locate(uids[i]) {
                    let key = (t.set.set_id, e.addr.clone());
                    match parts.iter_mut().find(|p| (p.0, &p.1) == (key.0, &key.1)) {
                        Some(p) => p.2.push(i),
                        None => parts.push((key.0, key.1, vec![i])),
                    }
                }
            }
            parts
        };
        let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
        let mut next = move || rng.next_u64();
        for (c, span) in [(cache(), 0..200u64), (two_sets(true), 0..100)] {
            for _ in 0..500 {
                let len = (next() % 40) as usize;
                let mut uids = Vec::with_capacity(len);
                while uids.len() < len {
                    let uid = span.start + next() % (span.end - span.start);
                    // Runs of one uid's neighbours, as real batches have.
                    for d in 0..(next() % 4) {
                        uids.push((uid + d).min(span.end - 1));
                    }
                }
                let all: Vec<usize> = (0..uids.len()).collect();
                let got = split(&c, &uids, &all).unwrap();
                let got: Vec<(u32, String, Vec<usize>)> = got
                    .parts
                    .iter()
                    .map(|p| (p.target.set_id, p.target.addr.clone(), p.idx.clone()))
                    .collect();
                assert_eq!(got, naive(&c, &uids, &all), "uids {uids:?}");
            }
        }
    }

    #[test]
    fn unknown_uid_fails_the_whole_batch() {
        let uids = [1, 200, 300];
        let r = split(&cache(), &uids, &[0, 1, 2]);
        assert_eq!(r, Err(Failure::NoSet { uid: 200 }));
    }

    /// Sets 0 and 1 over one span (0..100); the directory gives 0..50 to
    /// set 0 and 50..100 to set 1, set 0 has frozen 40..50 for set 1, and
    /// one address serves in both sets.
    fn two_sets(with_set_1: bool) -> RouteCache {
        let dir_set = |id| DirSet {
            spec: set(id, 0..100),
            stores: vec![format!("store-{id}")],
            admin: vec![format!("admin-{id}")],
        };
        let directory = Directory {
            version: 2,
            move_id: 0,
            sets: [(0, dir_set(0)), (1, dir_set(1))].into(),
            ranges: vec![
                DirRange {
                    begin: 0,
                    end: 50,
                    set: 0,
                },
                DirRange {
                    begin: 50,
                    end: 100,
                    set: 1,
                },
            ],
            moving: None,
        };
        let mut home = Placement::default();
        assert!(home.set(4..5, Place::Moved { to: 1 }));
        assert!(home.set(5..10, Place::Moved { to: 1 }));
        let mut c = RouteCache::default();
        c.install(RouteTable {
            directory: Some(directory),
            ..table(4, set(0, 0..100), vec![entry(0, 4, "x")], home)
        });
        if with_set_1 {
            let mut dest = Placement::default();
            assert!(dest.set(0..4, Place::Absent));
            c.install(table(
                6,
                set(1, 0..100),
                vec![entry(4, 3, "x"), entry(7, 3, "y")],
                dest,
            ));
        }
        c
    }

    #[test]
    fn groups_by_set_and_owner_under_the_directory() {
        // 5 and 45: set 0's x, and set 1's x by the move; 60: set 1's x;
        // 95: set 1's y.
        let uids = [5, 45, 60, 95, 6];
        let all: Vec<usize> = (0..uids.len()).collect();
        let s = split(&two_sets(true), &uids, &all).unwrap();
        assert_eq!(
            parts(&s),
            vec![
                (0, "x", 4, vec![0, 4]),
                (1, "x", 6, vec![1, 2]),
                (1, "y", 6, vec![3])
            ]
        );
        assert!(s.held.is_empty() && s.missing.is_empty() && s.failure.is_none());
    }

    #[test]
    fn sets_not_cached_are_listed_once_and_held() {
        let uids = [5, 45, 60, 95];
        let s = split(&two_sets(false), &uids, &[0, 1, 2, 3]).unwrap();
        assert_eq!(parts(&s), vec![(0, "x", 4, vec![0])]);
        assert_eq!(s.held, vec![1, 2, 3]);
        assert_eq!(s.missing, vec![1]);
        assert_eq!(s.failure, None);
        // Past the directory's ranges: no set serves it.
        let r = split(&two_sets(false), &[5, 100], &[0, 1]);
        assert_eq!(r, Err(Failure::NoSet { uid: 100 }));
    }
}
