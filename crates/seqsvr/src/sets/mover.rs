//! `seqctl set move`: moves a uid range (whole sections) from the set that
//! serves it to another set, online.
//!
//! The steps and every decision between them are the mover state machine
//! ([`seqsvr_core::mover`]; `docs/architecture/sets.md` says why its order
//! never repeats a number). This file is its executor: it makes each call
//! the machine asks for with the real store and AllocSvr clients, waits
//! where it says, and hands back the answers. The simulation executes the
//! same machine over its simulated network.

use std::collections::HashMap;
use std::time::Instant;

use seqsvr_core::mover::{
    AllocRef, Answer, Call, CallError, Claimed, Confirmed, Effect, MoveCmd, MoveError, Mover,
    StatusFor,
};
use seqsvr_core::{Directory, SetId};
use seqsvr_proto::{self as pb};
use seqsvr_store_api::{ReadClient, SetsClient};

use super::{Error, Result, Sets, CALL_TIMEOUT};

pub use seqsvr_core::mover::MoveReport;

/// A step of the move, for `--stop-after` (tests and drills stop the
/// mover there, then crash nodes and run it again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Step {
    /// The home group recorded the move.
    Begin,
    /// The source froze the sections.
    Freeze,
    /// The source's AllocSvrs released them.
    Release,
    /// The destination installed them.
    Install,
    /// The destination's AllocSvrs claimed them.
    Claim,
    /// The directory flipped.
    Finish,
}

impl From<Step> for seqsvr_core::mover::Step {
    fn from(s: Step) -> Self {
        use seqsvr_core::mover::Step as S;
        match s {
            Step::Begin => S::Begin,
            Step::Freeze => S::Freeze,
            Step::Release => S::Release,
            Step::Install => S::Install,
            Step::Claim => S::Claim,
            Step::Finish => S::Finish,
        }
    }
}

/// Moves `[begin, end)` to set `to`; see the module docs.
pub async fn move_range(
    sets: &Sets,
    begin: u64,
    end: u64,
    to: SetId,
    stop_after: Option<Step>,
) -> Result<MoveReport> {
    let origin = Instant::now();
    let stop_after = stop_after.map(Into::into);
    let mut mover = Mover::new(MoveCmd {
        begin,
        end,
        to,
        stop_after,
    });
    let mut x = Executor::new(sets);
    let mut effect = mover.start();
    loop {
        effect = match effect {
            Effect::Call(c) => {
                let answer = x.call(c).await;
                mover.on(origin.elapsed(), answer)
            }
            Effect::WaitUntil(t) => {
                if mover.waiting_for_leases() {
                    let r = mover.report();
                    tracing::warn!(
                        "not every AllocSvr of set {} confirmed: {}; waiting for its leases",
                        r.from,
                        r.release_unconfirmed.as_deref().unwrap_or("?")
                    );
                }
                tokio::time::sleep_until((origin + t).into()).await;
                mover.on(origin.elapsed(), Answer::Woke)
            }
            Effect::Done(report) => return Ok(report),
            Effect::Failed(e) => return Err(x.error(e)),
        }
    }
}

/// Makes the mover's calls.
struct Executor<'s> {
    /// The cluster.
    sets: &'s Sets,
    /// The directory last read or changed (where each set is).
    dir: Option<Directory>,
    /// Each set's sets service and client-plane reader, made once.
    clients: HashMap<SetId, SetsClient>,
    readers: HashMap<SetId, ReadClient>,
    /// The error of the last store call that failed: the run's error if
    /// the machine ends the run on it.
    failed: Option<Error>,
}

impl<'s> Executor<'s> {
    fn new(sets: &'s Sets) -> Self {
        Self {
            sets,
            dir: None,
            clients: HashMap::new(),
            readers: HashMap::new(),
            failed: None,
        }
    }

    /// The error the run ends with: a failed store call's own, else the
    /// machine's.
    fn error(&mut self, e: MoveError) -> Error {
        match e {
            MoveError::Stopped(s) => Error::Stopped(s.name()),
            e => (self.failed.take()).unwrap_or_else(|| Error::Refused(e.to_string())),
        }
    }

    /// Makes `c`; a store call's failure becomes [`Answer::Failed`].
    async fn call(&mut self, c: Call) -> Answer {
        let answer = match c {
            Call::LeaderStatus { set, purpose } => return self.leader(set, purpose).await,
            Call::Release {
                alloc,
                admin_addr,
                first,
                epochs,
                ..
            } => return self.release(&alloc, &admin_addr, first, epochs).await,
            Call::Refresh { admin_addr, .. } => return self.refresh(&admin_addr).await,
            c => self.store(c).await,
        };
        answer.unwrap_or_else(|e| {
            let error = CallError {
                rejected: matches!(e, Error::Store(seqsvr_store_api::Error::Rejected(_))),
                message: e.to_string(),
            };
            self.failed = Some(e);
            Answer::Failed(error)
        })
    }

