//! The types every part of the simulated deployment shares: the messages
//! on the network (store API and Raft, client, AllocSvr peer and admin
//! planes), the events on the queue (each component's timers), and the
//! names and addresses of AllocSvr processes.
//!
//! The components (`raft`, `store`, `link`, `alloc`, `client`,
//! `operator`, `mover`) depend on these types and on the environment
//! (`env`), never on each other (except `alloc`, `operator` and `mover` on
//! `link`, the store client they use, `mover` on `operator`'s timing, and
//! `store` on `raft`); the world loop ties them together. This module
//! depends only on `net`, `faults` (adopt fates) and `counter_calls`.

use std::rc::Rc;

use seqsvr_core::directory::{SetCall, SetId};
use seqsvr_core::{
    AllocId, DirChange, Directory, Epoch, Grant, Incarnation, LeaseTerms, Placement, SectionId,
};
use seqsvr_store_api::SectionInfo;
use seqsvr_store_core::command::{Command, Rejection, Reply};
use seqsvr_store_core::state::SetState;

use crate::net::{Node, Time};

/// An AllocSvr process slot (`Node::Alloc(slot)`).
pub(crate) type Slot = usize;

/// The id of AllocSvr `i` of `set` in its store group (`a0`, `a1`, … in
/// set 0, `b0`, … in set 1).
pub(crate) fn alloc_name(set: usize, i: usize) -> AllocId {
    format!("{}{i}", char::from(b'a' + set as u8))
}

/// The client-plane address of process slot `p` (what the route table
/// carries; a twin has its own).
pub(crate) fn client_addr(p: Slot) -> String {
    format!("p{p}:7201")
}

/// The peer-plane address of process slot `p` (where adopts go).
pub(crate) fn peer_addr(p: Slot) -> String {
    format!("p{p}:7211")
}

/// The admin-plane address of process slot `p`.
pub(crate) fn admin_addr(p: Slot) -> String {
    format!("p{p}:7221")
}

/// The process slot an address belongs to.
pub(crate) fn slot_of_addr(addr: &str) -> Option<Slot> {
    addr.strip_prefix('p')?.split(':').next()?.parse().ok()
}

/// A route table as a reader sees it: owner and its process per section,
/// what the set serves of its span, the group's directory (or copy).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RouteView {
    /// Route version.
    pub version: u64,
    /// Owner per section.
    pub owners: Vec<Option<AllocId>>,
    /// The process at the owner's registered address, per section.
    pub slots: Vec<Option<Slot>>,
    /// The set's placement (served, absent, moved away).
    pub placement: Placement,
    /// The directory (home group) or the copy this group holds.
    pub directory: Option<Directory>,
}

impl RouteView {
    /// The route table of `state`.
    pub(crate) fn of(state: &SetState) -> Self {
        let owners: Vec<Option<AllocId>> = state.sections.iter().map(|s| s.owner.clone()).collect();
        let slots = (owners.iter())
            .map(|o| {
                let rec = state.allocs.get(o.as_ref()?)?;
                slot_of_addr(&rec.addr)
            })
            .collect();
        Self {
            version: state.route_version,
            owners,
            slots,
            placement: state.placement.clone(),
            directory: state.directory.clone(),
        }
    }

    /// The directory version this table carries (0: none).
    pub(crate) fn directory_version(&self) -> u64 {
        self.directory.as_ref().map_or(0, |d| d.version)
    }

    /// The process serving `s`, as this table says.
    pub(crate) fn slot(&self, s: SectionId) -> Option<Slot> {
        *self.slots.get(s as usize)?
    }

    /// Whether this table routes `s` to `me`.
    pub(crate) fn routes_to(&self, s: SectionId, me: &str) -> bool {
        self.owners
            .get(s as usize)
            .is_some_and(|o| o.as_deref() == Some(me))
    }
}

