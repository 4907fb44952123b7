use std::time::{Duration, Instant};

use seqsvr_core::LeaseTerms;

use super::*;
use crate::arbiter::ArbiterConfig;
use crate::state::{AllocRecord, SectionRecord};

const T: LeaseTerms = LeaseTerms {
    lease_ms: 5000,
    margin_ms: 1000,
};

/// A set whose sections are owned as `owners` says (`.` for none), one
/// letter per section, and whose AllocSvrs are `allocs`.
fn state(owners: &str, allocs: &[&str]) -> SetState {
    SetState {
        set: Some(seqsvr_core::SetSpec::new(
            0,
            0..owners.len() as u64 * 100_000,
        )),
        sections: owners
            .chars()
            .map(|c| SectionRecord {
                owner: (c != '.').then(|| c.to_string()),
                incarnation: 1,
                ..Default::default()
            })
            .collect(),
        allocs: allocs
            .iter()
            .map(|id| {
                let rec = AllocRecord {
                    addr: format!("{id}:1"),
                    admin_addr: format!("{id}:3"),
                    incarnation: 1,
                    ..Default::default()
                };
                (id.to_string(), rec)
            })
            .collect(),
        route_version: 1,
        ..Default::default()
    }
}

fn cfg(limit: u32) -> RebalanceConfig {
    RebalanceConfig {
        enabled: true,
        sections_per_interval: limit,
        interval_ms: 1000,
    }
}

/// An arbiter in office since `t0`, `live` renewing until `until_ms`.
fn arbiter(t0: Instant, live: &[&str], until_ms: u64) -> Arbiter {
    let a = Arbiter::new(ArbiterConfig { tick_ms: 100 });
    a.observe(Some(1), t0);
    for ms in (0..=until_ms).step_by(500) {
        for id in live {
            a.granted(id, 1, t0 + Duration::from_millis(ms), T);
        }
    }
    a
}

/// A plan as text: `from>to:sections` per giver, e.g. `a>b:6,7`.
fn show(batches: &[Batch]) -> Vec<String> {
    batches
        .iter()
        .map(|b| {
            let mut by_to: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for (s, to) in &b.moves {
                by_to.entry(to).or_default().push(s.to_string());
            }
            let parts: Vec<String> = (by_to.into_iter())
                .map(|(to, ss)| format!("{}>{to}:{}", b.from, ss.join(",")))
                .collect();
            parts.join(" ")
        })
        .collect()
}

#[test]
fn evens_out_a_returning_allocsvr_in_bounded_batches() {
    // a took over everything while b was down; b is back and renewing.
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    let a = arbiter(t0, &["a", "b"], 30_000);
    let st = state("aaaaaaaa", &["a", "b"]);
    // Not before the office's first lease + margin.
    assert!(a.rebalance(&st, &cfg(3), at(5999)).is_empty());
    let plan = a.rebalance(&st, &cfg(3), at(6000));
    assert_eq!(show(&plan), ["a>b:5,6,7"]);
    assert_eq!(
        plan[0].admin_addr, "a:3",
        "asked of the giver's admin plane"
    );
    // Bounded rate: nothing more within the interval, even on a state
    // that is still uneven.
    assert!(a.rebalance(&st, &cfg(3), at(6999)).is_empty());
    let st = state("aaaaabbb", &["a", "b"]);
    assert_eq!(show(&a.rebalance(&st, &cfg(3), at(7000))), ["a>b:4"]);
    let st = state("aaaabbbb", &["a", "b"]);
    assert!(a.rebalance(&st, &cfg(3), at(8000)).is_empty(), "even");
}

