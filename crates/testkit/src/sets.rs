//! Two sets of real processes, as the set tests and the one-address tests
//! start them, and `seqctl` run against them.

use std::time::{Duration, Instant};

use seqsvr_core::SetSpec;

use crate::cluster::{SetCluster, StoreOptions};
use crate::process::Bins;

/// Set 0 serves `[0, 2000)` (20 sections of 100); set 1's span is
/// `[0, 4000)` so that it can take ranges of set 0, and it serves
/// `[2000, 4000)` once added.
pub fn set0() -> SetSpec {
    SetSpec {
        section_size: 100,
        step: 200,
        ..SetSpec::new(0, 0..2000)
    }
}

/// Set 1: see [`set0`].
pub fn set1() -> SetSpec {
    SetSpec {
        section_size: 100,
        step: 200,
        ..SetSpec::new(1, 0..4000)
    }
}

/// Set 2's span `[0, 6000)` covers set 1's range, so that it can take
/// ranges of set 1; it serves `[4000, 6000)` once added.
pub fn set2() -> SetSpec {
    SetSpec {
        section_size: 100,
        step: 200,
        ..SetSpec::new(2, 0..6000)
    }
}

/// Runs `seqctl args…` against `home`'s stores; returns (success,
/// stdout and stderr together).
pub fn seqctl(home: &SetCluster, args: &[&str]) -> (bool, String) {
    let r = home.seqctl(args);
    (r.ok(), format!("{}{}", r.out, r.err))
}

/// Two sets of 2 AllocSvrs each, set 1 added for `[2000, 4000)`.
pub async fn two_sets(bins: Bins) -> (SetCluster, SetCluster) {
    two_sets_forwarding(bins, true).await
}

/// [`two_sets`], the AllocSvrs forwarding or not.
pub async fn two_sets_forwarding(bins: Bins, forward: bool) -> (SetCluster, SetCluster) {
    two_sets_with(bins, StoreOptions::default(), forward).await
}

/// [`two_sets`], both store groups started with `opts`, the AllocSvrs
/// forwarding or not.
pub async fn two_sets_with(
    bins: Bins,
    opts: StoreOptions,
    forward: bool,
) -> (SetCluster, SetCluster) {
    two_sets_of(bins, (set0(), set1()), "2000..4000", opts, forward).await
}

/// Set `specs.0` (2 AllocSvrs) and set `specs.1` (2 AllocSvrs), the
/// second added to the first's cluster for `added` (`BEGIN..END`) with
/// `seqctl set add`, run until it succeeds; both store groups started
/// with `opts`, the AllocSvrs forwarding or not.
pub async fn two_sets_of(
    bins: Bins,
    specs: (SetSpec, SetSpec),
    added: &str,
    opts: StoreOptions,
    forward: bool,
) -> (SetCluster, SetCluster) {
    let id = specs.1.set_id.to_string();
    let a = SetCluster::start_opts_forwarding(bins, specs.0, 2, opts.clone(), forward);
    let b = SetCluster::start_opts_forwarding(bins, specs.1, 2, opts, forward);
    a.store.wait_ready(Duration::from_secs(30)).await;
    b.store.wait_ready(Duration::from_secs(30)).await;
    let stores = b.store.client_addrs.join(",");
    let add = [
        "set",
        "add",
        "--id",
        &id,
        "--range",
        added,
        "--set-store",
        &stores,
    ];
    let start = Instant::now();
    loop {
        // Set 0 records its own store addresses in the directory within
        // a few seconds of starting; until then `set add` says so.
        let (ok, out) = seqctl(&a, &add);
        if ok {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "set add failed: {out}\n{}\n{}",
            a.store.logs(),
            b.store.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    (a, b)
}