/// A store API request (peer plane, and the admin plane's `admin()` ones).
#[derive(Debug, Clone)]
pub(crate) enum StoreReq {
    /// `RegisterAlloc`: the leader decides `replaces`, then writes.
    Register {
        /// The AllocSvr.
        alloc: AllocId,
        /// Its process slot (its addresses).
        slot: Slot,
        /// The process's incarnation.
        incarnation: Incarnation,
    },
    /// A lease renewal (barrier, then grant).
    Renew {
        /// The AllocSvr.
        alloc: AllocId,
        /// The process's incarnation.
        incarnation: Incarnation,
        /// The `sections_version` of the list it holds (0: none).
        known_version: u64,
    },
    /// A linearizable read of the route table.
    Routes,
    /// A linearizable read of one section's record.
    Read {
        /// The section.
        section: SectionId,
    },
    /// `TakeOver` (a write).
    TakeOver {
        /// The claimant.
        alloc: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// First section.
        first: SectionId,
        /// Newest epoch installed, per section.
        known: Vec<Epoch>,
    },
    /// `Raise` (a write).
    Raise {
        /// The owner.
        alloc: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The section.
        section: SectionId,
        /// The caller's epoch.
        epoch: Epoch,
        /// The new ceiling.
        to: u64,
    },
    /// `Handoff` (a write).
    Handoff {
        /// The releasing owner.
        from: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The new owner.
        to: AllocId,
        /// The section.
        section: SectionId,
        /// The epoch released.
        epoch: Epoch,
    },
    /// Admin: `Assign` with expected epochs (checked, then written).
    Assign {
        /// The new owner.
        alloc: AllocId,
        /// First section.
        first: SectionId,
        /// Expected epochs.
        expected: Vec<Epoch>,
    },
    /// Admin: `SetLease` (checked, then written).
    SetLease(LeaseTerms),
    /// Sets service: `Freeze` (written under the arbiter's lock).
    Freeze {
        /// First section.
        first: SectionId,
        /// How many.
        count: u32,
        /// The move (set, id, range, source and destination).
        call: SetCall,
    },
    /// Sets service: `Install`.
    Install {
        /// First section.
        first: SectionId,
        /// The source's final ceilings (the install adds a step).
        floors: Vec<u64>,
        /// The move (set, id, range, source and destination).
        call: SetCall,
    },
    /// Sets service: a directory change (home group only).
    ChangeDirectory(DirChange),
    /// Sets service: a directory copy (other groups).
    CopyDirectory(Directory),
    /// Admin: `Status`, from the replica's own state (AllocSvrs if leading).
    Status,
    /// Client plane: a linearizable read of sections `first..first+count`.
    Sections {
        /// First section.
        first: SectionId,
        /// How many.
        count: u32,
    },
    /// Admin: `FenceAlloc` (`seqctl alloc fence`): the incarnation named is
    /// refused from now on; the process learns it when next refused.
    Fence {
        /// The AllocSvr.
        alloc: AllocId,
        /// The incarnation to refuse.
        incarnation: Incarnation,
    },
    /// Worker-id calls (`ClaimWorker`, `RaiseWorker`, `ReleaseWorker`).
    Ids(crate::ids::IdReq),
    /// Sets service: a move's declared-counter read or copy.
    Counters(crate::counter_calls::CounterReq),
}

impl StoreReq {
    /// Admin-plane calls are not forwarded: a follower answers NO_LEADER.
    pub(crate) fn admin(&self) -> bool {
        matches!(
            self,
            StoreReq::Assign { .. }
                | StoreReq::SetLease(_)
                | StoreReq::Freeze { .. }
                | StoreReq::Install { .. }
                | StoreReq::ChangeDirectory(_)
                | StoreReq::CopyDirectory(_)
                | StoreReq::Status
                | StoreReq::Fence { .. }
                | StoreReq::Counters(_)
        )
    }
}

/// One registered AllocSvr as a leader's `Status` lists it.
#[derive(Debug, Clone)]
pub(crate) struct AllocEntry {
    /// Its id.
    pub id: AllocId,
    /// Its admin-plane address.
    pub admin_addr: String,
    /// Fenced by an operator.
    pub fenced: bool,
}

