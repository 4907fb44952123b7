//! Applying a plan: only forward, idempotent, refusals counted, a failing
//! sink stops the import and says how far it got.

use super::*;

fn plan() -> Plan {
    let mut p = Plan::default();
    p.add(b"a".to_vec(), 100, "row 1".into());
    p.add(b"b".to_vec(), 5, "row 2".into());
    p.add(b"c".to_vec(), 70, "row 3".into());
    p.add(b"a".to_vec(), 90, "row 4".into()); // lower: ignored
    p.refuse(b"d", "row 5".into(), "max_id is NULL".into());
    p
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn floors_only_move_forward_and_a_second_run_changes_nothing() {
    let sink = MemSink::default();
    sink.counters.lock().unwrap().insert(b"b".to_vec(), 9);
    let p = plan();
    assert_eq!(p.floors.len(), 3);
    let first = block_on(apply(&p, &sink)).unwrap();
    assert_eq!(
        (first.imported, first.already_above, first.refused.len()),
        (2, 1, 1)
    );
    assert_eq!(first.refused[0].reason, "max_id is NULL");
    let c = sink.counters.lock().unwrap().clone();
    assert_eq!(
        (c[&b"a".to_vec()], c[&b"b".to_vec()], c[&b"c".to_vec()]),
        (100, 9, 70)
    );
    let again = block_on(apply(&p, &sink)).unwrap();
    assert_eq!((again.imported, again.already_above), (0, 3));
    assert_eq!(*sink.counters.lock().unwrap(), c);
}

/// A sink refusing one name and failing on another.
struct Picky;

impl FloorSink for Picky {
    async fn set_floor(&self, name: &[u8], _floor: u64) -> Result<FloorOutcome, SinkError> {
        match name {
            b"a" => Ok(FloorOutcome::Raised),
            b"b" => Err(SinkError::Refused("b's declared maximum is 3".into())),
            _ => Err(SinkError::Failed("no store leader".into())),
        }
    }
}

#[test]
fn a_refused_floor_is_reported_and_a_failed_sink_stops() {
    let mut p = plan();
    p.floors.truncate(2);
    let s = block_on(apply(&p, &Picky)).unwrap();
    assert_eq!(s.imported, 1);
    assert_eq!(
        s.refused
            .iter()
            .map(|r| r.reason.as_str())
            .collect::<Vec<_>>(),
        ["max_id is NULL", "b's declared maximum is 3"]
    );
    let e = block_on(apply(&plan(), &Picky)).unwrap_err().to_string();
    assert_eq!(
        e,
        "setting the floor of c failed after 1 imported, 0 already above: no store leader \
         (importing again is safe: floors only move forward)"
    );
}

#[test]
fn names_are_checked_when_planned() {
    let mut p = Plan::default();
    p.add(Vec::new(), 1, "row 1".into());
    assert!(p.floors.is_empty());
    assert_eq!(p.refused[0].reason, "a name is 1..=256 bytes, not empty");
}
