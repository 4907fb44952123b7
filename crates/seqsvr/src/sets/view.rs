//! `seqctl set status`: the directory and, per set, its stores (leader,
//! term, members), what it serves, and its AllocSvrs' leases.

use serde::Serialize;

use seqsvr_core::Place;

use super::{Result, Sets};

/// One store replica as it reports itself.
#[derive(Debug, Clone, Serialize)]
pub struct StoreView {
    /// Client-plane address asked.
    pub addr: String,
    /// Raft state, or why it could not be read.
    pub state: String,
    /// Term.
    pub term: u64,
    /// Leader id (0: none known).
    pub leader: u64,
    /// Members: (id, voter).
    pub members: Vec<(u64, bool)>,
    /// Last applied log index.
    pub applied: u64,
}

/// One set.
#[derive(Debug, Clone, Serialize)]
pub struct SetView {
    /// The set.
    pub id: u32,
    /// Its span.
    pub span: (u64, u64),
    /// The ranges the directory gives it.
    pub ranges: Vec<(u64, u64)>,
    /// Its stores.
    pub stores: Vec<StoreView>,
    /// Route version.
    pub route_version: u64,
    /// Sections served / absent / moved away.
    pub serving: u32,
    /// See `serving`.
    pub absent: u32,
    /// See `serving`.
    pub moved: u32,
    /// AllocSvrs and their sections: (id, sections, lease expired).
    pub allocs: Vec<(String, u32, bool)>,
    /// Directory version its store holds.
    pub directory_version: u64,
}

/// The whole cluster.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterView {
    /// Directory version (home group's).
    pub directory_version: u64,
    /// A move under way: (begin, end, from, to).
    pub moving: Option<(u64, u64, u32, u32)>,
    /// Every set.
    pub sets: Vec<SetView>,
}

/// Reads the directory and every set.
pub async fn view(sets: &Sets) -> Result<ClusterView> {
    let dir = sets.directory().await?;
    let mut out = Vec::new();
    for (id, set) in &dir.sets {
        let mut stores = Vec::new();
        for addr in &set.stores {
            let st = super::add::status_of(sets, addr).await;
            stores.push(match st {
                Ok(s) => StoreView {
                    addr: addr.clone(),
                    state: s.state,
                    term: s.term,
                    leader: s.leader_id,
                    members: s.members.iter().map(|m| (m.id, m.voter)).collect(),
                    applied: s.last_applied,
                },
                Err(e) => StoreView {
                    addr: addr.clone(),
                    state: format!("unreachable: {e}"),
                    term: 0,
                    leader: 0,
                    members: Vec::new(),
                    applied: 0,
                },
            });
        }
        let (mut route_version, mut directory_version) = (0, 0);
        let (mut serving, mut absent, mut moved) = (set.spec.section_count(), 0, 0);
        if let Ok(t) = sets.routes(&set.stores).await {
            route_version = t.version;
            directory_version = t.directory.map_or(0, |d| d.version);
            for r in &t.placement.runs {
                let n = r.end - r.first;
                serving -= n;
                match r.place {
                    Place::Moved { .. } => moved += n,
                    _ => absent += n,
                }
            }
        }
        let allocs = sets
            .leader_status(&set.admin)
            .await
            .map(|l| {
                l.allocs
                    .iter()
                    .map(|a| (a.alloc_id.clone(), a.sections, a.expired))
                    .collect()
            })
            .unwrap_or_default();
        out.push(SetView {
            id: *id,
            span: (set.spec.uid_begin, set.spec.uid_end),
            ranges: dir
                .ranges
                .iter()
                .filter(|r| r.set == *id)
                .map(|r| (r.begin, r.end))
                .collect(),
            stores,
            route_version,
            serving,
            absent,
            moved,
            allocs,
            directory_version,
        });
    }
    Ok(ClusterView {
        directory_version: dir.version,
        moving: dir.moving.map(|m| (m.begin, m.end, m.from, m.to)),
        sets: out,
    })
}

impl std::fmt::Display for ClusterView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "directory version {}", self.directory_version)?;
        if let Some((b, e, from, to)) = self.moving {
            writeln!(
                f,
                "  move under way: [{b}, {e}) from set {from} to set {to}"
            )?;
        }
        for s in &self.sets {
            writeln!(
                f,
                "set {}: span [{}, {}), serves {:?}; sections {} serving, {} absent, {} moved away; route version {}, directory copy v{}",
                s.id, s.span.0, s.span.1, s.ranges, s.serving, s.absent, s.moved, s.route_version, s.directory_version
            )?;
            for st in &s.stores {
                let members: Vec<String> = st
                    .members
                    .iter()
                    .map(|(id, voter)| {
                        if *voter {
                            id.to_string()
                        } else {
                            format!("{id}(learner)")
                        }
                    })
                    .collect();
                writeln!(
                    f,
                    "  store {:<22} {:<10} term {:<4} leader {:<3} applied {:<8} members [{}]",
                    st.addr,
                    st.state,
                    st.term,
                    st.leader,
                    st.applied,
                    members.join(", ")
                )?;
            }
            for (id, n, expired) in &s.allocs {
                let lease = if *expired {
                    "lease expired"
                } else {
                    "lease live"
                };
                writeln!(f, "  alloc {id:<12} {n} sections, {lease}")?;
            }
        }
        Ok(())
    }
}