/// A granted renewal.
#[derive(Debug, Clone)]
pub(crate) struct Renewal {
    /// Lease length.
    pub lease_ms: u64,
    /// The sections routed to the caller (empty when `unchanged`).
    pub sections: Vec<SectionId>,
    /// The list is the one of the `known_version` the caller sent.
    pub unchanged: bool,
    /// The version of the list.
    pub sections_version: u64,
    /// Route version.
    pub route_version: u64,
}

/// A successful store answer.
#[derive(Debug, Clone)]
pub(crate) enum StoreOk {
    /// A committed write's reply.
    Written(Reply),
    /// A granted renewal.
    Renewed(Renewal),
    /// The route table.
    Routes(RouteView),
    /// A section's record.
    Section(SectionInfo),
    /// A committed handoff: the new owner's grant and peer address.
    HandedOff {
        /// The grant.
        grant: Grant,
        /// The new owner's peer address.
        to_addr: String,
    },
    /// A committed freeze: the final ceilings, and the group's lease +
    /// margin as the leader knows it after the write (`FreezeReply`).
    Frozen {
        /// Per section, its final ceiling.
        finals: Vec<u64>,
        /// Per section, the epoch it is frozen at.
        epochs: Vec<u64>,
        /// How many this call froze.
        newly: u32,
        /// `LeaseState::office_wait_ms` of the leader's state.
        lease_expiry_ms: u64,
        /// Who may still hold the sections (`Arbiter::holders` of the
        /// leader that applied it).
        holders: Vec<seqsvr_core::mover::Holder>,
    },
    /// A replica's status: whether it believes it leads, and (if so) the
    /// registered AllocSvrs of its applied state.
    Status {
        /// It believes it leads.
        leading: bool,
        /// The AllocSvrs registered (empty unless leading).
        allocs: Vec<AllocEntry>,
    },
    /// Section records.
    Sections(Vec<SectionInfo>),
    /// A page of declared counters, and whether more follow.
    Counters(Vec<seqsvr_core::mover::Declared>, bool),
    /// A committed directory change, with the directory after it
    /// (`DirectoryReply`).
    Directory {
        /// Its version.
        version: u64,
        /// Whether this change changed it.
        changed: bool,
        /// The directory as the leader holds it now.
        directory: Option<Directory>,
    },
}

/// A failed store answer (the store client's view).
#[derive(Debug, Clone)]
pub(crate) enum StoreFail {
    /// No leader (forwarded call, lost leadership, no quorum, refused
    /// lease change).
    NoLeader,
    /// The state machine (or the leader's check) refused.
    Rejected(Rejection),
    /// No answer in time.
    Timeout,
}

impl StoreFail {
    /// The store client's error for this failure (`Replicas::call` answers
    /// a deadline passed, like a leader missing, with `NoLeader`), for the
    /// AllocSvr's decisions to classify.
    pub(crate) fn to_api(&self) -> seqsvr_store_api::Error {
        use seqsvr_store_api::Error as E;
        match self {
            StoreFail::NoLeader => E::NoLeader("no leader".into()),
            StoreFail::Timeout => E::NoLeader("no replica answered in time".into()),
            StoreFail::Rejected(r) => E::Rejected(r.clone()),
        }
    }

    /// `seqsvr_store_api::Error::is_retryable`.
    pub(crate) fn retryable(&self) -> bool {
        self.to_api().is_retryable()
    }
}

/// A store answer.
pub(crate) type StoreResp = Result<StoreOk, StoreFail>;

/// Which attempt of which call of which process life a store message
/// belongs to (late answers to abandoned attempts are ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallRef {
    /// The caller.
    pub node: Node,
    /// The caller's life (bumped by a crash).
    pub life: u32,
    /// The call.
    pub call: u64,
    /// The attempt within the call.
    pub attempt: u32,
}

