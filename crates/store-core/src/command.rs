//! What travels in the store's log.
//!
//! A log entry carries a [`Request`]: a batch of [`Command`]s proposed
//! together (group commit: one entry, one fsync per replica, many commands).
//! Applying it yields one [`Outcome`] per command, in order. Commands are
//! encoded by position (`seqsvr_core::codec`, docs/architecture/encoding.md):
//! new ones are appended, none is ever removed or reordered.

use seqsvr_core::ids::Layout;
use seqsvr_core::{
    AllocId, CounterDecl, CounterRules, DirChange, Directory, Epoch, Grant, Incarnation,
    LeaseTerms, Place, SectionId, SetCall, SetId, SetSpec,
};
pub use seqsvr_store_api::Rejection;
use serde::{Deserialize, Serialize};

pub use seqsvr_core::MAX_SECTIONS_PER_CALL;

/// One state-machine command. Everything a command needs (including any
/// time) travels inside it: apply must be deterministic. Every command that
/// changes ownership is *conditional* on the state it was decided on (an
/// expected epoch, a registered incarnation), so a delayed, repeated or
/// forged one is refused instead of undoing a later decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Fixes the set this store group serves. Idempotent with an equal spec;
    /// a different spec is rejected (a set never changes shape in place).
    ConfigureSet(SetSpec),
    /// Like `ConfigureSet`, for a group added to a cluster that runs
    /// already: it starts with every section absent and serves what
    /// `seqctl set add` and range moves install.
    ConfigureAddedSet(SetSpec),
    /// Sets the lease terms every leader grants and judges leases by.
    SetLease(LeaseTerms),
    /// Records an AllocSvr incarnation and its addresses. A different live
    /// incarnation is replaced only if `replaces` names it (the leader sets
    /// it after checking that its lease has certainly expired).
    RegisterAlloc {
        /// The AllocSvr.
        alloc: AllocId,
        /// Its client-plane `host:port`.
        addr: String,
        /// Its peer-plane `host:port`.
        peer_addr: String,
        /// Its admin-plane `host:port`.
        admin_addr: String,
        /// The registering process's incarnation.
        incarnation: Incarnation,
        /// The incarnation it replaces (0: none).
        replaces: Incarnation,
    },
    /// Refuses `alloc`'s `incarnation` from now on (operator).
    FenceAlloc {
        /// The AllocSvr.
        alloc: AllocId,
        /// The incarnation to refuse.
        incarnation: Incarnation,
    },
    /// Routes sections `first..first+expected.len()` to `alloc`, if each
    /// still has the epoch in `expected`. Each section that changes hands
    /// gets a new epoch, which fences the previous owner at once (promise
    /// 3); the new owner then claims them with `TakeOver`.
    Assign {
        /// The new owner.
        alloc: AllocId,
        /// First section.
        first: SectionId,
        /// Per section, the epoch the decision was made on.
        expected: Vec<Epoch>,
    },
    /// `alloc`'s `incarnation` claims sections `first..first+known.len()`
    /// routed to it (or unowned). Per section: a grant prepared for this
    /// incarnation at an epoch newer than `known[i]` (the newest it ever
    /// installed) is returned unchanged; otherwise the epoch grows by one
    /// and the ceiling by a step, and the previous ceiling is where it
    /// starts (skip ahead). So a retried take-over, or one after a handoff
    /// whose adopt was lost, skips nothing more (promise 4).
    TakeOver {
        /// The claimant.
        alloc: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// First section.
        first: SectionId,
        /// Per section, the newest epoch the claimant installed (0: none).
        known: Vec<Epoch>,
    },
    /// A planned move asked by the releasing owner: `section`, held by
    /// `from`'s `incarnation` at `epoch` (and no longer served by it), goes
    /// to `to` — new owner, new epoch, ceiling + step — in one write.
    Handoff {
        /// The releasing owner.
        from: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The new owner.
        to: AllocId,
        /// The section.
        section: SectionId,
        /// The epoch it is released at.
        epoch: Epoch,
    },
    /// Marks an AllocSvr as draining (the arbiter routes nothing to it) or
    /// not.
    SetDraining {
        /// The AllocSvr.
        alloc: AllocId,
        /// Draining or not.
        draining: bool,
    },
    /// Raises one section's ceiling to `to`, if `alloc`'s `incarnation`
    /// still owns it at `epoch`.
    Raise {
        /// The owner.
        alloc: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The section.
        section: SectionId,
        /// The caller's epoch for the section (fencing token).
        epoch: Epoch,
        /// The new ceiling.
        to: u64,
    },
    /// The freeze of a move as written before freezes were checked against
    /// the directory. Kept (at its place in the enum, which is its encoding)
    /// so that a log written by an older version replays as it was
    /// applied then; nothing proposes it any more (`Freeze` replaces it;
    /// docs/architecture/encoding.md).
    LegacyFreeze {
        /// First section.
        first: SectionId,
        /// Number of sections.
        count: u32,
        /// The set they move to.
        to: SetId,
        /// The move's id (refused if older than one applied here).
        move_id: u64,
    },
    /// The install of a move or addition as written before installs were
    /// checked against the directory; kept for replay like `LegacyFreeze`
    /// (`Install` replaces it).
    LegacyInstall {
        /// First section.
        first: SectionId,
        /// Per section, the source's final ceiling.
        floors: Vec<u64>,
        /// The move's id (refused if older than one applied here).
        move_id: u64,
    },
    /// A change to the directory (the home group only).
    Directory(DirChange),
    /// A copy of the home group's directory (other groups; only a newer
    /// version replaces the one held).
    CopyDirectory(Directory),
    /// Freezes sections `first..first+count` for the move `call` out of
    /// this set: no owner, a new epoch (the old owner's raises are refused
    /// from now on, promise 3), place `Moved`. Their ceilings are final
    /// here: every number this set handed out for them is at or below.
    /// Refused unless the directory this group holds shows that move under
    /// way with that id, and the sections lie in its range
    /// (`SetState::check_call`).
    Freeze {
        /// First section.
        first: SectionId,
        /// Number of sections.
        count: u32,
        /// The move (a `SetKind::Move` from this set).
        call: SetCall,
    },
    /// Installs sections `first..first+floors.len()` for `call`: a move
    /// into this set (each ceiling becomes at least `floors[i] + step`,
    /// the source's final ceiling plus a step, promise 1) or this set's
    /// addition (sections never served here only, at one step). Place
    /// `Serving`, no owner (the arbiter routes them). Refused unless the
    /// directory this group holds shows that move or addition under way
    /// (`SetState::check_call`).
    Install {
        /// First section.
        first: SectionId,
        /// Per section, the source's final ceiling (0 for an addition).
        floors: Vec<u64>,
        /// The move or addition.
        call: SetCall,
    },
    /// Removes `alloc`'s `incarnation` from the AllocSvrs the group knows,
    /// if it owns no section this set serves. The leader proposes it only
    /// once that incarnation's lease has certainly expired (an operator's
    /// `seqctl alloc retire`), so moves and rebalancing stop waiting for a
    /// process that is gone. Appended last: commands are encoded by
    /// position, and an old log replays.
    RetireAlloc {
        /// The AllocSvr.
        alloc: AllocId,
        /// The incarnation the decision was made on.
        incarnation: Incarnation,
    },
    /// A planned stop's explicit release, asked by the stopping process
    /// itself once it serves nothing: every section `alloc` owns gets a
    /// new epoch and no incarnation (so nothing the process may still
    /// send is accepted), and the id is left with no live incarnation.
    /// The id's next process registers at once and claims the sections
    /// back through its first renewal; if it does not come back, the
    /// arbiter routes them elsewhere at once — instead of waiting out a
    /// lease nobody holds any more (docs/operations.md, Stopping an
    /// AllocSvr). Appended last, like `RetireAlloc`.
    StopAlloc {
        /// The AllocSvr.
        alloc: AllocId,
        /// The stopping process's incarnation.
        incarnation: Incarnation,
    },
    /// The first write of a group seeded from a backup
    /// (docs/operations.md, Backup and disaster recovery): fixes the set
    /// like `ConfigureSet`, with the backup's lease terms, directory and a
    /// route version above the backup's, but with **every section absent**:
    /// nothing is served until [`Command::RestoreSections`] lands each
    /// section at its raised ceiling, in the same write that serves it.
    /// Idempotent with an equal spec. Appended last, like `RetireAlloc`.
    RestoreSet {
        /// The backed-up set.
        spec: SetSpec,
        /// The backup's lease terms.
        lease: LeaseTerms,
        /// The backup's route version (the group continues above it).
        route_version: u64,
        /// The backup's directory (or copy of it), if any.
        directory: Option<Directory>,
    },
    /// Lands sections `first..first+ceilings.len()` of a restore: each
    /// section still pristine here (absent, never given a ceiling or an
    /// epoch) gets its ceiling (the backup's plus the safety margin,
    /// computed by the leader), `start` at that ceiling, its epoch (the
    /// backup's plus one), no owner, and its place. Sections already
    /// landed are left alone, so a repeated or resumed restore changes
    /// nothing more. Appended last.
    RestoreSections {
        /// First section.
        first: SectionId,
        /// Per section, the raised ceiling.
        ceilings: Vec<u64>,
        /// Per section, the epoch to start at.
        epochs: Vec<Epoch>,
        /// Per section, its place in the backup.
        places: Vec<Place>,
    },
    /// Creates an id namespace with a layout and the window its holders
    /// raise time ceilings ahead by (docs/ids.md). Idempotent with the
    /// same layout and window. Appended last, like the id commands after
    /// it.
    CreateIdSpace {
        /// The namespace.
        name: String,
        /// Its layout (validated here).
        layout: Layout,
        /// The ceiling window, in ms.
        window_ms: u64,
    },
    /// `alloc`'s `incarnation` claims a worker id of `ns`: the one it
    /// holds, or the lowest free one — new epoch, floor = ceiling + 1,
    /// ceiling = max(floor, now) + window (`crate::ids`).
    ClaimWorker {
        /// The namespace.
        ns: String,
        /// The claimant.
        alloc: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The claimant's clock, in the layout's ticks.
        now: u64,
        /// Worker ids (with the epoch seen) whose holder's lease the
        /// leader saw certainly expire: taken only if still held so.
        reclaim: Vec<(u64, Epoch)>,
    },
    /// Raises a worker id's time ceiling, if `alloc`'s `incarnation` holds
    /// it at `epoch`.
    RaiseWorker {
        /// The namespace.
        ns: String,
        /// The worker id.
        worker: u64,
        /// The holder.
        alloc: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The holding's epoch.
        epoch: Epoch,
        /// The new ceiling, in ticks.
        to: u64,
    },
    /// Releases a worker id (a holder's clean stop); its ceiling stays.
    ReleaseWorker {
        /// The namespace.
        ns: String,
        /// The worker id.
        worker: u64,
        /// The holder.
        alloc: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The holding's epoch.
        epoch: Epoch,
    },
    /// Writes the declaration of counter `name` (docs/counters.md), if
    /// `alloc`'s `incarnation` owns `section` — the section of the name's
    /// position — at `epoch`: the owner serves the name from memory, so
    /// only it may change what it serves by, and the write is fenced like
    /// a raise (promise 3). `handed_out` is the owner's current value of
    /// the name: a floor below it is refused, a delete keeps at least it.
    /// Appended last.
    Counter {
        /// The owner.
        alloc: AllocId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The section of the name's position.
        section: SectionId,
        /// The owner's epoch for it.
        epoch: Epoch,
        /// The name.
        name: Vec<u8>,
        /// What to write.
        op: CounterOp,
        /// The owner's current value of the name.
        handed_out: u64,
    },
    /// Copies declared counters into this set for the move `call` (a
    /// `SetKind::Move` into this set), before the install: of the move's
    /// sections not served here yet, the names after `after` and up to
    /// `through` (`None`: to the last) take exactly `counters`, the
    /// source's declarations read after its freeze — a name listed gets
    /// the source's record, a name not listed loses any record left here
    /// by an earlier move (docs/counters.md, Moves). A section already
    /// served here is left alone, so a repeated or resumed move changes
    /// nothing more. Refused unless the directory this group holds shows
    /// that move under way (`SetState::check_call`). Appended last.
    CopyCounters {
        /// The move, as this set judges it.
        call: SetCall,
        /// The page's lower bound (exclusive; empty: from the first name).
        after: Vec<u8>,
        /// The page's upper bound (inclusive; `None`: to the last name).
        through: Option<Vec<u8>>,
        /// The declarations, by name.
        counters: Vec<(Vec<u8>, CounterDecl)>,
    },
    /// Lands declared counters of a restore (docs/operations.md, Backup
    /// and disaster recovery), before `RestoreSections` lands their
    /// sections: each name whose section is still pristine here takes the
    /// backup's declaration; names of sections already landed are left
    /// alone, so a repeated or resumed restore changes nothing more.
    /// Appended last.
    RestoreCounters {
        /// The declarations, by name.
        counters: Vec<(Vec<u8>, CounterDecl)>,
    },
    /// Lands id namespaces of a restore (docs/operations.md, Backup and
    /// disaster recovery), before `RestoreSet`: each namespace not here
    /// yet is created with the backup's layout, window and worker records
    /// (no holder, every ceiling past any tick the lost group issued:
    /// `crate::backup::restored_ids`); a namespace already here is left
    /// alone, so a repeated or resumed restore changes nothing more. All
    /// refused if one is invalid. Appended last.
    RestoreIds {
        /// The namespaces, by name.
        spaces: Vec<(String, crate::ids::IdSpace)>,
    },
}

