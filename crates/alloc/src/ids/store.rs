//! What an AllocSvr's id workers need from the store (docs/ids.md): claim,
//! raise and release a worker id, and read a namespace's layout. Behind a
//! trait so the holder is testable without Raft: [`StoreWorkers`] is the
//! store's peer plane, [`MemWorkers`] the store's own state machine in
//! memory (tests).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use seqsvr_core::ids::Layout;
use seqsvr_core::{AllocId, Epoch, Incarnation};
use seqsvr_store_api::ids::Claimed;
use seqsvr_store_api::{Error, PeerClient, Rejection};

/// A boxed future of a store answer.
pub type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// The store's id calls, as one AllocSvr incarnation makes them. Every
/// write is durable when it answers `Ok` and fenced on the incarnation.
pub trait WorkerStore: Send + Sync + 'static {
    /// Claims a worker id of `ns` (or returns the one held) with the
    /// clock at `now_ms` (Unix ms).
    fn claim<'a>(&'a self, ns: &'a str, now_ms: u64) -> Answer<'a, Claimed>;
    /// Raises `worker`'s ceiling to `to` ticks under `epoch`.
    fn raise<'a>(&'a self, ns: &'a str, worker: u64, epoch: Epoch, to: u64) -> Answer<'a, u64>;
    /// Releases `worker`, held at `epoch`.
    fn release<'a>(&'a self, ns: &'a str, worker: u64, epoch: Epoch) -> Answer<'a, ()>;
    /// The layout of `ns` (an unknown namespace is refused `Ids`).
    fn layout<'a>(&'a self, ns: &'a str) -> Answer<'a, Layout>;
}

/// The store's peer plane, for one incarnation.
#[derive(Clone, Debug)]
pub struct StoreWorkers {
    /// The peer plane.
    pub store: PeerClient,
    /// Our id.
    pub alloc: AllocId,
    /// Our incarnation.
    pub incarnation: Incarnation,
}

impl WorkerStore for StoreWorkers {
    fn claim<'a>(&'a self, ns: &'a str, now_ms: u64) -> Answer<'a, Claimed> {
        Box::pin(
            self.store
                .claim_worker(&self.alloc, self.incarnation, ns, now_ms),
        )
    }

    fn raise<'a>(&'a self, ns: &'a str, worker: u64, epoch: Epoch, to: u64) -> Answer<'a, u64> {
        Box::pin(
            self.store
                .raise_worker(&self.alloc, self.incarnation, ns, worker, epoch, to),
        )
    }

    fn release<'a>(&'a self, ns: &'a str, worker: u64, epoch: Epoch) -> Answer<'a, ()> {
        Box::pin(
            self.store
                .release_worker(&self.alloc, self.incarnation, ns, worker, epoch),
        )
    }

    fn layout<'a>(&'a self, ns: &'a str) -> Answer<'a, Layout> {
        Box::pin(async move {
            let spaces = self.store.id_spaces(ns).await?;
            match spaces.into_iter().find(|s| s.name == ns) {
                Some(s) => Ok(s.layout),
                None => Err(Error::Rejected(Rejection::Ids {
                    namespace: ns.into(),
                    kind: seqsvr_store_api::IdRefusal::UnknownNamespace,
                    reason: "no such id namespace".into(),
                })),
            }
        })
    }
}

/// The store's own state machine in memory, shared by the holders of a
/// test (each with its own AllocSvr id and incarnation); `fail` makes
/// every call fail as an unreachable store would.
#[derive(Debug, Default)]
pub struct MemWorkers {
    /// The store's state.
    pub state: Mutex<seqsvr_store_core::SetState>,
    /// Fail every call (an unreachable store).
    pub fail: std::sync::atomic::AtomicBool,
}

/// One incarnation's view of a [`MemWorkers`].
#[derive(Debug, Clone)]
pub struct MemHolder {
    /// The shared store.
    pub mem: std::sync::Arc<MemWorkers>,
    /// The AllocSvr.
    pub alloc: AllocId,
    /// Its incarnation.
    pub incarnation: Incarnation,
}

impl MemWorkers {
    /// Applies one command as the store would.
    pub fn apply(
        &self,
        cmd: seqsvr_store_core::Command,
    ) -> Result<seqsvr_store_core::Reply, Error> {
        if self.fail.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Error::NoLeader("the store is unreachable".into()));
        }
        let mut dirty = Vec::new();
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Ok(s.apply(&cmd, &mut dirty)?)
    }
}

impl MemHolder {
    fn answer<T: Send + 'static>(
        &self,
        r: Result<seqsvr_store_core::Reply, Error>,
        f: impl FnOnce(seqsvr_store_core::Reply) -> Option<T>,
    ) -> Answer<'static, T> {
        let out = r.and_then(|r| {
            let text = format!("{r:?}");
            f(r).ok_or_else(|| Error::Internal(format!("unexpected reply {text}")))
        });
        Box::pin(async move { out })
    }
}

impl WorkerStore for MemHolder {
    fn claim<'a>(&'a self, ns: &'a str, now_ms: u64) -> Answer<'a, Claimed> {
        use seqsvr_store_core::{Command, Reply};
        let space = {
            let s = self.mem.state.lock().unwrap_or_else(|e| e.into_inner());
            s.ids.spaces.get(ns).map(|s| (s.layout, s.window_ms))
        };
        let now = space.map_or(0, |(l, _)| l.tick_of(now_ms));
        let r = self.mem.apply(Command::ClaimWorker {
            ns: ns.into(),
            alloc: self.alloc.clone(),
            incarnation: self.incarnation,
            now,
            reclaim: Vec::new(),
        });
        self.answer(r, move |r| match (r, space) {
            (Reply::WorkerClaimed(grant), Some((layout, window_ms))) => Some(Claimed {
                grant,
                layout,
                window_ms,
            }),
            _ => None,
        })
    }

    fn raise<'a>(&'a self, ns: &'a str, worker: u64, epoch: Epoch, to: u64) -> Answer<'a, u64> {
        let r = self.mem.apply(seqsvr_store_core::Command::RaiseWorker {
            ns: ns.into(),
            worker,
            alloc: self.alloc.clone(),
            incarnation: self.incarnation,
            epoch,
            to,
        });
        self.answer(r, |r| match r {
            seqsvr_store_core::Reply::WorkerRaised { ceiling } => Some(ceiling),
            _ => None,
        })
    }

    fn release<'a>(&'a self, ns: &'a str, worker: u64, epoch: Epoch) -> Answer<'a, ()> {
        let r = self.mem.apply(seqsvr_store_core::Command::ReleaseWorker {
            ns: ns.into(),
            worker,
            alloc: self.alloc.clone(),
            incarnation: self.incarnation,
            epoch,
        });
        self.answer(r, |r| match r {
            seqsvr_store_core::Reply::WorkerReleased => Some(()),
            _ => None,
        })
    }

    fn layout<'a>(&'a self, ns: &'a str) -> Answer<'a, Layout> {
        let s = self.mem.state.lock().unwrap_or_else(|e| e.into_inner());
        let out = s.ids.spaces.get(ns).map(|s| s.layout).ok_or_else(|| {
            Error::Rejected(Rejection::Ids {
                namespace: ns.into(),
                kind: seqsvr_store_api::IdRefusal::UnknownNamespace,
                reason: "no such id namespace".into(),
            })
        });
        Box::pin(async move { out })
    }
}