    /// A store call.
    async fn store(&mut self, c: Call) -> Result<Answer> {
        Ok(match c {
            Call::ReadDirectory => {
                let d = self.sets.directory().await?;
                self.dir = Some(d.clone());
                Answer::Directory(d)
            }
            Call::ChangeDirectory(change) => {
                let home = self.client(seqsvr_core::directory::HOME_SET)?;
                let (_, d) = home.change_directory(&change).await?;
                self.dir = Some(d.clone());
                Answer::Changed(d)
            }
            Call::CopyDirectory { set, dir } => {
                let r = match self.client(set) {
                    Ok(c) => c.copy_directory(&dir).await.map_err(Error::from),
                    Err(e) => Err(e),
                };
                Answer::Copied(r.map(|_| ()).map_err(|e| e.to_string()))
            }
            Call::Freeze { first, count, call } => {
                let f = self.client(call.set)?.freeze(first, count, &call).await?;
                Answer::Frozen {
                    finals: f.finals,
                    epochs: f.epochs,
                    newly: f.newly,
                    lease_expiry: f.lease_expiry,
                    holders: f.holders,
                }
            }
            Call::ReadCounters {
                set,
                first,
                count,
                after,
            } => {
                let (counters, more) = (self.client(set)?)
                    .read_counters(first, count, &after)
                    .await?;
                Answer::Counters { counters, more }
            }
            Call::CopyCounters {
                call,
                after,
                through,
                counters,
            } => {
                let c = self.client(call.set)?;
                let n = (c.copy_counters(&call, &after, through.as_deref(), &counters)).await?;
                Answer::CountersCopied(n)
            }
            Call::Install {
                first,
                floors,
                call,
            } => {
                let c = self.client(call.set)?;
                Answer::Installed(c.install(first, floors, &call).await?)
            }
            Call::ReadSections { set, first, count } => {
                let infos = self.reader(set)?.read_sections(first, count).await?;
                Answer::Sections(
                    (infos.into_iter())
                        .map(|s| Claimed {
                            owner: s.record.owner,
                            incarnation: s.record.incarnation,
                        })
                        .collect(),
                )
            }
            c => unreachable!("{c:?} is not a store call"),
        })
    }

    /// Set `set`'s entry in the directory last seen.
    fn dir_set(&self, set: SetId) -> Result<&seqsvr_core::DirSet> {
        let dir = self.dir.as_ref().expect("the directory is read first");
        self.sets.set(dir, set)
    }

    /// Set `set`'s sets service (made on first use).
    fn client(&mut self, set: SetId) -> Result<&SetsClient> {
        if !self.clients.contains_key(&set) {
            let c = self.sets.sets_client(self.dir_set(set)?)?;
            self.clients.insert(set, c);
        }
        Ok(&self.clients[&set])
    }

    /// Set `set`'s client-plane reader (made on first use).
    fn reader(&mut self, set: SetId) -> Result<&ReadClient> {
        if !self.readers.contains_key(&set) {
            let stores = self.dir_set(set)?.stores.clone();
            let r = ReadClient::new(&stores, &self.sets.connect)?;
            self.readers.insert(set, r);
        }
        Ok(&self.readers[&set])
    }

    /// The AllocSvrs `set`'s leader lists, if a leader answered.
    async fn leader(&mut self, set: SetId, _: StatusFor) -> Answer {
        let admin = match self.dir_set(set) {
            Ok(s) => s.admin.clone(),
            Err(_) => return Answer::Leader(None),
        };
        let Some(l) = self.sets.leader_status(&admin).await else {
            return Answer::Leader(None);
        };
        let allocs = (l.allocs.into_iter())
            .map(|a| AllocRef {
                id: a.alloc_id,
                admin_addr: a.admin_addr,
                fenced: a.fenced,
            })
            .collect();
        Answer::Leader(Some(allocs))
    }

    /// Tells AllocSvr `alloc` to stop serving `first..` (frozen at
    /// `epochs`); the answer names who confirmed (the machine checks it
    /// against the incarnation the freeze named).
    async fn release(&mut self, alloc: &str, addr: &str, first: u32, epochs: Vec<u64>) -> Answer {
        let sections = (epochs.into_iter().enumerate())
            .map(|(i, epoch)| pb::SectionEpoch {
                section: first + i as u32,
                epoch,
            })
            .collect();
        let r = match self.sets.alloc_admin(addr) {
            Err(e) => Err(e.to_string()),
            Ok(mut c) => {
                let call = c.release(pb::ReleaseRequest { sections });
                match tokio::time::timeout(CALL_TIMEOUT, call).await {
                    Ok(Ok(r)) => {
                        let r = r.into_inner();
                        Ok(Confirmed {
                            alloc: r.alloc_id,
                            incarnation: r.incarnation,
                        })
                    }
                    Ok(Err(e)) => Err(format!("{alloc}: {}", e.message())),
                    Err(_) => Err(format!("{alloc}: no answer")),
                }
            }
        };
        Answer::Released(r)
    }

    /// Asks the AllocSvr at `addr` to renew now; its outcome does not
    /// matter.
    async fn refresh(&mut self, addr: &str) -> Answer {
        if let Ok(mut c) = self.sets.alloc_admin(addr) {
            let call = c.refresh(pb::RefreshRequest {});
            let _ = tokio::time::timeout(CALL_TIMEOUT, call).await;
        }
        Answer::Refreshed
    }
}
