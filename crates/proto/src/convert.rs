//! The one home of every conversion between wire (protobuf) and core
//! types, as `From`/`TryFrom`, for every component. A wire value that
//! cannot be trusted (a route table whose runs overlap, a set that does
//! not validate) is refused here, before any component sees it.

use seqsvr_core::directory::{DirRange, PlaceRun, MAX_DIR_RANGES};
use seqsvr_core::{
    DirSet, Directory, Grant, PendingMove, Place, Placement, RouteEntry, RouteTable, SectionId,
    SectionRecord, SetSpec,
};

use crate::v1 as pb;

/// `StoreStatus.state` of a replica that leads its group.
pub const LEADER: &str = "Leader";

impl pb::StoreStatus {
    /// Whether the replica that answered leads its group: the one test of
    /// a status for leadership, for every caller that looks for the
    /// leader among replicas' answers.
    pub fn leads(&self) -> bool {
        self.state == LEADER
    }
}

impl From<(SectionId, &SectionRecord)> for pb::SectionState {
    fn from((section, r): (SectionId, &SectionRecord)) -> Self {
        pb::SectionState {
            section,
            max_seq: r.max_seq,
            epoch: r.epoch,
            owner: r.owner.clone().unwrap_or_default(),
            incarnation: r.incarnation,
            start: r.start,
        }
    }
}

impl From<&pb::SectionState> for SectionRecord {
    fn from(s: &pb::SectionState) -> Self {
        SectionRecord {
            max_seq: s.max_seq,
            epoch: s.epoch,
            owner: (!s.owner.is_empty()).then(|| s.owner.clone()),
            incarnation: s.incarnation,
            start: s.start,
        }
    }
}

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
            placement: placement_runs(&t.placement),
            directory: t.directory.as_ref().map(Into::into),
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
        let placement = placement_of(&set, &r.placement)?;
        let directory = r.directory.as_ref().map(Directory::try_from).transpose()?;
        Ok(RouteTable {
            version: r.version,
            set,
            entries,
            placement,
            directory,
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

/// A placement as protobuf runs.
pub fn placement_runs(p: &Placement) -> Vec<pb::PlaceRun> {
    p.runs
        .iter()
        .map(|r| {
            let (kind, to_set) = match r.place {
                Place::Moved { to } => (pb::PlaceKind::PlaceMoved, to),
                _ => (pb::PlaceKind::PlaceAbsent, 0),
            };
            pb::PlaceRun {
                first_section: r.first,
                end_section: r.end,
                kind: kind as i32,
                to_set,
            }
        })
        .collect()
}

/// Checks that runs are sorted, disjoint, non-empty and inside the set.
fn placement_of(set: &SetSpec, runs: &[pb::PlaceRun]) -> Result<Placement, String> {
    let mut out = Vec::with_capacity(runs.len());
    let mut next_free = 0u32;
    for r in runs {
        if r.first_section < next_free
            || r.end_section <= r.first_section
            || r.end_section > set.section_count()
        {
            return Err(format!(
                "placement run {}..{} overlaps or leaves set {}",
                r.first_section, r.end_section, set.set_id
            ));
        }
        let place = match pb::PlaceKind::try_from(r.kind) {
            Ok(pb::PlaceKind::PlaceAbsent) => Place::Absent,
            Ok(pb::PlaceKind::PlaceMoved) => Place::Moved { to: r.to_set },
            _ => return Err(format!("placement run with unknown kind {}", r.kind)),
        };
        out.push(PlaceRun {
            first: r.first_section,
            end: r.end_section,
            place,
        });
        next_free = r.end_section;
    }
    Ok(Placement {
        runs: out,
        last_move: 0,
    })
}

impl From<&Directory> for pb::Directory {
    fn from(d: &Directory) -> Self {
        pb::Directory {
            version: d.version,
            sets: d
                .sets
                .values()
                .map(|s| pb::DirSet {
                    spec: Some((&s.spec).into()),
                    stores: s.stores.clone(),
                    admin: s.admin.clone(),
                })
                .collect(),
            ranges: d
                .ranges
                .iter()
                .map(|r| pb::DirRange {
                    begin: r.begin,
                    end: r.end,
                    set_id: r.set,
                })
                .collect(),
            move_id: d.move_id,
            moving: d.moving.map(|m| pb::PendingMove {
                begin: m.begin,
                end: m.end,
                from_set: m.from,
                to_set: m.to,
            }),
        }
    }
}

/// Converts a protobuf directory, checking what lookups rely on: valid set
/// specs, ids unique, ranges sorted, disjoint, non-empty and naming known
/// sets.
impl TryFrom<&pb::Directory> for Directory {
    type Error = String;

    fn try_from(d: &pb::Directory) -> Result<Self, String> {
        if d.sets.len() > MAX_DIR_RANGES || d.ranges.len() > MAX_DIR_RANGES {
            return Err("directory too large".into());
        }
        let mut sets = std::collections::BTreeMap::new();
        for s in &d.sets {
            let spec = SetSpec::try_from(s.spec.as_ref().ok_or("directory set without spec")?)?;
            let id = spec.set_id;
            let entry = DirSet {
                spec,
                stores: s.stores.clone(),
                admin: s.admin.clone(),
            };
            if sets.insert(id, entry).is_some() {
                return Err(format!("directory lists set {id} twice"));
            }
        }
        let mut ranges = Vec::with_capacity(d.ranges.len());
        let mut next_free = 0u64;
        for r in &d.ranges {
            if r.end <= r.begin || r.begin < next_free || !sets.contains_key(&r.set_id) {
                return Err(format!(
                    "directory range [{}, {}) of set {} is empty, overlaps or names no set",
                    r.begin, r.end, r.set_id
                ));
            }
            ranges.push(DirRange {
                begin: r.begin,
                end: r.end,
                set: r.set_id,
            });
            next_free = r.end;
        }
        Ok(Directory {
            version: d.version,
            sets,
            ranges,
            move_id: d.move_id,
            moving: d.moving.as_ref().map(|m| PendingMove {
                begin: m.begin,
                end: m.end,
                from: m.from_set,
                to: m.to_set,
            }),
        })
    }
}
