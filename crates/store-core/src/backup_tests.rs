//! Backup files and restore plans: a restored group serves every section
//! at or above its backed-up ceiling plus the margin, never before its
//! piece landed, and no plan exists without a margin.

use seqsvr_core::{Place, SetSpec};

use super::*;
use crate::command::{Command, Rejection, Reply};
use crate::state::{Dirty, SetState};

/// A served set of 3000 sections (three restore pieces) with some history:
/// ceilings raised, section 5 moved to set 1.
fn backed_up() -> SetState {
    let spec = SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: 3000 * 10,
        section_size: 10,
        step: 100,
    };
    let mut st = SetState::default();
    let mut d = Vec::new();
    st.apply(&Command::ConfigureSet(spec), &mut d).unwrap();
    st.apply(&Command::SetLease(LeaseTerms::default()), &mut d)
        .unwrap();
    for (i, r) in st.sections.iter_mut().enumerate() {
        r.max_seq = 1000 + i as u64;
        r.epoch = 3;
        r.owner = Some("a".into());
        r.incarnation = 7;
    }
    st.placement.set(5..6, Place::Moved { to: 1 });
    st.route_version = 40;
    st.rebuild_derived();
    st
}

fn backup() -> Backup {
    Backup::new(backed_up(), 1234, 3, 1_000_000)
}

fn margin(m: u64) -> MarginArgs {
    MarginArgs {
        margin: Some(m),
        raise_rate: None,
    }
}

#[test]
fn a_file_reads_back_as_written_and_anything_else_is_refused() {
    let b = backup();
    let bytes = b.encode().unwrap();
    let text = String::from_utf8_lossy(&bytes[..120]);
    assert!(text.starts_with(
        "seqsvr-backup\nformat 3\nset 0\nlog_index 1234\nlog_term 3\n\
         leader_time_unix_ms 1000000\nsections 3000\ncounters 0\nids 0\n\n"
    ));
    assert_eq!(Backup::decode(&bytes).unwrap(), b);
    let refused = |bytes: &[u8]| matches!(Backup::decode(bytes), Err(RestoreError::Format(_)));
    assert!(refused(b""));
    assert!(refused(b"hello\n\nworld"));
    let newer = String::from_utf8_lossy(&bytes).replacen("format 3", "format 4", 1);
    assert!(refused(newer.as_bytes()));
    for (from, to) in [("counters 0", "counters 1"), ("ids 0", "ids 1")] {
        let miscounted = String::from_utf8_lossy(&bytes).replacen(from, to, 1);
        assert!(refused(miscounted.as_bytes()), "{to}");
    }
    let mut other_set = bytes.clone();
    let pos = "seqsvr-backup\nformat 3\nset ".len();
    assert_eq!(other_set[pos], b'0');
    other_set[pos] = b'9';
    assert!(refused(&other_set));
    let mut cut = bytes.clone();
    cut.truncate(bytes.len() - 3);
    assert!(refused(&cut));
}

#[test]
fn no_plan_without_a_margin_of_at_least_one_step() {
    let none = MarginArgs {
        margin: None,
        raise_rate: None,
    };
    assert_eq!(
        RestorePlan::new(backup(), none, 0),
        Err(RestoreError::MissingMargin)
    );
    assert!(RestoreError::MissingMargin.to_string().contains("--margin"));
    let both = MarginArgs {
        margin: Some(500),
        raise_rate: Some(1),
    };
    assert_eq!(
        RestorePlan::new(backup(), both, 0),
        Err(RestoreError::BothMargins)
    );
    assert_eq!(
        RestorePlan::new(backup(), margin(99), 0),
        Err(RestoreError::MarginTooSmall {
            margin: 99,
            step: 100
        })
    );
    assert_eq!(
        RestorePlan::new(backup(), margin(100), 0).unwrap().margin,
        100
    );
    let mut huge = backup();
    huge.state.sections[7].max_seq = u64::MAX - 10;
    assert!(matches!(
        RestorePlan::new(huge, margin(100), 0),
        Err(RestoreError::Overflow { section: 7, .. })
    ));
}

