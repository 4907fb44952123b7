//! Forged and delayed adopts: part of the fencing suite (`tests/fencing/main.rs`).

use super::*;

// ---------------------------------------------------------------------
// 1. Forged adopts
// ---------------------------------------------------------------------

/// A forged adopt: the AllocSvr it goes to, what it is, the (section,
/// epoch) pairs it names, and the code it must get.
type Forgery = (&'static str, &'static str, Vec<(u32, u64)>, tonic::Code);

/// Promise 3 (one owner per section) and 5 (a forged request gets a clear
/// error and changes nothing): an AllocSvr installs an adopted section
/// only after the store confirms owner, incarnation and epoch. Forged
/// adopts — a section it does not own, another AllocSvr's section at its
/// real epoch, epoch 2^63, the next epoch of its own section, an unknown
/// section, a redirected copy of a genuine adopt after the section moved
/// on — are refused with FAILED_PRECONDITION (or OUT_OF_RANGE /
/// INVALID_ARGUMENT for malformed ones) and nothing is installed: the
/// attacked AllocSvr hands out no number of a section it does not own.
///
/// Shown to fail: with `decide_adopt`'s owner, incarnation and epoch
/// checks switched off (the store's record installed as it is), five of
/// the seven forgeries were answered OK (installed 1), the attacked
/// AllocSvrs served the forged sections from their epochs' start beside
/// their owners, and the checker reported 129 regressions and 125 repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_adopts_are_refused_and_install_nothing() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (cluster, c) = ready().await;
    let read = cluster.store.read();
    let (a1, a2) = (
        alloc_lease(&read, "alloc-1").await,
        alloc_lease(&read, "alloc-2").await,
    );
    let w = start_load(&c, 6);
    tokio::time::sleep(Duration::from_millis(800)).await;

    // A genuine move to capture a genuine adopt: section 3 from alloc-1 to
    // alloc-2 (the adopt alloc-2 received names the new epoch), then on,
    // back to alloc-1.
    let m = hand_off(&a1.admin_addr, 3, "alloc-2").await;
    assert!(m.ok, "{m:?}");
    let e1 = read.read_sections(3, 1).await.unwrap()[0].record.epoch;
    let m = hand_off(&a2.admin_addr, 3, "alloc-1").await;
    assert!(m.ok, "{m:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let before = read.read_sections(0, SECTIONS).await.unwrap();
    let version = read.routes().await.unwrap().version;
    let served_before = (served(&a1.addr).await, served(&a2.addr).await);
    let e = |s: usize| before[s].record.epoch;
    let cases: Vec<Forgery> = vec![
        (
            "alloc-1",
            "alloc-2's section 5 at its current epoch",
            vec![(5, e(5))],
            tonic::Code::FailedPrecondition,
        ),
        (
            "alloc-1",
            "alloc-2's section 6 at the next epoch",
            vec![(6, e(6) + 1)],
            tonic::Code::FailedPrecondition,
        ),
        (
            "alloc-1",
            "its own section 0 at epoch 2^63",
            vec![(0, 1 << 63)],
            tonic::Code::FailedPrecondition,
        ),
        (
            "alloc-1",
            "its own section 1 at the next epoch",
            vec![(1, e(1) + 1)],
            tonic::Code::FailedPrecondition,
        ),
        (
            "alloc-2",
            "alloc-1's section 2 at its current epoch",
            vec![(2, e(2))],
            tonic::Code::FailedPrecondition,
        ),
        (
            "alloc-2",
            "the genuine adopt alloc-1 got for section 3, redirected after it moved on",
            vec![(3, e(3))],
            tonic::Code::FailedPrecondition,
        ),
        (
            "alloc-2",
            "a mix: its own section 4 (a repeat) and alloc-1's section 0",
            vec![(4, e(4)), (0, e(0))],
            tonic::Code::FailedPrecondition,
        ),
        (
            "alloc-1",
            "an unknown section",
            vec![(SECTIONS + 3, 7)],
            tonic::Code::OutOfRange,
        ),
        (
            "alloc-1",
            "no section at all",
            vec![],
            tonic::Code::InvalidArgument,
        ),
    ];
    let mut stolen: Vec<Observation> = Vec::new();
    let mut outcomes = Vec::new();
    for (target, what, sections, want) in &cases {
        let (peer, client) = if *target == "alloc-1" {
            (&a1.peer_addr, &a1.addr)
        } else {
            (&a2.peer_addr, &a2.addr)
        };
        let r = adopt(peer, sections).await;
        println!("adopt at {target}: {what}: {}", shown(&r));
        // Whatever it installed, it would serve now: ask it for numbers of
        // the named sections that are not its own.
        let mine = if *target == "alloc-1" { 0..4 } else { 4..8 };
        let foreign: Vec<u32> = sections
            .iter()
            .map(|s| s.0)
            .filter(|s| *s < SECTIONS && !mine.contains(s))
            .collect();
        if !foreign.is_empty() {
            let got = direct_next(
                client,
                None,
                &uids_of(foreign),
                Instant::now() + Duration::from_millis(400),
            )
            .await;
            stolen.extend(got);
        }
        outcomes.push((target, what, r, *want));
    }
    // The genuine adopt for its first move, replayed at alloc-2 after the
    // section moved back: alloc-2 installed that epoch already, so at most a
    // no-op.
    let replay = adopt(&a2.peer_addr, &[(3, e1)]).await;
    println!(
        "genuine adopt of section 3 at epoch {e1}, replayed at alloc-2: {}",
        shown(&replay)
    );
    stolen.extend(
        direct_next(
            &a2.addr,
            None,
            &uids_of([3]),
            Instant::now() + Duration::from_millis(400),
        )
        .await,
    );

    let (b, _) = burst(&c, 3).await;
    let (mut obs, _) = w.finish().await;
    obs.extend(b);
    obs.extend(&stolen);
    assert_monotonic(&obs, || cluster.store.logs());

    let mut wrong = Vec::new();
    for (target, what, r, want) in &outcomes {
        match r {
            Err(st) if st.code() == *want => {}
            other => wrong.push(format!("{target}, {what}: {}", shown(other))),
        }
    }
    assert!(
        wrong.is_empty(),
        "not refused as expected:\n{}",
        wrong.join("\n")
    );
    assert!(
        matches!(replay, Ok(0))
            || replay
                .as_ref()
                .is_err_and(|s| s.code() == tonic::Code::FailedPrecondition),
        "replayed genuine adopt: {}",
        shown(&replay)
    );
    assert!(
        stolen.is_empty(),
        "an AllocSvr served sections it does not own after a forged adopt: {} numbers, e.g. {:?}",
        stolen.len(),
        stolen.first()
    );
    // Nothing changed: the store's owners and epochs, the routes, and what
    // each AllocSvr serves.
    let after = read.read_sections(0, SECTIONS).await.unwrap();
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (&b.record.owner, b.record.epoch),
            (&a.record.owner, a.record.epoch),
            "section {}",
            b.section
        );
    }
    assert_eq!(read.routes().await.unwrap().version, version);
    assert_eq!(
        (served(&a1.addr).await, served(&a2.addr).await),
        served_before
    );
}

