//! Conversions between the protobuf route table and `seqsvr-core`'s, in
//! one place for every component.

use seqsvr_core::{RouteEntry, RouteTable, SetSpec};

use crate::v1 as pb;

/// A core set spec in its protobuf form.
pub fn set_to_pb(s: &SetSpec) -> pb::SetSpec {
    pb::SetSpec {
        set_id: s.set_id,
        uid_begin: s.uid_begin,
        uid_end: s.uid_end,
        section_size: s.section_size,
        step: s.step,
    }
}

/// A core route table in its protobuf form.
pub fn route_to_pb(t: &RouteTable) -> pb::RouteTable {
    pb::RouteTable {
        version: t.version,
        set: Some(set_to_pb(&t.set)),
        entries: t
            .entries
            .iter()
            .map(|e| pb::RouteEntry {
                first_section: e.first,
                count: e.count,
                alloc_id: e.alloc.clone(),
                addr: e.addr.clone(),
            })
            .collect(),
    }
}

/// Converts a protobuf route table to the core type, checking that it can
/// be trusted for routing: a valid set, and runs that are sorted, disjoint,
/// inside the set and addressed.
pub fn route_from_pb(r: &pb::RouteTable) -> Result<RouteTable, String> {
    let s = r.set.as_ref().ok_or("route table without set")?;
    let set = SetSpec {
        set_id: s.set_id,
        uid_begin: s.uid_begin,
        uid_end: s.uid_end,
        section_size: s.section_size,
        step: s.step,
    };
    set.validate().map_err(|e| e.to_string())?;
    let entries: Vec<RouteEntry> = r
        .entries
        .iter()
        .map(|e| RouteEntry {
            first: e.first_section,
            count: e.count,
            alloc: e.alloc_id.clone(),
            addr: e.addr.clone(),
        })
        .collect();
    check_entries(&set, &entries)?;
    Ok(RouteTable {
        version: r.version,
        set,
        entries,
    })
}

/// Checks the invariants `RouteTable::entry_for_section` relies on.
fn check_entries(set: &SetSpec, entries: &[RouteEntry]) -> Result<(), String> {
    let mut next_free = 0u64;
    for e in entries {
        let end = u64::from(e.first) + u64::from(e.count);
        if e.count == 0 || u64::from(e.first) < next_free || end > u64::from(set.section_count()) {
            return Err(format!(
                "route entry {}+{} overlaps or leaves set {}",
                e.first, e.count, set.set_id
            ));
        }
        if e.addr.is_empty() {
            return Err(format!(
                "route entry {}+{} has no address",
                e.first, e.count
            ));
        }
        next_free = end;
    }
    Ok(())
}
