//! The range mover (`seqctl set move`) as a state machine: it decides, its
//! executors act. `docs/architecture/sets.md` gives the protocol and why
//! its order never repeats a number.
//!
//! [`Mover::on`] takes the answer to the last call it asked for (or the end
//! of a wait) and the time, and returns the next [`Effect`]: a [`Call`] to
//! make, a wait until an instant, or the end (a [`MoveReport`] or a
//! [`MoveError`]). It makes one call at a time and touches no socket and no
//! clock, so the same code runs in `seqctl` (whose executor makes the calls
//! with the real store and AllocSvr clients), in the seeded simulation
//! (whose executor sends them over its simulated network, perturbed by its
//! knobs) and in the golden scripts (`src/mover/testdata`).
//!
//! The steps:
//! 1. read the directory and plan: resume the move under way if it is this
//!    one, report it done (copying the directory again), or refuse;
//! 2. **begin** — the home group records the move; the directory is copied
//!    to every other set, and the source and the destination must have
//!    taken it (each judges the freeze and the install by its own copy);
//! 3. **freeze** — the source freezes the sections: no owner, a new epoch,
//!    ceilings final (returned with the source's lease + margin);
//! 4. **release** — every AllocSvr incarnation the freeze's reply names
//!    (the leader that applied it names each one whose lease it does not
//!    see certainly expired, fenced ones included) is told to stop serving
//!    them, and must confirm as that id and incarnation; if one does not,
//!    or a freeze reply named nobody (an older store), wait the lease +
//!    margin from the freeze, after which none serves them anyway;
//! 5. **install** — the declared counters of the sections are read from
//!    the source (fenced by the freeze: none changes there any more) and
//!    copied to the destination, page by page; then the destination
//!    installs each section at its final ceiling (the store adds a step),
//!    so it has the declarations before it serves a section;
//! 6. **claim** — read the sections back every [`POLL`] until each has an
//!    owner that claimed it, nudging owners to renew at once (at most every
//!    [`NUDGE`]); [`CLAIM_TIMEOUT`] at most;
//! 7. **finish** — the home group flips the range; the new directory is
//!    copied to every other set.
//!
//! Only after step 4 may the destination serve (step 5): at no time do two
//! sets serve a section, and the destination starts above every number the
//! source handed out (promise 1). Every step is idempotent in the stores,
//! so running the same command again after any crash finishes the move or
//! reports it finished.

mod machine;
mod report;
#[cfg(test)]
mod tests;

use std::time::Duration;

use crate::counter::CounterDecl;
use crate::directory::{DirChange, Directory, SetCall, SetId};
use crate::section::SectionId;

pub use machine::Mover;
pub use report::MoveReport;

/// One declared counter as a move copies it: the name and its
/// declaration (docs/counters.md, Declared counters).
pub type Declared = (Vec<u8>, CounterDecl);

/// Most declarations one read of the source returns, and so one copy to
/// the destination carries (a name is at most 256 bytes: a copy stays
/// well below a log entry's and a message's limits).
pub const COUNTERS_PER_CALL: u32 = 1000;

/// How long the destination may take to claim the installed sections.
pub const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the claim step reads the sections back.
pub const POLL: Duration = Duration::from_millis(10);
/// How often, at most, the claim step nudges the owners to renew.
pub const NUDGE: Duration = Duration::from_millis(100);

/// A step of the move, for `--stop-after` (tests and drills stop the
/// mover there, then crash nodes and run it again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// The home group recorded the move (and the copies were sent).
    Begin,
    /// The source froze the sections.
    Freeze,
    /// The source's AllocSvrs released them (or the leases ran out).
    Release,
    /// The destination installed them.
    Install,
    /// The destination's AllocSvrs claimed them.
    Claim,
    /// The directory flipped (the last step: stopping after it is
    /// finishing).
    Finish,
}

impl Step {
    /// The step's name, as `--stop-after` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Step::Begin => "begin",
            Step::Freeze => "freeze",
            Step::Release => "release",
            Step::Install => "install",
            Step::Claim => "claim",
            Step::Finish => "finish",
        }
    }
}

/// A move command: `seqctl set move --range begin..end --to to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveCmd {
    /// First uid.
    pub begin: u64,
    /// One past the last uid.
    pub end: u64,
    /// The destination set.
    pub to: SetId,
    /// End the run after this step (`--stop-after`).
    pub stop_after: Option<Step>,
}