/// A counter write (inside [`Command::Counter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CounterOp {
    /// Declare with `rules`, the floor at least `floor`. The same again is
    /// a no-op; other rules while declared are a conflict; over a
    /// tombstone, the floor stays at least the tombstone's.
    Create {
        /// The start floor.
        floor: u64,
        /// The rules.
        rules: CounterRules,
    },
    /// Moves the floor forward to `floor` (equal: a no-op).
    SetFloor {
        /// The new floor.
        floor: u64,
    },
    /// Deletes the declaration, leaving a tombstone whose floor is at
    /// least `handed_out`.
    Delete,
}

/// A log entry's application payload: commands proposed together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Applied in order; each gets its own outcome.
    pub commands: Vec<Command>,
}

/// What applying a [`Request`] produced.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Response {
    /// One per command, in order. Empty for blank and membership entries.
    pub outcomes: Vec<Outcome>,
}

/// The result of one command.
pub type Outcome = Result<Reply, Rejection>;

/// A command's successful result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The set is configured (now or before).
    Configured,
    /// The alloc is registered; the route version after the change.
    Registered {
        /// Route version.
        route_version: u64,
    },
    /// Sections assigned; the route version after the change.
    Assigned {
        /// Route version.
        route_version: u64,
    },
    /// The lease terms in force.
    Leased(LeaseTerms),
    /// A section handed off: the new owner's grant.
    HandedOff {
        /// The grant.
        grant: Grant,
        /// Route version after the change.
        route_version: u64,
    },
    /// Sections taken over.
    TakenOver {
        /// One per section, in order.
        grants: Vec<Grant>,
        /// Route version after the change.
        route_version: u64,
    },
    /// The ceiling now stands at `max_seq`.
    Raised {
        /// The new ceiling.
        max_seq: u64,
    },
    /// Sections frozen for a move.
    Frozen {
        /// Per section, its final ceiling here.
        finals: Vec<u64>,
        /// Per section, the epoch it is frozen at.
        epochs: Vec<u64>,
        /// How many were frozen by this command (0: all already were).
        newly: u32,
        /// Route version after the change.
        route_version: u64,
    },
    /// Sections installed.
    Installed {
        /// How many changed (0: all already were).
        newly: u32,
        /// Route version after the change.
        route_version: u64,
    },
    /// The directory (or copy) now at `version`.
    Directory {
        /// Its version.
        version: u64,
        /// Whether this command changed it.
        changed: bool,
    },
    /// An AllocSvr's planned stop is recorded.
    Stopped {
        /// Sections it owned, now at a new epoch with no incarnation.
        released: u32,
        /// Route version after the change.
        route_version: u64,
    },
    /// Sections of a restore landed (appended last).
    Restored {
        /// How many changed (0: all already had).
        newly: u32,
        /// Route version after the change.
        route_version: u64,
    },
    /// An id namespace exists (`created`: by this command).
    IdSpace {
        /// Whether this command created it.
        created: bool,
    },
    /// A worker id claimed (or the one already held).
    WorkerClaimed(seqsvr_core::ids::WorkerGrant),
    /// A worker id's ceiling now stands at `ceiling`.
    WorkerRaised {
        /// The ceiling, in ticks.
        ceiling: u64,
    },
    /// A worker id released.
    WorkerReleased,
    /// A counter's declaration in force after the command (appended last).
    Counter {
        /// The declaration.
        decl: CounterDecl,
        /// Whether this command changed it (false: a re-run).
        changed: bool,
    },
    /// Declared counters copied by a move or landed by a restore
    /// (appended last).
    CountersCopied {
        /// How many records changed (0: a repeat).
        newly: u32,
    },
}
