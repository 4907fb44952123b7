//! Table and property tests of layouts and the generator, with the clock
//! passed in.

use proptest::prelude::*;

use super::*;

const T0: u64 = layout::SEQSVR_EPOCH_MS + 1_000_000;

fn layout(time: u32, worker: u32, seq: u32) -> Layout {
    Layout {
        time_bits: time,
        worker_bits: worker,
        seq_bits: seq,
        epoch_ms: layout::SEQSVR_EPOCH_MS,
        unit_ms: 1,
        js_safe: false,
        order: Order::TimeWorkerSeq,
    }
}

#[test]
fn layouts_are_validated() {
    let js = |mut l: Layout| {
        l.js_safe = true;
        l
    };
    let unit = |mut l: Layout, u| {
        l.unit_ms = u;
        l
    };
    let table: Vec<(Layout, bool)> = vec![
        (Layout::twitter(), true),
        (Layout::sonyflake(), true),
        (Layout::js53(), true),
        (layout(41, 10, 12), true),
        (layout(41, 10, 13), false), // 64 bits: the sign bit
        (layout(0, 10, 12), false),
        (layout(41, 0, 12), false),
        (layout(41, 10, 0), false),
        (js(layout(41, 10, 12)), false), // 63 > 53
        (js(layout(31, 10, 12)), true),
        (unit(layout(41, 10, 12), 0), false),
        (unit(layout(41, 10, 12), layout::MAX_UNIT_MS + 1), false),
        (unit(layout(60, 1, 1), layout::MAX_UNIT_MS), false), // past u64 ms
    ];
    for (l, ok) in table {
        assert_eq!(l.validate().is_ok(), ok, "{l:?}: {:?}", l.validate());
    }
}

#[test]
fn run_out_dates() {
    let end = |l: Layout| format_unix_ms(l.end_ms().unwrap());
    assert_eq!(end(Layout::twitter()), "2080-07-10T17:30:30.209Z");
    assert_eq!(end(Layout::sonyflake()), "2188-11-16T03:28:58.880Z");
    // Baidu uid-generator's default: 28 bits of seconds from 2016-05-20
    // ran out on 2024-11-20 21:24:16 at UTC+8.
    let uidgen = Layout {
        time_bits: 28,
        worker_bits: 22,
        seq_bits: 13,
        epoch_ms: 1_463_673_600_000, // 2016-05-20T00:00Z
        unit_ms: 1000,
        js_safe: false,
        order: Order::TimeWorkerSeq,
    };
    assert_eq!(end(uidgen), "2024-11-20T13:24:16.000Z");
}

#[test]
fn encode_refuses_fields_out_of_range() {
    let l = Layout::twitter();
    assert_eq!(
        l.encode(5, 1024, 0),
        Err(IdError::WorkerOutOfRange {
            worker: 1024,
            max: 1023
        })
    );
    assert!(l.encode(5, 1, 4096).is_err());
    assert!(matches!(
        l.encode(l.max_tick() + 1, 1, 0),
        Err(IdError::TimeExhausted { .. })
    ));
    assert_eq!(
        l.decode(1 << 63),
        Err(IdError::NotInLayout {
            id: 1 << 63,
            bits: 63
        })
    );
    assert!(Generator::new(l, 1024, 0, 10, 0).is_err());
}

#[test]
fn sonyflake_order_puts_the_worker_low() {
    let l = Layout::sonyflake();
    let id = l.encode(3, 0x1234, 5).unwrap();
    assert_eq!(id, (3 << 24) | (5 << 16) | 0x1234);
    let d = l.decode(id).unwrap();
    assert_eq!((d.tick, d.worker, d.seq), (3, 0x1234, 5));
}

fn gen(l: Layout, floor: u64, ceiling: u64, borrow: u64) -> Generator {
    Generator::new(l, 3, floor, ceiling, borrow).unwrap()
}