/// A store request being handled: who asked and how to answer.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// The caller.
    pub call: CallRef,
    /// The request.
    pub req: StoreReq,
    /// Forwarded by another replica (never forwarded again).
    pub forwarded: bool,
    /// The replica that forwarded it and its forward id (answers go back
    /// through it).
    pub via: Option<(usize, u64)>,
}

/// One Raft log entry.
#[derive(Debug)]
pub(crate) struct Entry {
    /// Unique id (identity across replicas).
    pub id: u64,
    /// The term of the leader that appended it.
    pub term: u64,
    /// The command; `None` for a new leader's blank entry.
    pub cmd: Option<Command>,
}

/// Entries are shared between the logs that hold them.
pub(crate) type EntryRef = Rc<Entry>;

/// AppendEntries: the leader's log (its committed prefix length and its
/// tail), its commit index; also the heartbeat and a barrier's probe.
#[derive(Debug)]
pub(crate) struct Append {
    /// Leader's term.
    pub term: u64,
    /// Leader.
    pub leader: usize,
    /// The committed prefix length the leader's log starts with.
    pub base: usize,
    /// The rest of the leader's log.
    pub tail: Vec<EntryRef>,
    /// Leader's commit index.
    pub commit: usize,
    /// The barrier this probe is for, if any.
    pub probe: Option<u64>,
}

/// The answer to an [`Append`].
#[derive(Debug)]
pub(crate) struct Ack {
    /// The follower's term.
    pub term: u64,
    /// The follower.
    pub from: usize,
    /// Accepted (same term).
    pub ok: bool,
    /// The follower's log length.
    pub len: usize,
    /// The barrier probed, if any.
    pub probe: Option<u64>,
}

/// Store traffic.
#[derive(Debug)]
pub(crate) enum StoreMsg {
    /// A request (from an AllocSvr or the operator, or forwarded).
    Req(Pending),
    /// An answer; `relay`: the receiver is the forwarding replica (with
    /// its forward id), not the caller.
    Resp {
        /// The call answered.
        call: CallRef,
        /// The answer.
        resp: StoreResp,
        /// Forward id at the receiving replica, if it is one.
        relay: Option<u64>,
    },
    /// Raft AppendEntries (also the heartbeat and the barrier's probe).
    Append(Append),
    /// Its answer.
    Ack(Ack),
}

/// Which attempt of which client call a message belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpRef {
    /// The client.
    pub client: usize,
    /// The call.
    pub op: u64,
    /// The attempt.
    pub attempt: u32,
}

/// Why an AllocSvr handed out nothing (the retryable errors of the API).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `NOT_OWNER`.
    NotOwner(SectionId),
    /// `LEASE_EXPIRED`.
    LeaseExpired,
    /// This process was replaced or fenced (`STALE_INCARNATION`).
    Fenced,
    /// `CEILING_EXHAUSTED` after waiting.
    Exhausted(SectionId),
    /// Not serving yet (connection refused).
    Unavailable,
    /// `MOVED`: this set gave the section to set `to`.
    Moved(SectionId, SetId),
    /// `NOT_SERVED`: this set does not serve the section (absent, or
    /// frozen and not installed anywhere yet).
    NotServed(SectionId),
    /// `OUT_OF_RANGE`: the uid is outside this set's span.
    OutOfRange,
}

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ask {
    /// `Next` (one uid) or `NextBatch` (uids of one section).
    Next(Vec<u64>),
    /// `Current` of one uid.
    Current(u64),
}

impl Ask {
    /// The uids asked about.
    pub(crate) fn uids(&self) -> Vec<u64> {
        match self {
            Ask::Next(u) => u.clone(),
            Ask::Current(u) => vec![*u],
        }
    }
}

/// Client ↔ AllocSvr traffic.
#[derive(Debug)]
pub(crate) enum ClientMsg {
    /// A request.
    Req {
        /// The attempt.
        op: OpRef,
        /// What it asks.
        ask: Ask,
    },
    /// The answer.
    Resp {
        /// The attempt.
        op: OpRef,
        /// One number per uid (the current value for `Current`), or why not.
        result: Result<Vec<u64>, Refusal>,
        /// The AllocSvr's route table, with `NOT_OWNER`/`LEASE_EXPIRED`.
        routes: Option<RouteView>,
        /// The AllocSvr's route version (every reply carries it).
        version: u64,
    },
}

