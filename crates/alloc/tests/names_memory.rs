//! Named counters' memory and skips (`docs/benchmarks.md`, Named
//! counters): bytes per name held at 10^6 and 10^7 names on one allocator
//! serving the whole name range, and how often names are recreated (and
//! how many numbers they skip) when the names called outnumber the bound.
//! Prints figures; asserts only what must hold whatever the machine (the
//! bound, and that recreated names never went back).
//!
//! Run (release, one at a time):
//! `cargo test --release -p seqsvr-alloc --test names_memory -- --ignored --nocapture --test-threads 1`

use std::sync::Arc;

use seqsvr_alloc::mem::MemCeilingStore;
use seqsvr_alloc::{AllocConfig, AllocError, Allocator, Raiser, RaiserConfig};
use seqsvr_core::rng::splitmix64;
use seqsvr_core::{SetSpec, NAME_KEYS};

/// One set over the whole name range, 16 sections, a large step.
fn spec() -> SetSpec {
    SetSpec {
        set_id: 0,
        uid_begin: NAME_KEYS.start,
        uid_end: NAME_KEYS.end,
        section_size: 1 << 16,
        step: 1_000_000,
    }
}

/// Bytes malloc handed out and not yet freed (glibc's own count).
fn malloc_bytes() -> u64 {
    // SAFETY: mallinfo2 only reads malloc's statistics.
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks + m.hblkhd) as u64
}

struct Served {
    rt: tokio::runtime::Runtime,
    alloc: Arc<Allocator>,
    raiser: Raiser<MemCeilingStore>,
}

impl Served {
    fn new(max_names: usize) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let cfg = AllocConfig {
            max_names,
            ..AllocConfig::default()
        };
        let alloc = Arc::new(Allocator::new(spec(), &cfg).unwrap());
        let store = Arc::new(MemCeilingStore::new(spec()));
        let raiser = Raiser::new(alloc.clone(), store, RaiserConfig::default());
        rt.block_on(raiser.take_over(0, spec().section_count()))
            .unwrap();
        Served { rt, alloc, raiser }
    }

    fn next(&self, name: &[u8]) -> u64 {
        loop {
            match self.alloc.next_name(name) {
                Ok(v) => return v,
                Err(AllocError::Exhausted { .. }) => {
                    self.rt.block_on(self.raiser.run_once());
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}

#[test]
#[ignore = "a benchmark: prints figures (see the module docs)"]
fn bytes_per_name_held() {
    for count in [1_000_000u64, 10_000_000] {
        // Room to spare: each of the table's 64 shards holds a 64th of
        // the bound, so with the bound exactly `count` the fullest shard
        // would start forgetting a little before the total reaches it.
        let s = Served::new(2 * count as usize);
        let before = malloc_bytes();
        for i in 0..count {
            s.next(format!("order:{i}").as_bytes());
        }
        let after = malloc_bytes();
        let st = s.alloc.stats().names;
        assert_eq!((st.held, st.forgotten), (count, 0));
        println!(
            "names held {count:>10}: {:>6.1} bytes a name (malloc {} MB; names of 7-14 bytes)",
            (after - before) as f64 / count as f64,
            (after - before) >> 20
        );
    }
}

#[test]
#[ignore = "a benchmark: prints figures (see the module docs)"]
fn skips_when_names_outnumber_the_bound() {
    let bound = 100_000u64;
    let calls = 2_000_000u64;
    for (what, names, hot) in [
        ("uniform over 2x the bound", 2 * bound, 0),
        ("uniform over 10x the bound", 10 * bound, 0),
        (
            "90% of calls on 50% of the bound, rest over 10x",
            10 * bound,
            bound / 2,
        ),
    ] {
        let s = Served::new(bound as usize);
        let mut last = std::collections::HashMap::new();
        for c in 0..calls {
            let r = splitmix64(c);
            let i = if hot > 0 && !r.is_multiple_of(10) {
                (r >> 8) % hot
            } else {
                (r >> 8) % names
            };
            let v = s.next(format!("n:{i}").as_bytes());
            let prev = last.insert(i, v);
            assert!(prev.is_none_or(|p| p < v), "n:{i} went back");
        }
        let st = s.alloc.stats().names;
        assert!(st.held <= bound);
        let recreated = st.created - last.len() as u64;
        println!(
            "{what:<48} calls {calls}, names {}: recreated {recreated} ({:.1}% of calls), \
             skipped {:.0} numbers a recreation, ceiling {}",
            last.len(),
            100.0 * recreated as f64 / calls as f64,
            st.skipped as f64 / recreated.max(1) as f64,
            (0..spec().section_count())
                .filter_map(|x| s.alloc.section_state(x))
                .map(|x| x.ceiling)
                .max()
                .unwrap_or(0)
        );
    }
}
