//! The one home of every conversion between wire (protobuf) and core
//! types, as `From`/`TryFrom`, for every component. A wire value that
//! cannot be trusted (a route table whose runs overlap, a set that does
//! not validate) is refused here, before any component sees it.

use seqsvr_core::{Grant, RouteEntry, RouteTable, SetSpec};

use crate::v1 as pb;

impl From<&SetSpec> for pb::SetSpec {
    fn from(s: &SetSpec) -> Self {
        pb::SetSpec {
            set_id: s.set_id,
            uid_begin: s.uid_begin,
            uid_end: s.uid_end,
            section_size: s.section_size,
            step: s.step,
        }
    }
}

impl TryFrom<&pb::SetSpec> for SetSpec {
    type Error = String;

    fn try_from(s: &pb::SetSpec) -> Result<Self, String> {
        let set = SetSpec {
            set_id: s.set_id,
            uid_begin: s.uid_begin,
            uid_end: s.uid_end,
            section_size: s.section_size,
            step: s.step,
        };
        set.validate().map_err(|e| e.to_string())?;
        Ok(set)
    }
}

impl From<&Grant> for pb::SectionGrant {
    fn from(g: &Grant) -> Self {
        pb::SectionGrant {
            section: g.section,
            epoch: g.epoch,
            prev_ceiling: g.prev_ceiling,
            max_seq: g.max_seq,
        }
    }
}

impl From<&pb::SectionGrant> for Grant {
    fn from(g: &pb::SectionGrant) -> Self {
        Grant {
            section: g.section,
            epoch: g.epoch,
            prev_ceiling: g.prev_ceiling,
            max_seq: g.max_seq,
        }
    }
}

impl From<&RouteTable> for pb::RouteTable {
    fn from(t: &RouteTable) -> Self {
        pb::RouteTable {
            version: t.version,
            set: Some((&t.set).into()),
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
}

/// Converts a protobuf route table to the core type, checking that it can
/// be trusted for routing: a valid set, and runs that are sorted, disjoint,
/// inside the set and addressed.
impl TryFrom<&pb::RouteTable> for RouteTable {
    type Error = String;

    fn try_from(r: &pb::RouteTable) -> Result<Self, String> {
        let set = SetSpec::try_from(r.set.as_ref().ok_or("route table without set")?)?;
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
