//! What every component of the model acts through: virtual time and the
//! event queue, the one random stream, the network, the checks, the
//! counters, and each set's committed state (what clients' route reads and
//! the checks see).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use seqsvr_store_core::state::SetState;

use crate::check::Monitor;
use crate::config::SimConfig;
use crate::model::{Ev, Msg};
use crate::net::{fmt_time, Net, Node, Time, MS};
use crate::rng::Rng;

/// Counters of one run, for the report.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Events processed.
    pub events: u64,
    /// Client calls that returned numbers.
    pub calls_ok: u64,
    /// Client calls that failed or timed out (after retries).
    pub calls_failed: u64,
    /// `Current` answers received.
    pub current_reads: u64,
    /// Numbers handed out by allocators (seen by clients or not).
    pub handed_out: u64,
    /// `LEASE_EXPIRED` answers.
    pub lease_expired: u64,
    /// Elections won.
    pub leaders_elected: u64,
    /// Committed log entries.
    pub committed: u64,
    /// Committed take-overs (sections).
    pub takeovers: u64,
    /// Committed raises.
    pub raises: u64,
    /// Committed section moves by an arbiter or operator (`Assign`).
    pub assigns: u64,
    /// Committed handoffs.
    pub handoffs: u64,
    /// Adopts installed.
    pub adopted: u64,
    /// Adopts refused (forged, late, repeated, or unconfirmed).
    pub adopts_refused: u64,
    /// Failed handoffs whose section the store still had at the released
    /// epoch: left dropped for a renewal's take-over (never served again at
    /// that epoch, bug 5).
    pub reclaimed: u64,
    /// Handoffs committed after their section moved to a newer epoch
    /// (a late or repeated copy), refused.
    pub handoffs_stale: u64,
    /// Registrations refused as twins.
    pub twins_refused: u64,
    /// Incarnations replaced by a newer one.
    pub replaced: u64,
    /// Processes that found themselves replaced or fenced.
    pub fenced: u64,
    /// Lease-terms changes committed.
    pub lease_changes: u64,
    /// Renewals granted.
    pub renewals: u64,
    /// Range moves begun in the directory.
    pub moves_begun: u64,
    /// Range moves finished (the directory flipped).
    pub moves_finished: u64,
    /// Move commands refused (another move under way, a range split
    /// between sets) or given up (the claim timed out).
    pub moves_refused: u64,
    /// Mover runs killed (stopped after a step or crashed).
    pub movers_killed: u64,
    /// Sections frozen in a source set.
    pub frozen: u64,
    /// Sections installed in a destination set.
    pub installed: u64,
    /// Moves whose release every source AllocSvr confirmed.
    pub releases_confirmed: u64,
    /// Moves that waited the source's lease + margin instead.
    pub lease_waits: u64,
    /// Sections AllocSvrs dropped on a move's release.
    pub released: u64,
    /// Client calls answered `MOVED` or `NOT_SERVED`.
    pub moved_answers: u64,
    /// Raises refused because their section was frozen for a move
    /// (`NOT_SERVED`/`MOVED`): retried until a route read or renewal drops
    /// the section.
    pub raises_not_served: u64,
    /// `Install`s committed with a move id older than one the group
    /// applied before (a stale mover's), and how many of them were
    /// refused (`SetState::check_move_id`, bug 6).
    pub stale_installs: u64,
    /// See `stale_installs`.
    pub stale_installs_refused: u64,
    /// A stale mover's copies of declared counters (sent before its
    /// install) that were refused: the destination's directory copy no
    /// longer shows its move, so the mover stops before it installs.
    pub stale_copies_refused: u64,
    /// `Assign`s refused because a section's epoch was not the expected one.
    pub assigns_stale: u64,
    /// `Current` calls that reached a process whose lease had lapsed while
    /// it still held the uid's section at an epoch its store had moved
    /// past (the fencing work's bug 5): refused for the lease, or, with
    /// `current_without_lease`, admitted.
    pub stale_reads_refused: u64,
    /// See `stale_reads_refused`.
    pub stale_reads_admitted: u64,
    /// AllocSvrs an operator fenced (`seqctl alloc fence`).
    pub operator_fences: u64,
    /// Additions run again (`seqctl set add`), how many the store
    /// refused, and how many sections they installed.
    pub additions_repeated: u64,
    /// See `additions_repeated`.
    pub additions_refused: u64,
    /// See `additions_repeated`.
    pub additions_installed: u64,
    /// Calls marked forwarded that a replica of another group sent in an
    /// AllocSvr's name: refused (not a member), or, with
    /// `forward_from_anyone`, taken.
    pub forwards_refused: u64,
    /// See `forwards_refused`.
    pub forwards_taken: u64,
}

