//! Scale: one set of 10^9 uids at 10^5 uids a section (10^4 sections) with
//! 3 store replicas and 3 AllocSvrs, real processes of the real binary on
//! loopback; and the store group alone at 10^4 and 10^5 sections.
//!
//! Run: `cargo bench -p seqsvr --bench scale -- [--phases LIST] [--secs N]
//! [--callers N] [--big SECTIONS]`. Prints figures; asserts
//! nothing about speed.
//!
//! Phases (`--phases renew,moves,…`; default all but none named twice), in
//! this order:
//!
//! - On a store group alone (3 replicas; the bench plays three AllocSvrs,
//!   `a1`–`a3`, on its peer plane, each first routed a third of the
//!   sections), at 10^4 sections and again at `--big` sections (default
//!   10^5; 0 skips it):
//!   - `renew`: encoded sizes of a renewal whose section list did not
//!     change and of one whose list did, and store CPU per renewal (process
//!     CPU from /proc over a closed loop of renewals, less the idle rate);
//!   - `moves`: `a3` stops renewing; time until the arbiter has routed its
//!     sections to `a1` and `a2`, the commands and Raft entries that took,
//!     the runs the new owners' lists hold, the longest renewal meanwhile;
//!     then `a1` takes over what it gained, in pieces of at most 1024
//!     sections sent together, as an AllocSvr does;
//!   - `raise`: everything routed to `a1` and taken over, then raises
//!     spread over every section (closed loop, `--callers`, default 32)
//!     through the store client, with the latency breakdown;
//!   - `snapshot`: a snapshot built through the admin plane on the leader
//!     and on a follower: size and time.
//! - On the whole set (3 store replicas and 3 AllocSvrs):
//!   - `start`: from process start until every section is served (always
//!     run when a later set phase is);
//!   - `rss`: on the AllocSvr serving the most sections, resident memory
//!     per uid served, and its growth per uid touched (all uids of 10
//!     sections; 100 uids in each of 1000 others);
//!   - `kill`: kill -9 of `alloc-3`; until the survivors serve every
//!     section;
//!   - `restart`: the running AllocSvr with the most sections killed, the
//!     others draining (so nothing moves to them); once its lease has
//!     expired it is started again: from the process start until it serves
//!     every section routed to it.
//!
//! The set phases use the default lease terms (5 s + 1 s); the store-only
//! ones the tests' (2 s + 0.5 s, renewals every 300 ms). The bench stops if
//! the AllocSvrs hold more than 16 GiB together.
//!
//! Files: this one holds the options and the driver; beside it in
//! `scale/`, `store.rs` runs the store-only phases, `set.rs` the set
//! phases, `probe.rs` reads processes, metrics and AllocSvr status; the
//! raise latency breakdown is the test kit's `stages`, shared with the
//! `store_raise` bench.

mod probe;
mod set;
mod store;

use seqsvr_testkit::Bins;

/// The binaries under test.
const BINS: Bins = seqsvr_testkit::bins!();

/// Uids a section holds.
pub const SECTION_SIZE: u64 = 100_000;
/// Sections of the set (10^9 uids).
pub const SECTIONS: u32 = 10_000;

/// Command-line options.
pub struct Args {
    /// The phases to run.
    pub phases: Vec<String>,
    /// Seconds measured per closed loop.
    pub secs: u64,
    /// Concurrent callers of the raise phase.
    pub callers: usize,
    /// Sections of the second store-only size (0: none).
    pub big: u32,
}

const STORE_PHASES: [&str; 4] = ["renew", "moves", "raise", "snapshot"];
const SET_PHASES: [&str; 4] = ["start", "rss", "kill", "restart"];

impl Args {
    fn parse() -> Args {
        let mut a = Args {
            phases: Vec::new(),
            secs: 5,
            callers: 32,
            big: 100_000,
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--phases" => {
                    let list = it.next().expect("--phases LIST");
                    a.phases = list.split(',').map(|p| p.trim().to_string()).collect();
                }
                "--secs" => a.secs = it.next().and_then(|v| v.parse().ok()).expect("--secs N"),
                "--callers" => {
                    a.callers = it.next().and_then(|v| v.parse().ok()).expect("--callers N")
                }
                "--big" => a.big = it.next().and_then(|v| v.parse().ok()).expect("--big N"),
                // `cargo bench` passes `--bench`; ignore it and anything else.
                _ => {}
            }
        }
        if a.phases.is_empty() {
            a.phases = STORE_PHASES
                .iter()
                .chain(&SET_PHASES)
                .map(|p| p.to_string())
                .collect();
        }
        for p in &a.phases {
            assert!(
                STORE_PHASES.contains(&p.as_str()) || SET_PHASES.contains(&p.as_str()),
                "unknown phase {p:?}; phases: {STORE_PHASES:?} {SET_PHASES:?}"
            );
        }
        a.secs = a.secs.max(1);
        a.callers = a.callers.max(1);
        a
    }

    /// Whether phase `p` runs.
    pub fn has(&self, p: &str) -> bool {
        self.phases.iter().any(|q| q == p)
    }
}

fn main() {
    let args = Args::parse();
    println!(
        "scale: {} (figures vary run to run); phases {}",
        seqsvr_testkit::machine_banner(),
        args.phases.join(",")
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if STORE_PHASES.iter().any(|p| args.has(p)) {
            for sections in [SECTIONS, args.big] {
                if sections > 0 {
                    store::run(&args, sections).await;
                }
            }
        }
        if SET_PHASES.iter().any(|p| args.has(p)) {
            set::run(&args).await;
        }
    });
}
