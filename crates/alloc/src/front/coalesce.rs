//! Coalescing: concurrent single `Next` calls forwarded to one owner go
//! to it as one `NextBatch`.
//!
//! One [`Coalescer`] per owner. A call joins the owner's queue; if no
//! batch is being sent, it starts a drainer task. The drainer takes up to
//! [`MAX_BATCH`] queued calls, sends their uids as one batch, hands each
//! caller its number (or the batch's error), and repeats with whatever was
//! queued meanwhile — so under load each batch holds the calls that
//! arrived while the previous one was in flight, and an idle owner costs
//! one call per call. At most one batch per owner is in flight.
//!
//! Every number handed to a caller is the one the owner answered for its
//! position in the batch (`NextBatch` answers `seqs[i]` for `uids[i]`, and
//! a uid listed k times gets k increasing numbers). A caller that went
//! away before the answer leaves its number unused: a gap, never reused.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use seqsvr_core::MAX_BATCH;
use tokio::sync::oneshot;

/// A batch call's answer: one number per uid, in order, or why not.
pub type BatchAnswer = Result<Vec<u64>, seqsvr_client::Error>;

/// The future of one batch sent to an owner.
pub type BatchFuture = Pin<Box<dyn Future<Output = BatchAnswer> + Send>>;

/// Sends one batch of uids to the owner (injected: the forwarding client
/// in the node, a recording fake in tests).
pub type SendBatch = Arc<dyn Fn(Vec<u64>) -> BatchFuture + Send + Sync>;

/// What a queued call waits on.
type Waiter = oneshot::Sender<Result<u64, seqsvr_client::Error>>;

/// One owner's queue of single `Next` calls.
pub struct Coalescer {
    /// Calls not yet sent, and whether a drainer is running.
    queue: Mutex<Queue>,
    /// Sends a batch to this owner.
    send: SendBatch,
    /// Called with the size of every batch sent.
    on_batch: Arc<dyn Fn(usize) + Send + Sync>,
}

#[derive(Default)]
struct Queue {
    /// (uid, where its answer goes), in arrival order.
    calls: Vec<(u64, Waiter)>,
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
    /// batch's size (metrics).
    pub fn new(send: SendBatch, on_batch: Arc<dyn Fn(usize) + Send + Sync>) -> Arc<Self> {
        Arc::new(Self {
            queue: Mutex::default(),
            send,
            on_batch,
        })
    }

    /// The owner's number for `uid`, sent in the next batch.
    pub async fn next(self: &Arc<Self>, uid: u64) -> Result<u64, seqsvr_client::Error> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut q = self.lock();
            q.calls.push((uid, tx));
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
            let batch: Vec<(u64, Waiter)> = {
                let mut q = self.lock();
                if q.calls.is_empty() {
                    q.draining = false;
                    return;
                }
                let n = q.calls.len().min(MAX_BATCH);
                q.calls.drain(..n).collect()
            };
            (self.on_batch)(batch.len());
            let uids: Vec<u64> = batch.iter().map(|(u, _)| *u).collect();
            let answer = (self.send)(uids).await;
            deliver(batch, answer);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Hands each queued call its number, or every call the batch's error.
fn deliver(batch: Vec<(u64, Waiter)>, answer: BatchAnswer) {
    match answer {
        Ok(seqs) if seqs.len() == batch.len() => {
            for ((_, tx), seq) in batch.into_iter().zip(seqs) {
                let _ = tx.send(Ok(seq));
            }
        }
        Ok(seqs) => {
            let e = seqsvr_client::Error::Internal(format!(
                "the owner answered {} numbers for {} uids",
                seqs.len(),
                batch.len()
            ));
            for (_, tx) in batch {
                let _ = tx.send(Err(e.clone()));
            }
        }
        Err(e) => {
            for (_, tx) in batch {
                let _ = tx.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;

    /// A fake owner: records every batch, answers each uid with the next
    /// number of a per-uid counter after `delay`.
    fn owner(delay: Duration) -> (SendBatch, Arc<Mutex<Vec<Vec<u64>>>>) {
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

    #[tokio::test]
    async fn a_lone_call_is_a_batch_of_one() {
        let (send, seen) = owner(Duration::ZERO);
        let c = Coalescer::new(send, Arc::new(|_| {}));
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
        let c = Coalescer::new(send, Arc::new(move |n| s.lock().unwrap().push(n)));
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
        assert_eq!(*sizes.lock().unwrap(), vec![1, 5]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_never_exceeds_max_batch() {
        let (send, seen) = owner(Duration::from_millis(1));
        let c = Coalescer::new(send, Arc::new(|_| {}));
        let calls: Vec<_> = (0..(MAX_BATCH as u64 * 2 + 3))
            .map(|u| {
                let c = c.clone();
                tokio::spawn(async move { c.next(u).await })
            })
            .collect();
        for h in calls {
            h.await.unwrap().unwrap();
        }
        let seen = seen.lock().unwrap();
        assert!(
            seen.iter().all(|b| b.len() <= MAX_BATCH),
            "{:?}",
            seen.len()
        );
        assert_eq!(seen.iter().map(Vec::len).sum::<usize>(), MAX_BATCH * 2 + 3);
    }

    #[tokio::test]
    async fn an_error_reaches_every_caller_of_the_batch_and_a_short_answer_is_refused() {
        let send: SendBatch = Arc::new(|uids: Vec<u64>| {
            Box::pin(async move {
                if uids.contains(&13) {
                    Err(seqsvr_client::Error::NoRoute { uid: 13 })
                } else {
                    Ok(vec![1; uids.len() - 1])
                }
            })
        });
        let c = Coalescer::new(send, Arc::new(|_| {}));
        assert_eq!(
            c.next(13).await,
            Err(seqsvr_client::Error::NoRoute { uid: 13 })
        );
        assert!(matches!(
            c.next(1).await,
            Err(seqsvr_client::Error::Internal(_))
        ));
    }
}
