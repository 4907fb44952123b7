use super::*;

fn spec(set_id: SetId, span: Range<Uid>) -> SetSpec {
    SetSpec {
        section_size: 10,
        step: 100,
        ..SetSpec::new(set_id, span)
    }
}

fn entry(set_id: SetId, span: Range<Uid>) -> DirSet {
    DirSet {
        spec: spec(set_id, span),
        stores: vec![format!("s{set_id}:1")],
        admin: vec![format!("s{set_id}:2")],
    }
}

fn dir() -> Directory {
    Directory::new(entry(0, 0..100))
}

fn ranges(d: &Directory) -> Vec<(Uid, Uid, SetId)> {
    d.ranges.iter().map(|r| (r.begin, r.end, r.set)).collect()
}

#[test]
fn add_set_serves_a_free_range_and_is_idempotent() {
    let mut d = dir();
    let add = DirChange::AddSet {
        set: entry(1, 0..200),
        begin: 100,
        end: 200,
    };
    assert_eq!(d.apply(&add), Ok(true));
    assert_eq!(d.version, 2);
    assert_eq!(ranges(&d), vec![(0, 100, 0), (100, 200, 1)]);
    assert_eq!(d.apply(&add), Ok(false));
    assert_eq!(d.version, 2);
    assert_eq!(d.set_of(99), Some(0));
    assert_eq!(d.set_of(100), Some(1));
    assert_eq!(d.set_of(200), None);
}

#[test]
fn bad_changes_are_refused_and_change_nothing() {
    let base = {
        let mut d = dir();
        d.apply(&DirChange::AddSet {
            set: entry(1, 0..300),
            begin: 100,
            end: 200,
        })
        .unwrap();
        d
    };
    let table: Vec<(&str, DirChange, DirError)> = vec![
        (
            "overlap",
            DirChange::AddSet {
                set: entry(2, 0..300),
                begin: 150,
                end: 250,
            },
            DirError::Overlap {
                begin: 150,
                end: 250,
                other_begin: 100,
                other_end: 200,
                other_set: 1,
            },
        ),
        (
            "inverted",
            DirChange::AddSet {
                set: entry(2, 0..300),
                begin: 250,
                end: 240,
            },
            DirError::EmptyRange {
                begin: 250,
                end: 240,
            },
        ),
        (
            "id in use",
            DirChange::AddSet {
                set: entry(1, 0..400),
                begin: 300,
                end: 400,
            },
            DirError::SetInUse(1),
        ),
        (
            "not whole sections",
            DirChange::AddSet {
                set: entry(2, 0..300),
                begin: 205,
                end: 300,
            },
            DirError::NotWholeSections {
                begin: 205,
                end: 300,
                set: 2,
                section_size: 10,
                span_begin: 0,
            },
        ),
        (
            "misaligned span",
            DirChange::AddSet {
                set: entry(2, 205..305),
                begin: 205,
                end: 305,
            },
            DirError::Misaligned { set: 2 },
        ),
        (
            "outside span",
            DirChange::AddSet {
                set: entry(2, 200..300),
                begin: 300,
                end: 310,
            },
            DirError::OutsideSpan {
                begin: 300,
                end: 310,
                set: 2,
                span_begin: 200,
                span_end: 300,
            },
        ),
        (
            "move from unknown set",
            DirChange::BeginMove(PendingMove {
                begin: 0,
                end: 10,
                from: 7,
                to: 1,
            }),
            DirError::UnknownSet(7),
        ),
        (
            "move to itself",
            DirChange::BeginMove(PendingMove {
                begin: 0,
                end: 10,
                from: 0,
                to: 0,
            }),
            DirError::SameSet(0),
        ),
        (
            "move a range the source does not serve",
            DirChange::BeginMove(PendingMove {
                begin: 50,
                end: 60,
                from: 1,
                to: 0,
            }),
            DirError::NotServedBy { uid: 50, from: 1 },
        ),
        (
            "move beyond the destination's span",
            DirChange::BeginMove(PendingMove {
                begin: 100,
                end: 110,
                from: 1,
                to: 0,
            }),
            DirError::OutsideSpan {
                begin: 100,
                end: 110,
                set: 0,
                span_begin: 0,
                span_end: 100,
            },
        ),
        (
            "move part of a section",
            DirChange::BeginMove(PendingMove {
                begin: 50,
                end: 55,
                from: 0,
                to: 1,
            }),
            DirError::NotWholeSections {
                begin: 50,
                end: 55,
                set: 0,
                section_size: 10,
                span_begin: 0,
            },
        ),
        (
            "finish a move never begun",
            DirChange::FinishMove(PendingMove {
                begin: 50,
                end: 60,
                from: 0,
                to: 1,
            }),
            DirError::NoSuchMove {
                begin: 50,
                end: 60,
                from: 0,
                to: 1,
            },
        ),
    ];
    for (name, change, want) in table {
        let mut d = base.clone();
        assert_eq!(d.apply(&change), Err(want), "{name}");
        assert_eq!(d, base, "{name}: the directory changed");
    }
}