/// AllocSvr peer-plane traffic: adopts (genuine or forged).
#[derive(Debug)]
pub(crate) enum PeerMsg {
    /// `AllocPeer.Adopt`: "`section` was handed to you at `epoch`". The
    /// grant travels too: only the `adopt_unchecked` knob installs it.
    Adopt {
        /// The adopt's id (its answer names it).
        id: u64,
        /// The grant as the sender knows it.
        grant: Grant,
    },
    /// The answer: sections installed, or why not.
    AdoptResp {
        /// The adopt answered.
        id: u64,
        /// Installed count, or the refusal.
        result: Result<u32, String>,
    },
}

/// AllocSvr admin-plane traffic.
#[derive(Debug)]
pub(crate) enum AdminMsg {
    /// `AllocAdmin.Handoff`: hand each section to the AllocSvr named.
    Handoff {
        /// The moves, in order.
        moves: Vec<(SectionId, AllocId)>,
        /// What the network does to their adopts (a fault's choice).
        fate: AdoptFate,
    },
    /// `AllocAdmin.Release`: stop serving sections frozen for a move.
    Release {
        /// The call (its answer names it).
        id: u64,
        /// First section.
        first: SectionId,
        /// Per section from `first`, the epoch it is frozen at.
        epochs: Vec<u64>,
    },
    /// `AllocAdmin.Refresh`: renew now.
    Refresh {
        /// The call.
        id: u64,
    },
    /// The answer to a `Release` (sections released) or a `Refresh`.
    Answer {
        /// The call answered.
        id: u64,
        /// Who answered (the AllocSvr's id and its process's
        /// incarnation, as `ReleaseReply` names them), or why not.
        result: Result<seqsvr_core::mover::Confirmed, String>,
    },
}

/// A message in flight.
#[derive(Debug)]
pub(crate) enum Msg {
    /// Store API and Raft traffic.
    Store(StoreMsg),
    /// Client ↔ AllocSvr traffic.
    Client(ClientMsg),
    /// AllocSvr ↔ AllocSvr traffic.
    Peer(PeerMsg),
    /// Operator → AllocSvr traffic.
    Admin(AdminMsg),
    /// Client ↔ AllocSvr id traffic.
    Id(crate::ids::IdMsg),
}

/// A store client's timer (hedge, back-off, deadline) for call `call`;
/// `gen` guards against stale ones.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkTimer {
    /// The call.
    pub call: u64,
    /// The call's timer generation when set.
    pub gen: u64,
}

/// A replica's timers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RTimer {
    /// Heartbeats, election timeout, arbiter tick, expiries (the
    /// generation guards against a second chain of ticks).
    Tick(u64),
    /// The pause (SIGSTOP) ends.
    Resume,
}

/// What reaches a replica while it is paused (handled on resume).
#[derive(Debug)]
pub(crate) enum ReplicaInput {
    /// A message and its sender.
    Msg(Node, StoreMsg),
}

/// An admitted client request: what it asks, and the numbers handed out
/// so far.
#[derive(Debug)]
pub(crate) struct Work {
    /// The client's call.
    pub op: OpRef,
    /// What it asks.
    pub ask: Ask,
    /// Numbers handed out so far (a batch stopped by an exhausted section).
    pub out: Vec<u64>,
    /// Give up waiting at this time (set when it first has to wait).
    pub deadline: Option<Time>,
}

