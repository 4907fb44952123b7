//! The allocator's table and unit tests.

use super::*;
use seqsvr_core::rng::Rng;

/// A set of 3 sections of 4 uids starting at uid 100, step 10.
fn alloc(fraction: f64) -> Allocator {
    let spec = SetSpec {
        set_id: 1,
        uid_begin: 100,
        uid_end: 112,
        section_size: 4,
        step: 10,
    };
    Allocator::new(
        spec,
        &AllocConfig {
            raise_ahead_fraction: fraction,
            adaptive: None,
            ..AllocConfig::default()
        },
    )
    .unwrap()
}

fn grant(section: SectionId, epoch: Epoch, prev: u64) -> Grant {
    Grant {
        section,
        epoch,
        prev_ceiling: prev,
        max_seq: prev + 10,
    }
}

#[test]
fn errors_table() {
    let a = alloc(0.25);
    a.install(&[grant(0, 1, 0)]).unwrap();
    for (uid, want) in [
        (99, Err(AllocError::OutOfRange { uid: 99 })),
        (100, Ok(1)),
        (103, Ok(1)),
        (104, Err(AllocError::NotOwner { section: 1 })),
        (111, Err(AllocError::NotOwner { section: 2 })),
        (112, Err(AllocError::OutOfRange { uid: 112 })),
        (u64::MAX, Err(AllocError::OutOfRange { uid: u64::MAX })),
    ] {
        assert_eq!(a.next(uid), want, "uid {uid}");
    }
    assert_eq!(a.current(104), Err(AllocError::NotOwner { section: 1 }));
    assert_eq!(
        a.install(&[grant(3, 1, 0)]),
        Err(AllocError::UnknownSection { section: 3 })
    );
    let bad = Grant {
        max_seq: 5,
        ..grant(1, 1, 5)
    };
    assert!(matches!(
        a.install(&[bad]),
        Err(AllocError::InvalidGrant { section: 1, .. })
    ));
}

#[test]
fn a_section_released_for_a_move_takes_no_grant_made_before_the_freeze() {
    let a = alloc(0.25);
    a.install(&[grant(0, 2, 0)]).unwrap();
    // Frozen at epoch 4 in the store: released here.
    assert!(a.release_moved(0, 4));
    assert_eq!(a.next(100), Err(AllocError::NotOwner { section: 0 }));
    // A take-over made before the freeze (epoch 3) arrives late; a
    // section never served here is fenced the same way.
    assert!(!a.release_moved(1, 7));
    assert_eq!(a.install(&[grant(0, 3, 10), grant(1, 6, 0)]).unwrap(), 0);
    assert_eq!(a.next(100), Err(AllocError::NotOwner { section: 0 }));
    assert_eq!(a.next(104), Err(AllocError::NotOwner { section: 1 }));
    // Moved back and taken over after the freeze: served again.
    assert_eq!(a.install(&[grant(0, 6, 40)]).unwrap(), 1);
    assert_eq!(a.next(100), Ok(41));
}

#[test]
fn next_and_current_after_skip_ahead() {
    let a = alloc(0.25);
    assert_eq!(a.install(&[grant(0, 3, 500), grant(2, 3, 70)]).unwrap(), 2);
    assert_eq!(a.current(101), Ok(500));
    assert_eq!(a.next(101), Ok(501));
    assert_eq!(a.current(101), Ok(501));
    assert_eq!(a.next(110), Ok(71));
    assert_eq!(a.served_sections(), vec![0, 2]);
}

#[test]
fn batch_orders_duplicates_and_stops_at_first_error() {
    let a = alloc(0.0);
    a.install(&[grant(0, 1, 0), grant(2, 1, 0)]).unwrap();
    let mut out = vec![42];
    a.next_batch(&[100, 100, 101, 100, 108], &mut out).unwrap();
    assert_eq!(out, vec![42, 1, 2, 1, 3, 1]);
    out.clear();
    let err = a.next_batch(&[102, 105, 102], &mut out);
    assert_eq!(err, Err(AllocError::NotOwner { section: 1 }));
    assert_eq!(out, vec![1], "prefix handed out, rest untouched");
    assert_eq!(a.next(102), Ok(2));
    // A uid outside the set: the prefetch pass skips it, the serving
    // pass stops there.
    out.clear();
    let err = a.next_batch(&[101, u64::MAX, 101], &mut out);
    assert_eq!(err, Err(AllocError::OutOfRange { uid: u64::MAX }));
    assert_eq!(out, vec![2]);
    assert_eq!(a.next(101), Ok(3));
}

#[test]
fn exhaustion_queues_one_raise_and_apply_unblocks() {
    let a = alloc(0.0);
    a.install(&[grant(0, 1, 0)]).unwrap();
    for want in 1..=10 {
        assert_eq!(a.next(100), Ok(want));
    }
    assert_eq!(a.next(100), Err(AllocError::Exhausted { section: 0 }));
    assert_eq!(a.next(101), Ok(1), "other uids still have room");
    let reqs = a.take_raise_requests();
    assert_eq!(
        reqs,
        vec![RaiseRequest {
            section: 0,
            epoch: 1,
            to: 20
        }]
    );
    assert!(a.take_raise_requests().is_empty(), "queued once");
    assert!(a.apply_raise(0, 1, 20));
    assert_eq!(a.next(100), Ok(11));
    let stats = a.stats();
    assert_eq!(
        (stats.exhausted, stats.raises_queued, stats.raises_applied),
        (1, 1, 1)
    );
}