/// Why the mover asks a store leader's status. (The release's list comes
/// from the freeze's own reply, never from a status: see [`Holder`].)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFor {
    /// The destination's AllocSvrs' admin addresses, to nudge owners.
    Nudge,
}

/// A call the mover asks its executor to make; the answer comes back as an
/// [`Answer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// Read the directory (the home group's, never an older copy).
    /// Answer: [`Answer::Directory`].
    ReadDirectory,
    /// A directory change in the home group. Answer: [`Answer::Changed`].
    ChangeDirectory(DirChange),
    /// Copy `dir` to `set`'s group. Answer: [`Answer::Copied`].
    CopyDirectory {
        /// The set.
        set: SetId,
        /// The directory.
        dir: Directory,
    },
    /// Freeze `first..first+count` in `call.set`. Answer:
    /// [`Answer::Frozen`].
    Freeze {
        /// First section (of the source's span).
        first: SectionId,
        /// How many.
        count: u32,
        /// The move as the source judges it.
        call: SetCall,
    },
    /// The status of `set`'s leader, with its list of AllocSvrs. Answer:
    /// [`Answer::Leader`].
    LeaderStatus {
        /// The set.
        set: SetId,
        /// What the list is for.
        purpose: StatusFor,
    },
    /// Tell AllocSvr `alloc` to stop serving sections `first..` frozen at
    /// `epochs`, and never to install an older grant for them. Answer:
    /// [`Answer::Released`], naming who confirmed.
    Release {
        /// The AllocSvr.
        alloc: String,
        /// The incarnation the freeze named: only its confirmation counts.
        incarnation: u64,
        /// Its admin-plane address.
        admin_addr: String,
        /// First section.
        first: SectionId,
        /// Per section from `first`, the epoch it is frozen at.
        epochs: Vec<u64>,
    },
    /// Read the declared counters of sections `first..first+count` of
    /// `set` (the source, after the freeze), by name after `after`, at
    /// most [`COUNTERS_PER_CALL`]. Answer: [`Answer::Counters`].
    ReadCounters {
        /// The set.
        set: SetId,
        /// First section (of the source's span).
        first: SectionId,
        /// How many.
        count: u32,
        /// The last name of the previous page (empty: from the first).
        after: Vec<u8>,
    },
    /// Copy declarations into `call.set` (the destination), before the
    /// install: the names after `after` and up to `through` (`None`: to
    /// the last) of the move's sections not served there yet take exactly
    /// `counters`. Answer: [`Answer::CountersCopied`].
    CopyCounters {
        /// The move as the destination judges it.
        call: SetCall,
        /// The page's lower bound (exclusive; empty: from the first name).
        after: Vec<u8>,
        /// The page's upper bound (inclusive; `None`: to the last name).
        through: Option<Vec<u8>>,
        /// The source's declarations of the names in those bounds.
        counters: Vec<Declared>,
    },
    /// Install `first..` in `call.set` at `floors` (the source's final
    /// ceilings; the store adds a step). Answer: [`Answer::Installed`].
    Install {
        /// First section (of the destination's span).
        first: SectionId,
        /// Per section, its final ceiling in the source.
        floors: Vec<u64>,
        /// The move as the destination judges it.
        call: SetCall,
    },
    /// Read sections `first..first+count` of `set` (client plane). Answer:
    /// [`Answer::Sections`].
    ReadSections {
        /// The set.
        set: SetId,
        /// First section.
        first: SectionId,
        /// How many.
        count: u32,
    },
    /// Ask AllocSvr `alloc` to renew now. Answer: [`Answer::Refreshed`]
    /// (whatever happened).
    Refresh {
        /// The AllocSvr.
        alloc: String,
        /// Its admin-plane address.
        admin_addr: String,
    },
}

/// One AllocSvr as a store leader's status lists it (to nudge owners).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocRef {
    /// Its id.
    pub id: String,
    /// Its admin-plane address.
    pub admin_addr: String,
    /// Fenced by an operator (it serves nothing).
    pub fenced: bool,
}