/// An AllocSvr process's timers and deferred work.
#[derive(Debug)]
pub(crate) enum ATimer {
    /// Time to renew (the generation guards against stale timers).
    Renew(u64),
    /// A store call's timer.
    Link(LinkTimer),
    /// A timer of the control loop ([`Effect::SetTimer`]), set for the
    /// process's clock reading given.
    ///
    /// [`Effect::SetTimer`]: seqsvr_alloc::control::Effect::SetTimer
    Due(seqsvr_alloc::control::Timer, std::time::Instant),
    /// The compare-and-swap (or read) of an admitted request.
    Serve(Work),
    /// A request waiting on an exhausted section gives up.
    WaitDeadline(u64),
    /// Time to re-read the route table (the generation guards against
    /// stale timers).
    RoutePoll(u64),
    /// The pause (SIGSTOP) ends.
    Resume,
    /// The control loop's effects after a lease extension, a moment
    /// later (the claims; with the `lease_before_drop` knob the drops too).
    Effects(Vec<seqsvr_alloc::control::Effect>),
    /// A handoff's adopt got no answer in time.
    AdoptTimeout(u64),
    /// An id timer.
    Ids(crate::ids::IdTimer),
}

/// What reaches an AllocSvr process: a message or one of its own timers.
#[derive(Debug)]
pub(crate) enum AllocInput {
    /// A message and its sender.
    Msg(Node, Msg),
    /// A timer or deferred piece of work.
    Timer(ATimer),
}

/// A client's timers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CTimer {
    /// Start the next call.
    Issue,
    /// An attempt got no answer in time.
    Timeout {
        /// The call.
        op: u64,
        /// The attempt.
        attempt: u32,
    },
    /// Retry the current call (after a short back-off).
    Retry(u64),
    /// Re-read the route table.
    Refresh,
}

/// A mover run's timers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum MTimer {
    /// A store call's timer (to `set`'s group).
    Link(usize, LinkTimer),
    /// A wait ends (a status or release call's timeout, the lease wait,
    /// the claim loop's poll); `gen` guards against stale ones.
    Wake(u64),
    /// The pause (SIGSTOP) ends.
    Resume,
}

/// Something that happens at a virtual time.
#[derive(Debug)]
pub(crate) enum Ev {
    /// A message arrives (if its link is still up and its target alive).
    Deliver {
        /// Sender.
        from: Node,
        /// Receiver.
        to: Node,
        /// The message.
        msg: Msg,
    },
    /// A store replica's timer (ignored if the replica restarted since).
    Replica {
        /// Which set.
        set: usize,
        /// Which replica of the set.
        r: usize,
        /// The life that set it.
        life: u32,
        /// What it is for.
        t: RTimer,
    },
    /// An input a replica queued while paused, handled after it resumed.
    ReplicaResumed {
        /// Which set.
        set: usize,
        /// Which replica of the set.
        r: usize,
        /// The life that queued it.
        life: u32,
        /// The input.
        input: ReplicaInput,
    },
    /// An AllocSvr process's timer or deferred work (ignored after a crash).
    Alloc {
        /// Which process slot.
        p: Slot,
        /// The life that set it.
        life: u32,
        /// What it is for.
        t: ATimer,
    },
    /// An input a process queued while paused, handled after it resumed.
    Resumed {
        /// Which process slot.
        p: Slot,
        /// The life that queued it.
        life: u32,
        /// The input.
        input: AllocInput,
    },
    /// A client's timer.
    Client {
        /// Which client.
        c: usize,
        /// What it is for.
        t: CTimer,
    },
    /// The operator's store client's timer, for a call to `set`.
    Operator(usize, LinkTimer),
    /// A timer of mover run `run` (ignored once it crashed or ended).
    Mover {
        /// The run.
        run: u32,
        /// What it is for.
        t: MTimer,
    },
    /// The `i`-th fault of the schedule.
    Fault(usize),
    /// Id clients, id faults, restarts after them.
    Ids(crate::ids::IdEv),
}

/// What happens to the adopt of a planned handoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdoptFate {
    /// Delivered as the network delivers it.
    Normal,
    /// Lost: the new owner claims the section at its next renewal.
    Lost,
    /// Held back this long (arrives after the new owner claimed, or after
    /// the section moved on).
    Delayed(Time),
    /// Delivered, and once more this much later.
    Duplicated(Time),
}