#[test]
fn table_of_plans() {
    // (owners, registered, live, expected plan with a budget of 64)
    type Row<'a> = (&'a str, &'a [&'a str], &'a [&'a str], &'a [&'a str]);
    let table: &[Row] = &[
        // Within one of even: nothing moves.
        ("aaabb", &["a", "b"], &["a", "b"], &[]),
        ("aabbc", &["a", "b", "c"], &["a", "b", "c"], &[]),
        // Two returning AllocSvrs share one giver's surplus; the least
        // loaded first, the giver's last sections.
        (
            "aaaaaaaaab",
            &["a", "b", "c"],
            &["a", "b", "c"],
            &["a>b:7,8 a>c:4,5,6"],
        ),
        // Two givers, one taker.
        (
            "aaaabbbb",
            &["a", "b", "c"],
            &["a", "b", "c"],
            &["a>c:3", "b>c:7"],
        ),
        // A dead owner: failover first, no rebalance.
        ("aaaabbbb", &["a", "b", "c"], &["a", "c"], &[]),
        // An unowned section: routed by the arbiter's plan first.
        ("aaaa.", &["a", "b"], &["a", "b"], &[]),
        // An owner nobody registered: the same.
        ("xxxx", &["a", "b"], &["a", "b"], &[]),
        // Only one live AllocSvr.
        ("aaaa", &["a", "b"], &["a"], &[]),
    ];
    for (owners, registered, live, want) in table {
        let t0 = Instant::now();
        let a = arbiter(t0, live, 10_000);
        let st = state(owners, registered);
        let got = a.rebalance(&st, &cfg(64), t0 + Duration::from_millis(9000));
        assert_eq!(show(&got), *want, "{owners} live {live:?}");
    }
}

#[test]
fn draining_fenced_stopped_and_moved_away_take_no_part() {
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    let a = arbiter(t0, &["a", "b", "c"], 10_000);
    // c is draining: it owns nothing, and gets nothing.
    let mut st = state("aaaaaabb", &["a", "b", "c"]);
    st.allocs.get_mut("c").unwrap().draining = true;
    assert_eq!(show(&a.rebalance(&st, &cfg(64), at(6000))), ["a>b:4,5"]);
    // A draining owner: its drain is under way; nothing moves.
    let mut st = state("aaaaaacc", &["a", "b", "c"]);
    st.allocs.get_mut("c").unwrap().draining = true;
    assert!(a.rebalance(&st, &cfg(64), at(7000)).is_empty());
    // Fenced or stopped: not a taker.
    for how in ["fenced", "stopped"] {
        let mut st = state("aaaaaabb", &["a", "b", "c"]);
        let c = st.allocs.get_mut("c").unwrap();
        match how {
            "fenced" => c.fenced = true,
            _ => c.incarnation = 0,
        }
        let got = a.rebalance(&st, &cfg(64), at(8000 + 1000 * u64::from(how == "stopped")));
        assert_eq!(show(&got), ["a>b:4,5"], "{how}");
    }
    // A section routed but not claimed yet (incarnation 0 after an
    // `Assign`, or an earlier process's): claims first.
    let mut st = state("aaaaaabb", &["a", "b"]);
    st.sections[7].incarnation = 0;
    assert!(a.rebalance(&st, &cfg(64), at(9500)).is_empty());
    st.sections[7].incarnation = 2;
    assert!(a.rebalance(&st, &cfg(64), at(9500)).is_empty());
    // Sections this set does not serve are not counted.
    let mut st = state("aaaaaabb", &["a", "b"]);
    st.placement.set(2..6, seqsvr_core::Place::Moved { to: 1 });
    assert!(a.rebalance(&st, &cfg(64), at(10_000)).is_empty());
}

#[test]
fn off_or_out_of_office_plans_nothing() {
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    let a = arbiter(t0, &["a", "b"], 10_000);
    let st = state("aaaaaaaa", &["a", "b"]);
    let off = RebalanceConfig {
        enabled: false,
        ..cfg(64)
    };
    assert!(a.rebalance(&st, &off, at(9000)).is_empty());
    a.observe(None, at(9001));
    assert!(a.rebalance(&st, &cfg(64), at(9002)).is_empty());
    // A new office waits its lease + margin again.
    a.observe(Some(2), at(10_000));
    a.granted("a", 2, at(15_500), T);
    a.granted("b", 2, at(15_500), T);
    assert!(a.rebalance(&st, &cfg(64), at(15_999)).is_empty());
    assert_eq!(
        show(&a.rebalance(&st, &cfg(64), at(16_000))),
        ["a>b:4,5,6,7"]
    );
}

#[test]
fn bad_settings_are_refused() {
    assert!(RebalanceConfig::default().validate().is_ok());
    for bad in [
        RebalanceConfig {
            interval_ms: 0,
            ..Default::default()
        },
        RebalanceConfig {
            sections_per_interval: 0,
            ..Default::default()
        },
        RebalanceConfig {
            sections_per_interval: crate::command::MAX_SECTIONS_PER_CALL + 1,
            ..Default::default()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}