/// An AllocSvr incarnation that may still hold frozen sections, as the
/// leader that applied the freeze names it in the freeze's reply: one
/// registered there whose lease that leader does not see certainly
/// expired by its own clock. Fenced ones are named too: a fence is a mark
/// in the store, and the fenced process serves until it hears of it or its
/// lease runs out.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Holder {
    /// Its id.
    pub id: String,
    /// The incarnation registered.
    pub incarnation: u64,
    /// Its admin-plane address.
    pub admin_addr: String,
    /// Fenced by an operator (for the report: it must confirm all the same).
    pub fenced: bool,
}

/// Who confirmed a release: the AllocSvr's reply names its id and the
/// incarnation of the process that answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmed {
    /// The id.
    pub alloc: String,
    /// The incarnation (0: the AllocSvr did not say, an older version).
    pub incarnation: u64,
}

/// A section as read back in the claim step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// Its owner, if routed.
    pub owner: Option<String>,
    /// The owner incarnation the epoch was granted to (0: not claimed).
    pub incarnation: u64,
}

/// What came back: the answer to the last [`Call`], or the end of a wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The directory.
    Directory(Directory),
    /// The directory after a change.
    Changed(Directory),
    /// A copy was taken, or why not.
    Copied(Result<(), String>),
    /// A freeze's reply.
    Frozen {
        /// Per section, its final ceiling.
        finals: Vec<u64>,
        /// Per section, the epoch it is frozen at.
        epochs: Vec<u64>,
        /// How many this call froze (0: a repeat).
        newly: u32,
        /// How long after the reply no AllocSvr of the source serves the
        /// sections, released or not (the group's lease + margin).
        lease_expiry: Duration,
        /// The AllocSvr incarnations that may still hold the sections, as
        /// the leader that applied the freeze names them; `None` if the
        /// reply names none (a store of an older version): then every
        /// lease is waited for.
        holders: Option<Vec<Holder>>,
    },
    /// The leader's AllocSvrs, or `None` if no leader answered.
    Leader(Option<Vec<AllocRef>>),
    /// A release was confirmed (by whom), or why not (an error, no answer
    /// in time).
    Released(Result<Confirmed, String>),
    /// A page of the source's declared counters, by name, and whether
    /// more follow.
    Counters {
        /// The declarations.
        counters: Vec<Declared>,
        /// More follow after the last.
        more: bool,
    },
    /// A copy's reply: how many declarations it changed at the
    /// destination (0: a repeat).
    CountersCopied(u32),
    /// An install's reply: how many sections it changed.
    Installed(u32),
    /// Sections read back.
    Sections(Vec<Claimed>),
    /// A nudge was sent (its outcome does not matter).
    Refreshed,
    /// The wait asked for is over.
    Woke,
    /// A store call failed.
    Failed(CallError),
}

/// A failed store call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    /// The store refused (a typed refusal), rather than not answering.
    pub rejected: bool,
    /// What it said.
    pub message: String,
}

/// What the mover wants next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Make this call and hand back its answer.
    Call(Call),
    /// Hand back [`Answer::Woke`] at this instant (on the clock `on` is
    /// given).
    WaitUntil(Duration),
    /// The move is finished (or was already).
    Done(MoveReport),
    /// The run ended without finishing the move.
    Failed(MoveError),
}

/// Why a run ended without finishing the move.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoveError {
    /// The move cannot be run as given; nothing changed.
    #[error("{0}")]
    Refused(String),
    /// A store call failed (`what`: the step); running the command again
    /// resumes the move.
    #[error("{what}: {}", .error.message)]
    Call {
        /// The step whose call failed.
        what: &'static str,
        /// The failure.
        error: CallError,
    },
    /// A set the move needs did not take the directory copy showing it.
    #[error(
        "set {set} did not take the directory copy that shows the move: {why} \
         (its store group judges the command by that copy; run the command again)"
    )]
    CopyMissing {
        /// The set.
        set: SetId,
        /// Why.
        why: String,
    },
    /// The destination did not claim every section in time.
    #[error(
        "{sections} sections still unclaimed in the destination after {CLAIM_TIMEOUT:?}: \
         does it have live AllocSvrs? (run the command again once it does)"
    )]
    Unclaimed {
        /// Sections unowned or not yet claimed.
        sections: usize,
    },
    /// Stopped on purpose after a step (`--stop-after`).
    #[error("stopped after step {} as asked", .0.name())]
    Stopped(Step),
}