#[test]
fn a_raise_rate_gives_rate_times_age_plus_one_step() {
    let rate = |r| MarginArgs {
        margin: None,
        raise_rate: Some(r),
    };
    // Taken at 1 000 000 ms; restored 90.5 s later: 91 whole seconds.
    let p = RestorePlan::new(backup(), rate(50), 1_090_500).unwrap();
    assert_eq!(p.margin, 50 * 91 + 100);
    // A leader clock ahead of ours counts as age 0: one step.
    let p = RestorePlan::new(backup(), rate(50), 10).unwrap();
    assert_eq!(p.margin, 100);
    assert_eq!(derived_margin(u64::MAX, 5000, 100), u64::MAX);
}

/// Applies the plan's commands until none is left, checking after each
/// that no section is served below its restored ceiling.
fn restore(plan: &RestorePlan, st: &mut SetState) -> usize {
    let mut rounds = 0;
    loop {
        let cmds = plan.commands(st);
        if cmds.is_empty() {
            return rounds;
        }
        rounds += 1;
        // Land one command a round, as a leader that crashes between
        // writes would.
        let mut d: Vec<Dirty> = Vec::new();
        st.apply(&cmds[0], &mut d).unwrap();
        for (s, r) in st.sections.iter().enumerate() {
            let served = st.placement.place_of(s as u32) == Place::Serving;
            let want = plan.backup.state.sections[s].max_seq + plan.margin;
            assert!(!served || r.max_seq >= want, "section {s} served below");
        }
        // A served section may be taken over, which reads its
        // declarations: every one of them is in place by then.
        for (name, rec) in &plan.backup.state.counters.by_name {
            let served = st.placement.place_of(rec.section) == Place::Serving;
            let landed = st.counters.by_name.get(name) == Some(rec);
            assert!(
                !served || landed,
                "section {} served without {name:?}",
                rec.section
            );
        }
    }
}

#[test]
fn a_restore_lands_every_ceiling_raised_and_serves_nothing_before() {
    let plan = RestorePlan::new(backup(), margin(5000), 0).unwrap();
    let mut st = SetState::default();
    let cmds = plan.commands(&st);
    assert!(matches!(cmds[..], [Command::RestoreSet { .. }]));
    let mut d = Vec::new();
    st.apply(&cmds[0], &mut d).unwrap();
    assert_eq!(st.route_version, 41);
    assert!(
        (0..3000).all(|s| st.placement.place_of(s) == Place::Absent),
        "nothing served before its piece lands"
    );
    assert_eq!(plan.commands(&st).len(), 3, "three pieces of 1024");
    assert_eq!(restore(&plan, &mut st), 3);
    for (s, r) in st.sections.iter().enumerate() {
        let b = &plan.backup.state.sections[s];
        assert_eq!((r.max_seq, r.start), (b.max_seq + 5000, b.max_seq + 5000));
        assert_eq!((r.epoch, r.owner.as_ref(), r.incarnation), (4, None, 0));
    }
    assert_eq!(st.placement, plan.backup.state.placement);
    assert_eq!(st.directory, plan.backup.state.directory);
    assert!(st.allocs.is_empty(), "AllocSvrs register again");
    // Written again (a repeated or resumed restore): nothing changes.
    let before = st.clone();
    let again = plan.piece(0, 1024);
    let mut d = Vec::new();
    assert_eq!(
        st.apply(&again, &mut d),
        Ok(Reply::Restored {
            newly: 0,
            route_version: before.route_version
        })
    );
    assert_eq!(st, before);
    assert!(d.is_empty());
}

#[test]
fn a_restore_touches_no_section_a_group_ever_served() {
    let plan = RestorePlan::new(backup(), margin(5000), 0).unwrap();
    // A group that serves this set already: the restore set is a no-op
    // and no piece is due, nor lands if written anyway.
    let mut st = backed_up();
    assert!(plan.commands(&st).is_empty());
    let before = st.clone();
    let mut d = Vec::new();
    let out = st.apply(&plan.piece(0, 1024), &mut d).unwrap();
    assert!(matches!(out, Reply::Restored { newly: 0, .. }));
    assert_eq!(st, before);
    // Another set stored: refused.
    let mut other = plan.backup.state.set.clone().unwrap();
    other.step = 7;
    let mut st = SetState::default();
    st.apply(&Command::ConfigureSet(other), &mut d).unwrap();
    assert!(plan.commands(&st).is_empty());
    let restore_set = RestorePlan::new(backup(), margin(5000), 0)
        .unwrap()
        .commands(&SetState::default())
        .remove(0);
    assert!(st.apply(&restore_set, &mut d).is_err());
}

