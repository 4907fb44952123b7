//! Combining: concurrent calls forwarded to one owner — single `Next`s
//! and the forwarded parts of batches, from any number of callers and
//! connections — go to it as one `NextBatch`
//! (`docs/architecture/forwarding.md`, Coalescing).
//!
//! One [`Coalescer`] per owner. A call (one uid, or a batch's part of
//! many) joins the owner's queue; if no batch is being sent, it starts a
//! drainer task. The drainer takes the queued calls, whole and in arrival
//! order, up to [`MAX_BATCH`] uids, sends their uids as one batch, hands
//! each caller its own slice of the answer (or the batch's error), and
//! repeats with whatever was queued meanwhile — so under load each batch
//! holds the calls that arrived while the previous one was in flight, and
//! an idle owner costs one call per call. At most one combined batch per
//! owner is in flight. The queue is bounded by the owner's in-flight
//! bound: every caller holds one of its places while it waits.
//!
//! Every number handed to a caller is the one the owner answered for its
//! position in the batch (`NextBatch` answers `seqs[i]` for `uids[i]`, and
//! a uid listed k times gets k increasing numbers): a caller's uids are
//! one contiguous run of the batch, in its own order, so it gets exactly
//! what the owner would have answered to its call alone (promise 1 of
//! `docs/architecture/promises.md`: the owner is the only source). A
//! caller that went away before the answer leaves its numbers unused: a
//! gap, never reused.
//!
//! **Errors stay each caller's own.** The owner's `NextBatch` fails on
//! the first uid it cannot serve, so a combined batch that fails might
//! fail for one caller's uid alone. When a batch of several calls fails
//! with an error about its uids (not the owner as a whole: unreachable,
//! past the deadline), each call still waiting is sent again on its own,
//! and answered with what its own call got. The numbers the failed batch
//! handed out are forgotten (a gap, promise 1).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::future::join_all;
use seqsvr_core::MAX_BATCH;
use tokio::sync::oneshot;

/// A batch call's answer: one number per uid, in order, or why not.
pub type BatchAnswer = Result<Vec<u64>, seqsvr_client::Error>;

/// The future of one batch sent to an owner.
pub type BatchFuture = Pin<Box<dyn Future<Output = BatchAnswer> + Send>>;

/// Sends one batch of uids to the owner (injected: the forwarding client
/// in the node, a recording fake in tests).
pub type SendBatch = Arc<dyn Fn(Vec<u64>) -> BatchFuture + Send + Sync>;

/// Sees every batch sent: its uids and the calls combined in it
/// (metrics).
pub type OnBatch = Arc<dyn Fn(usize, usize) + Send + Sync>;

/// One caller's call, queued.
struct Call {
    /// Its uids, in its order (one for a single `Next`).
    uids: Vec<u64>,
    /// Where its answer goes.
    tx: oneshot::Sender<BatchAnswer>,
}

/// One owner's queue of forwarded calls.
pub struct Coalescer {
    /// Calls not yet sent, and whether a drainer is running.
    queue: Mutex<Queue>,
    /// Sends a batch to this owner.
    send: SendBatch,
    /// Called with the size of every batch sent.
    on_batch: OnBatch,
}

#[derive(Default)]
struct Queue {
    /// Calls in arrival order.
    calls: VecDeque<Call>,
    /// Whether a drainer task is sending (it empties `calls` before it
    /// stops).
    draining: bool,
}

impl std::fmt::Debug for Coalescer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer").finish_non_exhaustive()
    }
}

impl Coalescer {
    /// A queue sending its batches with `send`; `on_batch` sees each
    /// batch's uids and calls.
    pub fn new(send: SendBatch, on_batch: OnBatch) -> Arc<Self> {
        Arc::new(Self {
            queue: Mutex::default(),
            send,
            on_batch,
        })
    }

    /// The owner's number for `uid`, sent in the next batch.
    pub async fn next(self: &Arc<Self>, uid: u64) -> Result<u64, seqsvr_client::Error> {
        let seqs = self.batch(vec![uid]).await?;
        Ok(seqs[0])
    }