#[test]
fn sequence_then_next_tick_then_clock_behind() {
    let l = layout(41, 2, 2); // 4 ids a tick
    let now = l.tick_of(T0);
    let mut g = gen(l, 0, now + 100, 2);
    let mut ids = Vec::new();
    // 4 at `now`, 4 borrowed at now+1, 4 at now+2, then refused: the
    // clock stands still and the borrow is 2 ticks.
    for _ in 0..12 {
        ids.push(g.next(T0).unwrap());
    }
    assert_eq!(g.next(T0), Err(IdError::ClockBehind { behind_ms: 1 }));
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let ticks: Vec<u64> = ids
        .iter()
        .map(|&i| l.decode(i).unwrap().tick - now)
        .collect();
    assert_eq!(ticks, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
    // One ms later it issues again, above everything so far.
    let next = g.next(T0 + 1).unwrap();
    assert!(next > *ids.last().unwrap());
    assert_eq!(g.stats().clock_behind, 1);
}

#[test]
fn clock_going_back_while_running_never_repeats() {
    let l = layout(41, 2, 4); // 16 ids a tick
    let mut g = gen(l, 0, l.tick_of(T0) + 10_000, 5);
    let a = g.next(T0 + 1000).unwrap();
    // The clock steps back one second: the last tick's sequence, then
    // "clock behind" (the next tick is more than 5 ticks ahead of the
    // clock) — never an id at or below `a`, never a spin.
    let mut got = vec![a];
    let err = loop {
        match g.next(T0) {
            Ok(id) => got.push(id),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, IdError::ClockBehind { behind_ms } if behind_ms == 996));
    assert_eq!(got.len(), 16);
    assert!(got.windows(2).all(|w| w[0] < w[1]));
    assert!(g.stats().clock_back > 0);
}

#[test]
fn never_above_the_ceiling() {
    let l = layout(41, 2, 2);
    let now = l.tick_of(T0);
    let mut g = gen(l, 0, now - 10, 1000);
    // The clock is past the ceiling: ids carry the ceiling's tick, then
    // the generator waits for a raise.
    for _ in 0..4 {
        let id = g.next(T0).unwrap();
        assert_eq!(l.decode(id).unwrap().tick, now - 10);
    }
    assert_eq!(
        g.next(T0),
        Err(IdError::CeilingReached { ceiling: now - 10 })
    );
    assert_eq!(g.wants_raise(T0, 50), Some(now + 50));
    g.set_ceiling(now + 50);
    g.set_ceiling(now); // a late, older answer lowers nothing
    assert_eq!(g.ceiling(), now + 50);
    assert_eq!(l.decode(g.next(T0).unwrap()).unwrap().tick, now);
    assert_eq!(g.wants_raise(T0, 50), None);
    assert_eq!(g.wants_raise(T0 + 30, 50), Some(now + 80));
}

#[test]
fn a_restart_with_the_clock_set_back_starts_above_the_ceiling() {
    let l = layout(41, 2, 4);
    let now = l.tick_of(T0);
    let ceiling = now + 3000; // raised 3 s ahead
    let mut first = gen(l, 0, ceiling, 5);
    let mut before = Vec::new();
    first.next_n(T0, 40, &mut before).unwrap();
    // Same worker id, new process, clock set back an hour: it starts at
    // the old ceiling plus one.
    let back = T0 - 3_600_000;
    let mut second = gen(l, ceiling + 1, ceiling + 1 + 3000, 5);
    let mut after = Vec::new();
    second.next_n(back, 40, &mut after).unwrap();
    assert!(after[0] > *before.last().unwrap());
    assert_eq!(l.decode(after[0]).unwrap().tick, ceiling + 1);
    // It borrows from its floor, then refuses until the clock catches up.
    let mut rest = Vec::new();
    let err = second.next_n(back, 1000, &mut rest);
    assert!(err.is_ok() && rest.len() == 16 * 6 - 40);
    assert!(matches!(
        second.next(back),
        Err(IdError::ClockBehind { .. })
    ));
}

#[test]
fn next_n_returns_a_short_batch_at_a_limit() {
    let l = layout(41, 2, 2);
    let mut g = gen(l, 0, l.tick_of(T0) + 100, 1);
    let mut out = Vec::new();
    g.next_n(T0, 100, &mut out).unwrap();
    assert_eq!(out.len(), 8);
    assert!(matches!(
        g.next_n(T0, 1, &mut out),
        Err(IdError::ClockBehind { .. })
    ));
}

proptest! {
    /// Whatever the clock does (forward, back, jumps) and whenever the
    /// ceiling is raised, one worker's ids strictly increase, decode to
    /// its worker id, and never carry a tick above the ceiling in force.
    #[test]
    fn one_worker_strictly_increases(
        steps in prop::collection::vec((-2000i64..2000, 0u64..4, 0u64..3000), 1..300),
        borrow in 0u64..20,
    ) {
        let l = layout(41, 3, 3);
        let mut now = T0 as i64;
        let mut g = Generator::new(l, 5, l.tick_of(T0), l.tick_of(T0) + 50, borrow).unwrap();
        let mut last = 0u64;
        let mut latest = now;
        for (dt, n, raise) in steps {
            now += dt;
            latest = latest.max(now);
            if raise > 1500 {
                if let Some(to) = g.wants_raise(now as u64, raise) {
                    g.set_ceiling(to);
                }
            }
            for _ in 0..n {
                if let Ok(id) = g.next(now as u64) {
                    prop_assert!(id > last, "{id} after {last}");
                    let d = l.decode(id).unwrap();
                    prop_assert_eq!(d.worker, 5);
                    prop_assert!(d.tick <= g.ceiling());
                    // At most `borrow` ticks ahead of the latest clock reading.
                    prop_assert!(d.tick <= l.tick_of(latest as u64).max(g.floor()) + borrow);
                    last = id;
                }
            }
        }
    }

    /// Encode and decode are inverse on every field in range.
    #[test]
    fn decode_undoes_encode(
        tick in 0u64..(1 << 41), worker in 0u64..1024, seq in 0u64..4096, sony in any::<bool>(),
    ) {
        let l = if sony { Layout { time_bits: 41, worker_bits: 10, seq_bits: 12, order: Order::TimeSeqWorker, ..Layout::twitter() } } else { Layout::twitter() };
        let d = l.decode(l.encode(tick, worker, seq).unwrap()).unwrap();
        prop_assert_eq!((d.tick, d.worker, d.seq), (tick, worker, seq));
        prop_assert_eq!(d.unix_ms, l.epoch_ms + tick);
    }
}