/// A set over the names' range (4 sections of 262,144 positions) whose
/// store holds declared counters: "a" declared (floor 5, maximum 100, odd
/// numbers), "e" a floor alone, "f" a tombstone; "a", "e" and "f" lie in
/// section 1, "x" (floor 7) in section 0.
fn with_counters() -> SetState {
    use crate::counters::CounterRecord;
    use seqsvr_core::{name_key, CounterDecl, CounterRules, NAME_KEYS};
    let spec = SetSpec {
        set_id: 0,
        uid_begin: NAME_KEYS.start,
        uid_end: NAME_KEYS.end,
        section_size: 262_144,
        step: 100,
    };
    let mut st = SetState::default();
    let mut d = Vec::new();
    st.apply(&Command::ConfigureSet(spec.clone()), &mut d)
        .unwrap();
    st.apply(&Command::SetLease(LeaseTerms::default()), &mut d)
        .unwrap();
    for r in st.sections.iter_mut() {
        r.max_seq = 6000;
        r.epoch = 2;
    }
    let rules = CounterRules {
        max: Some(100),
        increment: 2,
        offset: 1,
    };
    let decls = [
        ("a", 5, Some(rules)),
        ("e", 5000, None),
        ("f", 30, None),
        ("x", 7, None),
    ];
    for (name, floor, rules) in decls {
        let section = spec.section_of(name_key(name.as_bytes()).unwrap()).unwrap();
        let decl = CounterDecl { floor, rules };
        let rec = CounterRecord { section, decl };
        st.counters.by_name.insert(name.as_bytes().to_vec(), rec);
    }
    st
}

#[test]
fn a_backup_carries_declared_counters_and_a_restore_lands_them_first() {
    let b = Backup::new(with_counters(), 77, 2, 5_000);
    let bytes = b.encode().unwrap();
    let text = String::from_utf8_lossy(&bytes[..140]);
    assert!(text.contains("format 3\n"), "{text}");
    assert!(text.contains("sections 4\ncounters 4\nids 0\n\n"), "{text}");
    let read = Backup::decode(&bytes).unwrap();
    assert_eq!(read, b);
    assert_eq!(read.state.counters, with_counters().counters);
    let plan = RestorePlan::new(read, margin(1000), 0).unwrap();
    let mut st = SetState::default();
    let mut d = Vec::new();
    st.apply(&plan.commands(&st)[0], &mut d).unwrap();
    let cmds = plan.commands(&st);
    assert!(
        matches!(
            cmds[..],
            [
                Command::RestoreCounters { .. },
                Command::RestoreSections { .. }
            ]
        ),
        "{cmds:?}"
    );
    restore(&plan, &mut st);
    assert_eq!(st.counters, with_counters().counters);
    // Written again (a repeated or resumed restore): nothing changes; nor
    // does a declaration for a section already landed.
    let before = st.clone();
    for again in [
        &cmds[0],
        &Command::RestoreCounters {
            counters: vec![(b"a".to_vec(), Default::default())],
        },
    ] {
        let mut d = Vec::new();
        assert_eq!(
            st.apply(again, &mut d),
            Ok(Reply::CountersCopied { newly: 0 })
        );
        assert!(d.is_empty());
    }
    assert_eq!(st, before);
}

#[test]
fn a_restore_refuses_declarations_that_are_not_names_and_changes_nothing() {
    let plan =
        RestorePlan::new(Backup::new(with_counters(), 77, 2, 5_000), margin(1000), 0).unwrap();
    let mut st = SetState::default();
    let mut d = Vec::new();
    st.apply(&plan.commands(&st)[0], &mut d).unwrap();
    let before = st.clone();
    let bad = [
        vec![(Vec::new(), Default::default())],
        vec![(vec![b'n'; 257], Default::default())],
        vec![
            (b"a".to_vec(), Default::default()),
            (b"a".to_vec(), Default::default()),
        ],
    ];
    for counters in bad {
        let mut d = Vec::new();
        let out = st.apply(&Command::RestoreCounters { counters }, &mut d);
        assert!(matches!(out, Err(Rejection::Invalid(_))), "{out:?}");
        assert_eq!(st, before);
    }
}

/// The state in `testdata/backup-format1.bin`: 4 sections of 10 uids,
/// ceilings 100, 200, 300, 400 at epoch 3.
fn format1_state() -> SetState {
    let spec = SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end: 40,
        section_size: 10,
        step: 100,
    };
    let mut st = SetState::default();
    let mut d = Vec::new();
    st.apply(&Command::ConfigureSet(spec), &mut d).unwrap();
    st.apply(&Command::SetLease(LeaseTerms::default()), &mut d)
        .unwrap();
    for (i, r) in st.sections.iter_mut().enumerate() {
        r.max_seq = 100 * (i as u64 + 1);
        r.epoch = 3;
    }
    st
}