#[test]
fn a_move_begins_once_flips_and_resumes_idempotently() {
    let mut d = dir();
    d.apply(&DirChange::AddSet {
        set: entry(1, 0..200),
        begin: 100,
        end: 200,
    })
    .unwrap();
    let m = PendingMove {
        begin: 40,
        end: 60,
        from: 0,
        to: 1,
    };
    assert_eq!(d.apply(&DirChange::BeginMove(m)), Ok(true));
    // The move's id is the version it began at; repeating the begin keeps it.
    assert_eq!((d.version, d.move_id), (3, 3));
    assert_eq!(d.apply(&DirChange::BeginMove(m)), Ok(false));
    assert_eq!(d.move_id, 3);
    let other = PendingMove {
        begin: 0,
        end: 10,
        ..m
    };
    assert!(matches!(
        d.apply(&DirChange::BeginMove(other)),
        Err(DirError::MoveInProgress { .. })
    ));
    // Until the flip the source still serves the range.
    assert_eq!(d.set_of(45), Some(0));
    assert_eq!(d.apply(&DirChange::FinishMove(m)), Ok(true));
    assert_eq!(d.apply(&DirChange::FinishMove(m)), Ok(false));
    assert_eq!(
        ranges(&d),
        vec![(0, 40, 0), (40, 60, 1), (60, 100, 0), (100, 200, 1)]
    );
    // Moving the rest of the edge merges the destination's ranges.
    let edge = PendingMove {
        begin: 60,
        end: 100,
        ..m
    };
    d.apply(&DirChange::BeginMove(edge)).unwrap();
    d.apply(&DirChange::FinishMove(edge)).unwrap();
    assert_eq!(ranges(&d), vec![(0, 40, 0), (40, 200, 1)]);
}

#[test]
fn placement_runs_split_and_merge() {
    let mut p = Placement::all_absent(10);
    assert_eq!(p.place_of(3), Place::Absent);
    assert!(p.set(2..5, Place::Serving));
    assert_eq!(p.place_of(1), Place::Absent);
    assert_eq!(p.place_of(2), Place::Serving);
    assert_eq!(p.place_of(5), Place::Absent);
    assert!(p.all_serving(2..5));
    assert!(!p.all_serving(2..6));
    assert_eq!(p.first_not_serving(3..8), Some((5, Place::Absent)));
    assert!(p.set(3..4, Place::Moved { to: 2 }));
    assert_eq!(p.runs.len(), 3);
    assert!(p.set(0..10, Place::Serving));
    assert!(p.runs.is_empty());
    assert!(p.set(0..2, Place::Absent));
    assert!(p.set(2..4, Place::Absent));
    assert_eq!(p.runs.len(), 1);
}

#[test]
fn a_set_call_passes_only_what_the_directory_shows_under_way() {
    let mut d = dir();
    d.apply(&DirChange::AddSet {
        set: entry(1, 0..300),
        begin: 100,
        end: 200,
    })
    .unwrap();
    let add = SetCall {
        set: 1,
        move_id: 0,
        begin: 100,
        end: 200,
        kind: SetKind::Addition,
    };
    assert_eq!(d.check_call(&add), Ok(()));
    // An addition borrowing a move id, or for a range not all the set's.
    let e = d.check_call(&SetCall { move_id: 2, ..add }).unwrap_err();
    assert!(e.contains("carries move id 2"), "{e}");
    let e = d.check_call(&SetCall { begin: 90, ..add }).unwrap_err();
    assert!(e.contains("uid 90 is served by set 0"), "{e}");
    let e = d.check_call(&SetCall { end: 210, ..add }).unwrap_err();
    assert!(e.contains("uid 200 is served by no set"), "{e}");
    d.apply(&DirChange::AddSet {
        set: entry(2, 0..300),
        begin: 200,
        end: 300,
    })
    .unwrap();
    // A move out of set 1 to set 2: the addition is refused while it is pending.
    let m = PendingMove {
        begin: 100,
        end: 120,
        from: 1,
        to: 2,
    };
    d.apply(&DirChange::BeginMove(m)).unwrap();
    let id = d.move_id;
    let e = d.check_call(&add).unwrap_err();
    assert!(
        e.contains(&format!(
            "move {id} of [100, 120) from set 1 to set 2 is under way"
        )),
        "{e}"
    );
    let mv = SetCall {
        set: 1,
        move_id: id,
        begin: 100,
        end: 120,
        kind: SetKind::Move { from: 1, to: 2 },
    };
    assert_eq!(d.check_call(&mv), Ok(()));
    let e = d
        .check_call(&SetCall {
            move_id: 1_000_000_000,
            ..mv
        })
        .unwrap_err();
    assert!(e.contains(&format!("gives it id {id}")), "{e}");
    let e = d.check_call(&SetCall { end: 130, ..mv }).unwrap_err();
    assert!(e.contains("is under way"), "{e}");
    let e = d
        .check_call(&SetCall {
            kind: SetKind::Move { from: 2, to: 1 },
            ..mv
        })
        .unwrap_err();
    assert!(e.contains("does not show"), "{e}");
    // Once it finished, nothing of it passes any more.
    d.apply(&DirChange::FinishMove(m)).unwrap();
    let e = d.check_call(&mv).unwrap_err();
    assert!(e.contains("no move is under way"), "{e}");
}