// ---------------------------------------------------------------------
// 2. Delayed genuine adopts
// ---------------------------------------------------------------------

/// Promise 3: a genuine adopt that arrives late — after the section moved
/// on, or at a receiver that restarted and forgot what it installed — is
/// refused (FAILED_PRECONDITION) or a no-op (installed 0); the section is
/// served by its owner only.
///
/// Shown to fail: with `decide_adopt`'s owner, incarnation and epoch
/// checks switched off, the late adopt of the second move made alloc-2
/// serve section 3 beside alloc-1 from the same start, three late adopts
/// at the restarted alloc-2 were installed, and the checker reported 136
/// regressions and 137 repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_genuine_adopts_are_refused_or_no_ops() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (mut cluster, c) = ready().await;
    let read = cluster.store.read();
    let (a1, a2) = (
        alloc_lease(&read, "alloc-1").await,
        alloc_lease(&read, "alloc-2").await,
    );
    let w = start_load(&c, 6);
    tokio::time::sleep(Duration::from_millis(800)).await;

    // Drain section 3 to alloc-2: the adopt it got names epoch e1.
    let m = hand_off(&a1.admin_addr, 3, "alloc-2").await;
    assert!(m.ok, "{m:?}");
    let s3 = read.read_sections(3, 1).await.unwrap().remove(0).record;
    assert_eq!(s3.owner.as_deref(), Some("alloc-2"));
    let e1 = s3.epoch;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // It moves on, back to alloc-1 (adopt at e2).
    let m = hand_off(&a2.admin_addr, 3, "alloc-1").await;
    assert!(m.ok, "{m:?}");
    let e2 = read.read_sections(3, 1).await.unwrap()[0].record.epoch;
    println!("section 3: handed to alloc-2 at epoch {e1}, back to alloc-1 at epoch {e2}");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut stolen = Vec::new();
    let mut results = Vec::new();
    // Late adopts at the old owner and at the new owner.
    for (who, peer, epoch) in [
        ("alloc-1 (old owner of the first move)", &a1.peer_addr, e1),
        ("alloc-2 (receiver of the first move)", &a2.peer_addr, e1),
        ("alloc-2 (gave the section away at e2)", &a2.peer_addr, e2),
    ] {
        let r = adopt(peer, &[(3, epoch)]).await;
        println!(
            "late adopt of section 3 at epoch {epoch} at {who}: {}",
            shown(&r)
        );
        results.push((who.to_string(), epoch, r));
    }
    stolen.extend(
        direct_next(
            &a2.addr,
            None,
            &uids_of([3]),
            Instant::now() + Duration::from_millis(400),
        )
        .await,
    );

    // alloc-2 restarts (a new incarnation that installed nothing yet): the
    // delayed adopts reach a receiver with no memory of them.
    let old_s4 = read.read_sections(4, 1).await.unwrap().remove(0).record;
    cluster.allocs[1].kill9();
    cluster.allocs[1].restart();
    // Its sections move to alloc-1 once the old incarnation's lease
    // certainly expired; the new one registers then and renews.
    let old_inc = a2.incarnation;
    eventually(
        Duration::from_secs(20),
        "restarted alloc-2 registers and renews",
        || {
            let read = read.clone();
            async move {
                let a = alloc_lease(&read, "alloc-2").await;
                a.incarnation != old_inc && a.since_grant_ms >= 0 && !a.expired
            }
        },
    )
    .await;
    let a2_new = alloc_lease(&read, "alloc-2").await;
    assert_ne!(
        a2_new.incarnation, a2.incarnation,
        "alloc-2 did not restart"
    );
    for (what, epoch, section) in [
        ("first move's adopt", e1, 3),
        ("second move's adopt", e2, 3),
        (
            "section 4 at its previous incarnation's epoch",
            old_s4.epoch,
            4,
        ),
        ("section 4 at the epoch after", old_s4.epoch + 1, 4),
    ] {
        let r = adopt(&a2_new.peer_addr, &[(section, epoch)]).await;
        println!(
            "late adopt at the restarted alloc-2: {what} (section {section}, epoch {epoch}): {}",
            shown(&r)
        );
        results.push((format!("restarted alloc-2, {what}"), epoch, r));
    }
    stolen.extend(
        direct_next(
            &a2.addr,
            None,
            &uids_of([3]),
            Instant::now() + Duration::from_millis(400),
        )
        .await,
    );

    let (b, _) = burst(&c, 3).await;
    let (mut obs, _) = w.finish().await;
    obs.extend(b);
    obs.extend(&stolen);
    assert_monotonic(&obs, || cluster.store.logs());
    for (who, epoch, r) in &results {
        let ok = match r {
            Ok(0) => true,
            Err(st) => st.code() == tonic::Code::FailedPrecondition,
            Ok(_) => false,
        };
        assert!(ok, "late adopt at epoch {epoch} at {who}: {}", shown(r));
    }
    assert!(
        stolen.is_empty(),
        "alloc-2 served section 3 after a late adopt: {:?}",
        stolen.first()
    );
    let s3 = read.read_sections(3, 1).await.unwrap().remove(0).record;
    assert_eq!((s3.owner.as_deref(), s3.epoch), (Some("alloc-1"), e2));
    assert!(!served(&a2.addr).await.contains(&3));
}