/// A backup as the version before declared counters in backups wrote it
/// (format 1: no `counters` line, the state encoded alone) still reads
/// and restores, with no declarations. `UPDATE_GOLDEN=1` writes the file
/// again, as that version's `Backup::encode` did.
#[test]
fn a_format_1_backup_still_restores() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata/backup-format1.bin");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        let mut bytes = b"seqsvr-backup\nformat 1\nset 0\nlog_index 9\nlog_term 2\n\
            leader_time_unix_ms 1000\nsections 4\n\n"
            .to_vec();
        bytes.extend(codec::encode(&format1_state()).unwrap());
        std::fs::write(&path, bytes).unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let b = Backup::decode(&bytes).unwrap();
    assert_eq!((b.header.format, b.header.counters), (FORMAT_STATE_ONLY, 0));
    assert_eq!((b.header.log_index, b.header.sections), (9, 4));
    assert_eq!(b.state, format1_state());
    let plan = RestorePlan::new(b, margin(100), 0).unwrap();
    let mut st = SetState::default();
    restore(&plan, &mut st);
    let ceilings: Vec<u64> = st.sections.iter().map(|r| r.max_seq).collect();
    assert_eq!(ceilings, [200, 300, 400, 500]);
    assert!(st.counters.by_name.is_empty());
}

/// A backup as the version before id namespaces in backups wrote it
/// (format 2: no `ids` line, the state and declared counters encoded)
/// still reads and restores, declarations and all, with no namespaces.
/// `UPDATE_GOLDEN=1` writes the file again, as that version's
/// `Backup::encode` did.
#[test]
fn a_format_2_backup_still_restores() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata/backup-format2.bin");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        let st = with_counters();
        let mut bytes = b"seqsvr-backup\nformat 2\nset 0\nlog_index 77\nlog_term 2\n\
            leader_time_unix_ms 5000\nsections 4\ncounters 4\n\n"
            .to_vec();
        bytes.extend(codec::encode(&(&st, &st.counters)).unwrap());
        std::fs::write(&path, bytes).unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let b = Backup::decode(&bytes).unwrap();
    let h = &b.header;
    assert_eq!((h.format, h.counters, h.ids), (FORMAT_NO_IDS, 4, 0));
    assert_eq!(b.state, with_counters());
    let plan = RestorePlan::new(b, margin(1000), 0).unwrap();
    assert!(plan.ids.is_empty());
    let mut st = SetState::default();
    restore(&plan, &mut st);
    assert_eq!(st.counters, with_counters().counters);
    assert!(st.ids.spaces.is_empty());
}

/// A 1 ms layout with a 2 s window, epoch 0.
fn ms_layout() -> seqsvr_core::ids::Layout {
    let mut l = seqsvr_core::ids::Layout::twitter();
    l.epoch_ms = 0;
    l
}

/// `backed_up()` with two id namespaces: "msgs" (worker 0 held, ceiling
/// 9,000,000 ms, ahead of the backup's clock; worker 3 released at
/// 4,000,000) and "idle" (no worker ever claimed).
fn with_ids() -> SetState {
    use crate::ids::{IdSpace, WorkerRecord};
    let mut st = backed_up();
    let held = WorkerRecord {
        ceiling: 9_000_000,
        epoch: 5,
        holder: Some(("a".into(), 7)),
        floor: 8_000_000,
    };
    let released = WorkerRecord {
        ceiling: 4_000_000,
        epoch: 2,
        holder: None,
        floor: 3_000_000,
    };
    let msgs = IdSpace {
        layout: ms_layout(),
        window_ms: 2000,
        workers: [(0, held), (3, released)].into(),
    };
    let idle = IdSpace {
        workers: Default::default(),
        ..msgs.clone()
    };
    st.ids.spaces.insert("msgs".into(), msgs);
    st.ids.spaces.insert("idle".into(), idle);
    st
}

