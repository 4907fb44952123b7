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
        (unit(layout(41, 10, 12), 3), false),                 // not a listed unit
        (unit(layout(41, 10, 12), 1000), true),
        (layout(41, 10, 12).with_shards(1), false), // 64 bits with the shard
        (layout(38, 10, 12).with_shards(3), true),  // 63
        (layout(38, 10, 12).with_shards(4), false),
        (js(layout(30, 6, 8).with_shards(9)), true), // 53
        (js(layout(30, 6, 8).with_shards(10)), false),
        (layout(20, 4, 4).with_shards(layout::MAX_SHARD_BITS), true),
        (
            layout(20, 4, 4).with_shards(layout::MAX_SHARD_BITS + 1),
            false,
        ),
        (
            Layout {
                order: Order::Scattered {
                    seq_before_worker: false,
                    shard_bits: 0,
                },
                ..layout(41, 10, 12)
            },
            false,
        ),
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

#[test]
fn dates_parse_back() {
    for ms in [
        0,
        layout::TWITTER_EPOCH_MS,
        1_709_164_800_123,
        4_102_444_799_999,
    ] {
        assert_eq!(parse_unix_ms(&format_unix_ms(ms)), Some(ms));
    }
    assert_eq!(parse_unix_ms("2024-01-01"), Some(layout::SEQSVR_EPOCH_MS));
    assert_eq!(
        parse_unix_ms("1704067200000"),
        Some(layout::SEQSVR_EPOCH_MS)
    );
    for bad in [
        "",
        "2024-02-30",
        "2024-13-01",
        "2024-1-1",
        "yesterday",
        "2024-01-01T25:00:00Z",
    ] {
        assert_eq!(parse_unix_ms(bad), None, "{bad}");
    }
}

#[test]
fn units_come_from_a_fixed_list_and_epochs_from_the_past() {
    assert_eq!(Layout::unit_named("10ms"), Some(10));
    assert_eq!(Layout::unit_named("1s"), Some(1000));
    assert_eq!(Layout::unit_named("7ms"), None);
    let l = Layout::twitter();
    assert!(l.check_epoch(l.epoch_ms).is_ok());
    assert!(matches!(
        l.check_epoch(l.epoch_ms - 1),
        Err(IdError::InvalidLayout(why)) if why.contains("in the future")
    ));
    let end = l.end_ms().unwrap();
    assert!(l.check_epoch(end - 1).is_ok());
    assert!(matches!(
        l.check_epoch(end),
        Err(IdError::InvalidLayout(why)) if why.contains("ran out at 2080-07-10T17:30:30.209Z")
    ));
}

#[test]
fn scattering_spreads_one_worker_over_the_shards_and_decode_undoes_it() {
    let plain = layout(38, 10, 12);
    let l = plain.with_shards(3);
    assert_eq!((l.total_bits(), l.shards()), (63, 8));
    assert_eq!(l.with_shards(0), plain);
    let mut g = Generator::new(l, 7, 0, l.tick_of(T0) + 10_000, 0).unwrap();
    let mut per_shard = [0u32; 8];
    let mut ids = Vec::new();
    // One id per tick, as at a low rate: every sequence is 0, yet the ids
    // land on every shard.
    for t in 0..800 {
        let id = g.next(T0 + t).unwrap();
        per_shard[(id >> 60) as usize] += 1;
        ids.push(id);
    }
    assert!(
        per_shard.iter().all(|&n| (60..=140).contains(&n)),
        "{per_shard:?}"
    );
    // The raw ids are not in order; unscattered they are, and decode
    // gives back the worker id and ticks.
    assert!(!ids.windows(2).all(|w| w[0] < w[1]));
    let base: Vec<u64> = ids.iter().map(|&i| l.unscatter(i).unwrap()).collect();
    assert!(base.windows(2).all(|w| w[0] < w[1]));
    let d = l.decode(ids[5]).unwrap();
    assert_eq!((d.worker, d.tick, d.seq), (7, l.tick_of(T0 + 5), 0));
    // An id with the wrong shard bits is not one of this layout.
    let forged = ids[5] ^ (1 << 60);
    assert_eq!(
        l.decode(forged),
        Err(IdError::NotInLayout {
            id: forged,
            bits: 63
        })
    );
}

proptest! {
    /// Scattering is a bijection on the layout's ids: encode → decode
    /// round-trips every field, distinct fields give distinct ids, and
    /// every id stays within the layout's bits (below the sign bit).
    #[test]
    fn scattered_ids_round_trip_and_stay_unique(
        fields in prop::collection::vec((0u64..(1 << 30), 0u64..64, 0u64..256), 1..200),
        shard_bits in 1u32..=9,
        sony in any::<bool>(),
        js in any::<bool>(),
    ) {
        let mut l = layout(30, 6, 8).with_shards(shard_bits);
        l.js_safe = js;
        if sony {
            l = Layout { order: Order::Scattered { seq_before_worker: true, shard_bits }, ..l };
        }
        prop_assert!(l.validate().is_ok());
        let mut seen = std::collections::HashMap::new();
        for (tick, worker, seq) in fields {
            let id = l.encode(tick, worker, seq).unwrap();
            prop_assert!(id >> l.total_bits() == 0);
            let d = l.decode(id).unwrap();
            prop_assert_eq!((d.tick, d.worker, d.seq), (tick, worker, seq));
            if let Some(other) = seen.insert(id, (tick, worker, seq)) {
                prop_assert_eq!(other, (tick, worker, seq), "{} built twice", id);
            }
        }
    }

    /// The bits budget: a scattered layout is valid exactly when all its
    /// bits, shard bits included, fit in 63 (53 JavaScript-safe).
    #[test]
    fn the_bits_budget_counts_the_shard_bits(
        time in 1u32..50, worker in 1u32..20, seq in 1u32..20, shard in 1u32..=15, js in any::<bool>(),
    ) {
        let mut l = layout(time, worker, seq).with_shards(shard);
        l.js_safe = js;
        let max = if js { 53 } else { 63 };
        let fits = time + worker + seq + shard <= max;
        prop_assert_eq!(l.validate().is_ok(), fits, "{:?}", l.validate());
    }

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
