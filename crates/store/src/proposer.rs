//! Group commit: concurrent commands share one log entry.
//!
//! openraft 0.9 writes each `client_write` as its own entry and fsyncs
//! before replicating it, so one command per entry would cost two serial
//! fsyncs (leader, then followers) per command. The proposer queues
//! commands; while a batch is being committed, new ones pile up and go out
//! together in the next entry: one fsync per replica covers them all, and
//! throughput grows with concurrency. A small number of batches may be in
//! flight at once so the leader's fsync of batch n+1 overlaps the
//! replication of batch n.

use std::sync::Arc;
use std::time::Instant;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::metrics::Stages;
use crate::types::{Command, NodeId, Outcome, Raft, Request};
use seqsvr_store_api::{Error, Result};

/// Most commands in one log entry (keeps an entry far below the disk
/// module's value-size limit).
pub const MAX_BATCH: usize = 256;
/// Batches committing at once.
pub const IN_FLIGHT: usize = 2;
/// Largest encoded log entry: below what the log store accepts as one
/// value (a larger one would be a storage error, fatal to the replica), with
/// room for the entry's own framing.
pub const MAX_ENTRY_BYTES: usize = crate::disk::MAX_VALUE - 1024;

struct Pending {
    /// The command.
    cmd: Command,
    /// Its encoded size, so a batch stays one storable log entry.
    size: usize,
    /// Where its outcome goes.
    reply: oneshot::Sender<Result<Outcome>>,
    /// When it was proposed.
    at: Instant,
}

/// A handle to the replica's proposer task.
#[derive(Clone)]
pub struct Proposer {
    /// Commands waiting for the next batch.
    tx: mpsc::Sender<Pending>,
}

impl Proposer {
    /// Starts the proposer task for `raft`; the time commands wait for
    /// their batch goes to `stages`.
    pub fn spawn(raft: Raft, stages: Arc<Stages>) -> Self {
        let (tx, rx) = mpsc::channel(16 * MAX_BATCH);
        tokio::spawn(run(raft, rx, stages));
        Self { tx }
    }

    /// Proposes `cmd` and waits until it is committed and applied.
    ///
    /// Returns [`Error::NotLeader`] if this replica is not the leader (the
    /// command was not appended).
    pub async fn propose(&self, cmd: Command) -> Result<Outcome> {
        let size = encoded_size(&cmd)?;
        if size > MAX_ENTRY_BYTES {
            return Err(Error::TooLarge(format!(
                "a command of {size} bytes exceeds the {MAX_ENTRY_BYTES}-byte log entry limit"
            )));
        }
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Pending {
                cmd,
                size,
                reply,
                at: Instant::now(),
            })
            .await
            .map_err(|_| Error::Internal("proposer stopped".into()))?;
        rx.await
            .map_err(|_| Error::Internal("proposer dropped the command".into()))?
    }
}

async fn run(raft: Raft, mut rx: mpsc::Receiver<Pending>, stages: Arc<Stages>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut carry: Option<Pending> = None;
    loop {
        let first = match carry.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        // Waiting for a slot is what lets a batch grow.
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = first.size;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) if bytes + p.size > MAX_ENTRY_BYTES => {
                    carry = Some(p);
                    break;
                }
                Ok(p) => {
                    bytes += p.size;
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        for p in &batch {
            stages.queue.observe(p.at.elapsed().as_secs_f64());
        }
        let raft = raft.clone();
        tokio::spawn(async move {
            commit(&raft, batch).await;
            drop(permit);
        });
    }
}

/// A command's size in the log (plus a little for the batch's framing).
fn encoded_size(cmd: &Command) -> Result<usize> {
    seqsvr_core::codec::encode(cmd)
        .map(|b| b.len() + 8)
        .map_err(|e| Error::Internal(e.to_string()))
}

async fn commit(raft: &Raft, batch: Vec<Pending>) {
    let (cmds, replies): (Vec<_>, Vec<_>) = batch.into_iter().map(|p| (p.cmd, p.reply)).unzip();
    let n = cmds.len();
    match raft.client_write(Request { commands: cmds }).await {
        Ok(resp) if resp.data.outcomes.len() == n => {
            for (reply, outcome) in replies.into_iter().zip(resp.data.outcomes) {
                let _ = reply.send(Ok(outcome));
            }
        }
        Ok(resp) => {
            let e = Error::Internal(format!(
                "{} outcomes for {n} commands",
                resp.data.outcomes.len()
            ));
            replies
                .into_iter()
                .for_each(|r| drop(r.send(Err(e.clone()))));
        }
        Err(e) => {
            let e = write_error(e);
            replies
                .into_iter()
                .for_each(|r| drop(r.send(Err(e.clone()))));
        }
    }
}

fn write_error(e: RaftError<NodeId, ClientWriteError<NodeId, openraft::BasicNode>>) -> Error {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => Error::NotLeader {
            leader: f.leader_id.zip(f.leader_node.map(|n| n.addr)),
        },
        RaftError::APIError(e) => Error::Internal(e.to_string()),
        RaftError::Fatal(e) => Error::NoLeader(format!("raft stopped: {e}")),
    }
}