#[test]
fn a_backup_carries_id_namespaces_and_a_restore_lands_them_past_the_clock() {
    let b = Backup::new(with_ids(), 1234, 3, 1_000_000);
    let bytes = b.encode().unwrap();
    let text = String::from_utf8_lossy(&bytes[..140]);
    assert!(text.contains("counters 0\nids 2\n\n"), "{text}");
    let read = Backup::decode(&bytes).unwrap();
    assert_eq!(read, b);
    assert_eq!(read.state.ids, with_ids().ids);
    // Restored at 5,000,000 ms: worker 0 keeps its ceiling (above two
    // windows past the clock), worker 3 is raised to 5,004,000.
    let plan = RestorePlan::new(read, margin(5000), 5_000_000).unwrap();
    let mut st = SetState::default();
    let cmds = plan.commands(&st);
    assert!(
        matches!(
            cmds[..],
            [Command::RestoreIds { .. }, Command::RestoreSet { .. }]
        ),
        "the namespaces land before the set: {cmds:?}"
    );
    restore(&plan, &mut st);
    let msgs = &st.ids.spaces["msgs"];
    let w = |i: u64| &msgs.workers[&i];
    assert_eq!(
        (w(0).ceiling, w(0).epoch, &w(0).holder),
        (9_000_000, 6, &None)
    );
    assert_eq!(
        (w(3).ceiling, w(3).epoch, &w(3).holder),
        (5_004_000, 3, &None)
    );
    // Worker ids the backup has no record of (claimed since, perhaps)
    // start above the same clock.
    for space in ["msgs", "idle"] {
        let space = &st.ids.spaces[space];
        assert_eq!(space.ceiling_of(1), 5_004_000);
        assert_eq!(space.workers[&crate::ids::UNRECORDED].holder, None);
    }
    assert_eq!(st.ids.spaces["idle"].worker_records().count(), 0);
    // A new holder starts above every tick the lost group reached.
    let mut d = Vec::new();
    for (alloc, worker, floor) in [("b", 0, 9_000_001), ("c", 1, 5_004_001)] {
        st.allocs.insert(
            alloc.into(),
            crate::state::AllocRecord {
                incarnation: 1,
                ..Default::default()
            },
        );
        let claim = Command::ClaimWorker {
            ns: "msgs".into(),
            alloc: alloc.into(),
            incarnation: 1,
            now: 5_000_000,
            reclaim: Vec::new(),
        };
        match st.apply(&claim, &mut d) {
            Ok(Reply::WorkerClaimed(g)) => assert_eq!((g.worker, g.floor), (worker, floor)),
            other => panic!("{other:?}"),
        }
    }
    // Written again (a repeated or resumed restore): nothing changes, not
    // even the namespace a holder now serves.
    let before = st.clone();
    let mut d = Vec::new();
    let again = Command::RestoreIds {
        spaces: plan.ids.clone(),
    };
    assert!(matches!(
        st.apply(&again, &mut d),
        Ok(Reply::Restored { newly: 0, .. })
    ));
    assert_eq!(st, before);
    assert!(d.is_empty());
    assert!(plan.commands(&st).is_empty());
}

#[test]
fn a_restore_refuses_id_namespaces_it_could_not_serve_and_changes_nothing() {
    let plan = RestorePlan::new(Backup::new(with_ids(), 1, 1, 0), margin(5000), 0).unwrap();
    let good = plan.ids.clone();
    let mut st = SetState::default();
    let before = st.clone();
    let spoiled = |f: &dyn Fn(&mut crate::ids::IdSpace)| {
        let mut spaces = good.clone();
        f(&mut spaces[1].1);
        Command::RestoreIds { spaces }
    };
    let bad = [
        spoiled(&|s| s.window_ms = 0),
        spoiled(&|s| s.window_ms = crate::ids::MAX_WINDOW_MS + 1),
        spoiled(&|s| s.layout.worker_bits = 60),
        spoiled(&|s| {
            s.workers.insert(1 << 10, Default::default());
        }),
        spoiled(&|s| s.workers.get_mut(&0).unwrap().holder = Some(("a".into(), 1))),
        spoiled(&|s| s.workers.get_mut(&0).unwrap().ceiling = u64::MAX),
        Command::RestoreIds {
            spaces: vec![("has space".into(), good[0].1.clone())],
        },
        Command::RestoreIds {
            spaces: vec![good[0].clone(), good[0].clone()],
        },
    ];
    for cmd in bad {
        let mut d = Vec::new();
        let out = st.apply(&cmd, &mut d);
        assert!(matches!(out, Err(Rejection::Invalid(_))), "{out:?}");
        assert_eq!(st, before);
        assert!(d.is_empty());
    }
}