#[test]
fn raise_ahead_bounds_the_gap_to_one_step() {
    let a = alloc(0.25); // margin 2
    a.install(&[grant(0, 1, 0)]).unwrap();
    for _ in 0..7 {
        a.next(100).unwrap();
    }
    assert!(a.take_raise_requests().is_empty(), "10 - 7 > margin");
    a.next(100).unwrap();
    let reqs = a.take_raise_requests();
    assert_eq!(
        reqs,
        vec![RaiseRequest {
            section: 0,
            epoch: 1,
            to: 18
        }]
    );
    // While in flight, more numbers go out; the reply still applies.
    a.next(101).unwrap();
    assert!(a.apply_raise(0, 1, 18));
    assert_eq!(a.section_state(0).unwrap().ceiling, 18);
}

#[test]
fn drop_and_late_reply_and_retake() {
    let a = alloc(0.0);
    a.install(&[grant(1, 4, 0)]).unwrap();
    assert_eq!(a.next(104), Ok(1));
    assert!(!a.drop_section_if_epoch(1, 3), "older epoch does not drop");
    assert!(a.drop_section(1));
    assert!(!a.drop_section(1));
    assert_eq!(a.next(104), Err(AllocError::NotOwner { section: 1 }));
    assert!(!a.apply_raise(1, 4, 100), "late reply ignored");
    assert_eq!(a.next(104), Err(AllocError::NotOwner { section: 1 }));
    assert_eq!(a.install(&[grant(1, 4, 20)]).unwrap(), 0, "replayed grant");
    assert_eq!(a.install(&[grant(1, 5, 20)]).unwrap(), 1);
    assert_eq!(a.next(104), Ok(21));
    assert_eq!(a.next(105), Ok(21));
}

#[test]
fn known_epochs_survive_retire() {
    let a = alloc(0.0);
    assert_eq!(a.known_epoch(1), 0, "never installed");
    assert_eq!(a.known_epoch(99), 0, "not in the set");
    a.install(&[grant(1, 4, 0)]).unwrap();
    assert_eq!(a.next(104), Ok(1));
    assert!(a.drop_section(1));
    assert_eq!(a.known_epoch(1), 4, "kept after retire");
    assert!(!a.is_serving(1));
    assert_eq!(a.served_sections(), Vec::<SectionId>::new());
}

#[test]
fn stand_in_incarnations_differ() {
    let (a, b) = (alloc(0.0), alloc(0.0));
    assert_ne!(a.incarnation(), b.incarnation());
    assert_ne!(a.incarnation(), 0);
}

#[test]
fn margin_stays_below_a_step() {
    let margin = |fraction| {
        let a = alloc(fraction);
        a.install(&[grant(0, 1, 0)]).unwrap();
        a.section_state(0).unwrap().raise_margin
    };
    assert_eq!(margin(5.0), 9);
    assert_eq!(margin(-1.0), 0);
    assert_eq!(margin(0.25), 2);
}

#[tokio::test(start_paused = true)]
async fn next_waiting_times_out_then_wakes_on_raise() {
    let a = std::sync::Arc::new(alloc(0.0));
    a.install(&[grant(0, 1, 0)]).unwrap();
    for _ in 0..10 {
        a.next(100).unwrap();
    }
    let soon = Instant::now() + std::time::Duration::from_millis(50);
    assert_eq!(
        a.next_waiting(100, soon).await,
        Err(AllocError::Exhausted { section: 0 })
    );
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move {
            let far = Instant::now() + std::time::Duration::from_secs(5);
            let mut out = Vec::new();
            a.next_batch_waiting(&[101, 100, 100], &mut out, far)
                .await
                .map(|_| out)
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    assert!(!waiter.is_finished());
    let req = a.take_raise_requests()[0];
    assert!(a.apply_raise(req.section, req.epoch, req.to));
    assert_eq!(waiter.await.unwrap(), Ok(vec![1, 11, 12]));
    let st = a.stats();
    assert_eq!((st.raise_waits, st.raise_wait_timeouts), (2, 1));
    assert!(AllocError::Exhausted { section: 0 }.is_retryable());
}

#[test]
fn the_served_sections_kept_equal_a_walk_over_every_slot() {
    let a = alloc(0.0);
    // A seeded walk over installs, drops and epoch-conditional drops.
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1du64);
    let mut epoch = [0u64; 3];
    for _ in 0..2_000 {
        let x = rng.next_u64();
        let s = (x % 3) as SectionId;
        match (x >> 8) % 4 {
            0 | 1 => {
                epoch[s as usize] += 1;
                let _ = a.install(&[grant(s, epoch[s as usize], 0)]);
            }
            2 => {
                a.drop_section(s);
            }
            _ => {
                a.drop_section_if_epoch(s, epoch[s as usize].saturating_sub((x >> 20) % 2));
            }
        }
        let walk: Vec<SectionId> = (0..3).filter(|&s| a.is_serving(s)).collect();
        assert_eq!(a.served_sections(), walk);
        assert_eq!(a.served_count(), walk.len());
    }
}
