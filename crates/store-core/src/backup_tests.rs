//! Backup files and restore plans: a restored group serves every section
//! at or above its backed-up ceiling plus the margin, never before its
//! piece landed, and no plan exists without a margin.

use seqsvr_core::{Place, SetSpec};

use super::*;
use crate::command::{Command, Reply};
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
        "seqsvr-backup\nformat 1\nset 0\nlog_index 1234\nlog_term 3\n\
         leader_time_unix_ms 1000000\nsections 3000\n\n"
    ));
    assert_eq!(Backup::decode(&bytes).unwrap(), b);
    let refused = |bytes: &[u8]| matches!(Backup::decode(bytes), Err(RestoreError::Format(_)));
    assert!(refused(b""));
    assert!(refused(b"hello\n\nworld"));
    let newer = String::from_utf8_lossy(&bytes).replacen("format 1", "format 2", 1);
    assert!(refused(newer.as_bytes()));
    let mut other_set = bytes.clone();
    let pos = "seqsvr-backup\nformat 1\nset ".len();
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