    /// The owner's numbers for `uids` (1..=[`MAX_BATCH`] of them), in
    /// order, sent as one run of the next batch.
    pub async fn batch(self: &Arc<Self>, uids: Vec<u64>) -> BatchAnswer {
        if uids.is_empty() || uids.len() > MAX_BATCH {
            return Err(seqsvr_client::Error::InvalidArgument(format!(
                "a batch holds 1..={MAX_BATCH} uids, not {}",
                uids.len()
            )));
        }
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut q = self.lock();
            q.calls.push_back(Call { uids, tx });
            !std::mem::replace(&mut q.draining, true)
        };
        if start {
            tokio::spawn(self.clone().drain());
        }
        rx.await.unwrap_or_else(|_| {
            Err(seqsvr_client::Error::Internal(
                "the batch carrying this call was dropped".into(),
            ))
        })
    }

    /// Sends batches until the queue is empty.
    async fn drain(self: Arc<Self>) {
        loop {
            let calls = {
                let mut q = self.lock();
                let calls = take_whole(&mut q.calls);
                if calls.is_empty() {
                    q.draining = false;
                    return;
                }
                calls
            };
            let uids: Vec<u64> = calls.iter().flat_map(|c| c.uids.iter().copied()).collect();
            (self.on_batch)(uids.len(), calls.len());
            let answer = (self.send)(uids).await;
            self.deliver(calls, answer).await;
        }
    }

    /// Hands each call its run of the answer; after an error about the
    /// uids of a batch of several calls, sends each call still waiting on
    /// its own, so that its error is its own.
    async fn deliver(&self, calls: Vec<Call>, answer: BatchAnswer) {
        let total: usize = calls.iter().map(|c| c.uids.len()).sum();
        match answer {
            Ok(seqs) if seqs.len() == total => {
                let mut rest = seqs.as_slice();
                for c in calls {
                    let (mine, tail) = rest.split_at(c.uids.len());
                    rest = tail;
                    let _ = c.tx.send(Ok(mine.to_vec()));
                }
            }
            Ok(seqs) => {
                let e = short(seqs.len(), total);
                for c in calls {
                    let _ = c.tx.send(Err(e.clone()));
                }
            }
            Err(e) if calls.len() > 1 && !owner_wide(&e) => {
                let alone = calls.into_iter().filter(|c| !c.tx.is_closed()).map(|c| {
                    let (send, on_batch) = (self.send.clone(), self.on_batch.clone());
                    async move {
                        on_batch(c.uids.len(), 1);
                        let n = c.uids.len();
                        let a = send(c.uids).await;
                        let a = a.and_then(|s| {
                            if s.len() == n {
                                Ok(s)
                            } else {
                                Err(short(s.len(), n))
                            }
                        });
                        let _ = c.tx.send(a);
                    }
                });
                join_all(alone).await;
            }
            Err(e) => {
                for c in calls {
                    let _ = c.tx.send(Err(e.clone()));
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The queued calls that go in the next batch: whole, in arrival order,
/// at most [`MAX_BATCH`] uids in all (a call is never split between two
/// batches, so its numbers come from one answer).
fn take_whole(queue: &mut VecDeque<Call>) -> Vec<Call> {
    let mut n = 0;
    let mut uids = 0;
    for c in queue.iter() {
        if uids + c.uids.len() > MAX_BATCH {
            break;
        }
        uids += c.uids.len();
        n += 1;
    }
    queue.drain(..n).collect()
}

/// Whether a batch's error is about the owner as a whole (every call in
/// it would meet the same), not about one of its uids.
fn owner_wide(e: &seqsvr_client::Error) -> bool {
    matches!(
        e,
        seqsvr_client::Error::Transport(_) | seqsvr_client::Error::DeadlineExceeded { .. }
    )
}

/// The error of an answer that does not hold one number per uid.
fn short(got: usize, want: usize) -> seqsvr_client::Error {
    seqsvr_client::Error::Internal(format!("the owner answered {got} numbers for {want} uids"))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;

    type Seen = Arc<Mutex<Vec<Vec<u64>>>>;

    /// A fake owner: records every batch, answers each uid with the next
    /// number of a shared counter after `delay` (uid × 1000 + counter, so
    /// a number names the uid it was answered for).
    fn owner(delay: Duration) -> (SendBatch, Seen) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let counter = Arc::new(AtomicU64::new(0));
        let s = seen.clone();
        let send: SendBatch = Arc::new(move |uids: Vec<u64>| {
            s.lock().unwrap().push(uids.clone());
            let c = counter.clone();
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                Ok(uids
                    .iter()
                    .map(|u| u * 1000 + c.fetch_add(1, Ordering::SeqCst))
                    .collect())
            })
        });
        (send, seen)
    }

    fn quiet() -> OnBatch {
        Arc::new(|_, _| {})
    }

    #[tokio::test]
    async fn a_lone_call_is_a_batch_of_one() {
        let (send, seen) = owner(Duration::ZERO);
        let c = Coalescer::new(send, quiet());
        assert_eq!(c.next(7).await.unwrap(), 7000);
        assert_eq!(c.next(7).await.unwrap(), 7001);
        assert_eq!(*seen.lock().unwrap(), vec![vec![7], vec![7]]);
    }

    /// While one batch is in flight, every call that arrives goes into the
    /// next; each caller gets the number answered for its own position.
    #[tokio::test(start_paused = true)]
    async fn calls_arriving_during_a_batch_share_the_next_one() {
        let (send, seen) = owner(Duration::from_millis(10));
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let s = sizes.clone();
        let c = Coalescer::new(send, Arc::new(move |n, k| s.lock().unwrap().push((n, k))));
        let first = tokio::spawn({
            let c = c.clone();
            async move { c.next(1).await }
        });
        tokio::task::yield_now().await;
        let later: Vec<_> = (2..=6)
            .map(|u| {
                let c = c.clone();
                tokio::spawn(async move { (u, c.next(u).await) })
            })
            .collect();
        assert_eq!(first.await.unwrap().unwrap(), 1000);
        for h in later {
            let (u, got) = h.await.unwrap();
            let seq = got.unwrap();
            // The owner's number for this uid, not a neighbour's.
            assert_eq!(seq / 1000, u, "uid {u} got {seq}");
        }
        assert_eq!(*seen.lock().unwrap(), vec![vec![1], vec![2, 3, 4, 5, 6]]);
        assert_eq!(*sizes.lock().unwrap(), vec![(1, 1), (5, 5)]);
    }

    /// Forwarded batches of many callers (connections' pipelines) that
    /// arrive while a batch is in flight go to the owner as one batch;
    /// each caller gets the owner's numbers for its own uids, in its own
    /// order, duplicates included.
    #[tokio::test(start_paused = true)]
    async fn batches_of_many_callers_go_as_one_and_each_gets_its_own_run() {
        let (send, seen) = owner(Duration::from_millis(10));
        let c = Coalescer::new(send, quiet());
        let first = tokio::spawn({
            let c = c.clone();
            async move { c.batch(vec![1, 2]).await }
        });
        tokio::task::yield_now().await;
        let parts: Vec<Vec<u64>> = vec![vec![3, 4, 3], vec![5], vec![6, 7, 8, 9]];
        let later: Vec<_> = parts
            .iter()
            .cloned()
            .map(|p| {
                let c = c.clone();
                tokio::spawn(async move { (p.clone(), c.batch(p).await) })
            })
            .collect();
        assert_eq!(first.await.unwrap().unwrap(), vec![1000, 2001]);
        for h in later {
            let (uids, got) = h.await.unwrap();
            let seqs = got.unwrap();
            let owners: Vec<u64> = seqs.iter().map(|s| s / 1000).collect();
            assert_eq!(owners, uids, "{uids:?} got {seqs:?}");
            // A uid's copies get increasing numbers, in the caller's order.
            for (i, j) in (0..seqs.len()).flat_map(|i| (i + 1..seqs.len()).map(move |j| (i, j))) {
                if uids[i] == uids[j] {
                    assert!(seqs[i] < seqs[j], "{uids:?} got {seqs:?}");
                }
            }
        }
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[1], vec![3, 4, 3, 5, 6, 7, 8, 9]);
    }

    /// A combined batch holds at most `MAX_BATCH` uids and never splits a
    /// call between two batches.
    #[tokio::test(start_paused = true)]
    async fn a_batch_never_exceeds_max_batch_nor_splits_a_call() {
        let (send, seen) = owner(Duration::from_millis(1));
        let c = Coalescer::new(send, quiet());
        let part = MAX_BATCH / 3 + 1;
        let calls: Vec<_> = (0..7u64)
            .map(|k| {
                let c = c.clone();
                let uids = vec![k; if k % 2 == 0 { part } else { 1 }];
                tokio::spawn(async move { c.batch(uids).await })
            })
            .chain((100..(100 + MAX_BATCH as u64 * 2)).map(|u| {
                let c = c.clone();
                tokio::spawn(async move { c.next(u).await.map(|s| vec![s]) })
            }))
            .collect();
        for h in calls {
            h.await.unwrap().unwrap();
        }
        let seen = seen.lock().unwrap().clone();
        assert!(seen.iter().all(|b| b.len() <= MAX_BATCH));
        for k in (0..7u64).step_by(2) {
            let holding: Vec<_> = seen.iter().filter(|b| b.contains(&k)).collect();
            assert_eq!(holding.len(), 1, "call {k} split over batches");
            assert_eq!(holding[0].iter().filter(|&&u| u == k).count(), part);
        }
        assert!(seen.iter().any(|b| b.len() > part), "nothing combined");
        assert!(c.batch(vec![]).await.is_err());
        assert!(c.batch(vec![1; MAX_BATCH + 1]).await.is_err());
    }

    /// A combined batch that fails for one caller's uid is sent again call
    /// by call: that caller gets its own error, the others their numbers.
    /// An error about the owner as a whole reaches every caller at once.
    #[tokio::test(start_paused = true)]
    async fn an_error_about_one_uid_is_only_its_callers() {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let s = sent.clone();
        let send: SendBatch = Arc::new(move |uids: Vec<u64>| {
            s.lock().unwrap().push(uids.clone());
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if uids.contains(&13) {
                    Err(seqsvr_client::Error::NoRoute { uid: 13 })
                } else if uids.contains(&66) {
                    Err(seqsvr_client::Error::Transport("down".into()))
                } else {
                    Ok(uids.iter().map(|u| u * 10).collect())
                }
            })
        });
        let c = Coalescer::new(send, quiet());
        let run = |parts: Vec<Vec<u64>>| {
            let c = c.clone();
            async move {
                let blocker = tokio::spawn({
                    let c = c.clone();
                    async move { c.next(1).await }
                });
                tokio::task::yield_now().await;
                let hs: Vec<_> = parts
                    .into_iter()
                    .map(|p| {
                        let c = c.clone();
                        tokio::spawn(async move { c.batch(p).await })
                    })
                    .collect();
                blocker.await.unwrap().unwrap();
                let mut out = Vec::new();
                for h in hs {
                    out.push(h.await.unwrap());
                }
                out
            }
        };
        let got = run(vec![vec![2, 3], vec![13, 4], vec![5]]).await;
        assert_eq!(got[0], Ok(vec![20, 30]));
        assert_eq!(got[1], Err(seqsvr_client::Error::NoRoute { uid: 13 }));
        assert_eq!(got[2], Ok(vec![50]));
        sent.lock().unwrap().clear();
        let got = run(vec![vec![2], vec![66]]).await;
        assert!(got
            .iter()
            .all(|r| matches!(r, Err(seqsvr_client::Error::Transport(_)))));
        assert_eq!(
            sent.lock().unwrap().len(),
            2,
            "an owner-wide error is not re-sent"
        );
    }

    #[tokio::test]
    async fn a_short_answer_is_refused() {
        let send: SendBatch =
            Arc::new(|uids: Vec<u64>| Box::pin(async move { Ok(vec![1; uids.len() - 1]) }));
        let c = Coalescer::new(send, quiet());
        assert!(matches!(
            c.next(1).await,
            Err(seqsvr_client::Error::Internal(_))
        ));
    }
}