/// An event with its time; ordered so the heap pops the earliest first,
/// ties broken by scheduling order (deterministic).
struct Scheduled {
    at: Time,
    seq: u64,
    /// Boxed: events are large, and the heap moves its entries around.
    ev: Box<Ev>,
}

impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// The shared environment of one run.
pub(crate) struct Env {
    /// Parameters of the run.
    pub cfg: SimConfig,
    /// Current virtual time.
    pub now: Time,
    /// The real `Instant` that virtual time 0 maps to (for the real
    /// components' clock arguments; only differences matter to them).
    pub base: Instant,
    /// The one random stream.
    pub rng: Rng,
    /// Links and delays.
    pub net: Net,
    /// Events to come.
    queue: BinaryHeap<Scheduled>,
    /// Tie-breaker for events.
    seq: u64,
    /// Source of fresh ids (entries, calls, barriers, operations).
    next_id: u64,
    /// Invariant checks.
    pub monitor: Monitor,
    /// Counters.
    pub stats: Stats,
    /// Per set, the committed state: the group's committed log applied in
    /// order (what the checks and clients' route reads see).
    pub truth: Vec<SetState>,
    /// The id checker and counters (empty unless ids are simulated).
    pub ids: crate::ids::check::IdMonitor,
}

/// Prints a trace line when the run is verbose (formats nothing otherwise).
macro_rules! trace {
    ($env:expr, $($arg:tt)*) => {
        if $env.cfg.verbose {
            $env.trace_line(format_args!($($arg)*));
        }
    };
}
pub(crate) use trace;

impl Env {
    /// The environment of `cfg` at time 0.
    pub(crate) fn new(cfg: SimConfig) -> Self {
        let mut rng = Rng::new(cfg.seed);
        let mut net = Net::default();
        net.delays = cfg.delays.clone();
        Env {
            now: 0,
            base: Instant::now(),
            rng: rng.fork(),
            net,
            queue: BinaryHeap::new(),
            seq: 0,
            next_id: 1,
            monitor: Monitor::new(&cfg.grid()),
            stats: Stats::default(),
            truth: vec![SetState::default(); cfg.sets.len()],
            ids: crate::ids::check::IdMonitor::new(
                (cfg.ids.iter().flat_map(|i| &i.spaces))
                    .map(|s| s.layout)
                    .collect(),
            ),
            cfg,
        }
    }

    /// A fresh id.
    pub(crate) fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Schedules `ev` at absolute time `at` (never in the past).
    pub(crate) fn schedule(&mut self, at: Time, ev: Ev) {
        self.seq += 1;
        let at = at.max(self.now);
        self.queue.push(Scheduled {
            at,
            seq: self.seq,
            ev: Box::new(ev),
        });
    }

    /// Schedules `ev` after `d`.
    pub(crate) fn after(&mut self, d: Time, ev: Ev) {
        self.schedule(self.now + d, ev);
    }

    /// The next event, if any before `end`; advances the clock to it.
    pub(crate) fn pop(&mut self, end: Time) -> Option<Ev> {
        let s = self.queue.pop()?;
        if s.at > end {
            return None;
        }
        self.now = s.at;
        Some(*s.ev)
    }

    /// Sends `msg` from `from` to `to`: dropped if the link is cut now,
    /// else delivered after a random delay (and dropped then if cut).
    pub(crate) fn send(&mut self, from: Node, to: Node, msg: Msg) {
        self.send_later(0, from, to, msg);
    }

    /// [`send`](Self::send), held back `extra` on top of the network's delay.
    pub(crate) fn send_later(&mut self, extra: Time, from: Node, to: Node, msg: Msg) {
        if !self.net.reaches(from, to) {
            return;
        }
        let d = self.net.delay(&mut self.rng, self.now, from, to);
        self.after(extra + d, Ev::Deliver { from, to, msg });
    }

    /// The real-component clock reading of the store replicas (exact).
    pub(crate) fn store_instant(&self) -> Instant {
        self.base + Duration::from_nanos(self.now)
    }

    /// A Raft election deadline (400–800 ms from now, as the store's
    /// defaults).
    pub(crate) fn election_timeout(&mut self) -> Time {
        self.now + self.rng.range(400 * MS, 800 * MS)
    }

    /// Prints one trace line (see `trace!`).
    pub(crate) fn trace_line(&self, args: std::fmt::Arguments<'_>) {
        println!("{:>12} {}", fmt_time(self.now), args);
    }
}
