//! The AllocSvrs a set knows: registration (one live incarnation per id,
//! docs/architecture/promises.md, promise 3), fencing, retiring and the
//! record of a planned stop, and the incarnation check every AllocSvr
//! command passes first.

use super::*;

impl SetState {
    pub(super) fn register(
        &mut self,
        alloc: &AllocId,
        [addr, peer_addr, admin_addr]: [&String; 3],
        incarnation: Incarnation,
        replaces: Incarnation,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        self.spec()?;
        check_name("alloc id", alloc)?;
        check_name("address", addr)?;
        check_name("peer address", peer_addr)?;
        check_name("admin address", admin_addr)?;
        if incarnation == 0 {
            return Err(Rejection::Invalid("incarnation must not be 0".into()));
        }
        if let Some(rec) = self.allocs.get(alloc) {
            // One process per id (twins are refused); a replacement only
            // once the leader saw the old one's lease certainly expire.
            if rec.incarnation != incarnation && rec.incarnation != replaces {
                return Err(Rejection::Twin {
                    alloc: alloc.clone(),
                    live: rec.incarnation,
                    addr: rec.addr.clone(),
                });
            }
            if rec.incarnation == incarnation && rec.fenced {
                return Err(Rejection::StaleIncarnation {
                    alloc: alloc.clone(),
                    given: incarnation,
                    current: 0,
                });
            }
        }
        let rec = self.allocs.entry(alloc.clone()).or_default();
        let readdressed = rec.addr != *addr;
        let new = AllocRecord {
            addr: addr.clone(),
            peer_addr: peer_addr.clone(),
            admin_addr: admin_addr.clone(),
            draining: rec.draining,
            incarnation,
            fenced: false,
            sections_version: rec.sections_version,
        };
        if *rec != new {
            *rec = new;
            dirty.push(Dirty::Alloc(alloc.clone()));
        }
        if readdressed {
            self.route_version += 1;
            dirty.push(Dirty::RouteVersion);
        }
        Ok(Reply::Registered {
            route_version: self.route_version,
        })
    }

    pub(super) fn fence(
        &mut self,
        alloc: &AllocId,
        incarnation: Incarnation,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        let rec = self.registered_as(alloc, incarnation)?;
        if !rec.fenced {
            rec.fenced = true;
            dirty.push(Dirty::Alloc(alloc.clone()));
        }
        Ok(Reply::Registered {
            route_version: self.route_version,
        })
    }

    /// Forgets `alloc` if `incarnation` is still the registered one and
    /// it owns no section this set serves. Its process, if it still runs,
    /// is refused from then on (`NOT_REGISTERED`), as a fenced one is.
    pub(super) fn retire(
        &mut self,
        alloc: &AllocId,
        incarnation: Incarnation,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        self.registered_as(alloc, incarnation)?;
        let owned: Vec<SectionId> = (0..self.sections.len() as SectionId)
            .filter(|&s| {
                self.sections[s as usize].owner.as_ref() == Some(alloc)
                    && self.placement.place_of(s) == Place::Serving
            })
            .collect();
        if let Some(&first) = owned.first() {
            return Err(Rejection::AllocInUse {
                alloc: alloc.clone(),
                reason: format!(
                    "it owns {} section(s) of this set (first: {first}); drain it \
                     (seqctl alloc drain) or let the arbiter move them first",
                    owned.len()
                ),
            });
        }
        self.allocs.remove(alloc);
        dirty.push(Dirty::Alloc(alloc.clone()));
        Ok(Reply::Registered {
            route_version: self.route_version,
        })
    }

    /// See [`Command::StopAlloc`]. Only the registered, unfenced
    /// incarnation may stop itself; running it again is refused as a stale
    /// incarnation and changes nothing.
    pub(super) fn stop_alloc(
        &mut self,
        alloc: &AllocId,
        incarnation: Incarnation,
        dirty: &mut Vec<Dirty>,
    ) -> Outcome {
        self.check_incarnation(alloc, incarnation)?;
        let mut released = 0u32;
        for (i, r) in self.sections.iter_mut().enumerate() {
            if r.owner.as_ref() != Some(alloc) {
                continue;
            }
            // The owner stays (the id's next process claims its sections
            // back through its first renewal), under a new epoch and no
            // incarnation: nothing the stopped process may still send is
            // accepted, and the next owner starts above everything
            // granted so far.
            r.epoch += 1;
            r.incarnation = 0;
            r.start = r.max_seq;
            released += 1;
            dirty.push(Dirty::Section(i as SectionId));
        }
        let rec = self.allocs.get_mut(alloc).expect("checked above");
        rec.incarnation = 0;
        dirty.push(Dirty::Alloc(alloc.clone()));
        // The id's sections changed hands (to no process), so its
        // sections version moves.
        self.routes_changed(BTreeSet::from([alloc.clone()]), dirty);
        Ok(Reply::Stopped {
            released,
            route_version: self.route_version,
        })
    }

    /// `alloc`'s record, if `incarnation` is the registered one (fenced or
    /// not): an operator's command names the incarnation it decided on.
    pub(super) fn registered_as(
        &mut self,
        alloc: &AllocId,
        incarnation: Incarnation,
    ) -> Result<&mut AllocRecord, Rejection> {
        let rec = self.registered_mut(alloc)?;
        if rec.incarnation != incarnation {
            return Err(Rejection::StaleIncarnation {
                alloc: alloc.clone(),
                given: incarnation,
                current: rec.incarnation,
            });
        }
        Ok(rec)
    }

    pub(super) fn registered_mut(
        &mut self,
        alloc: &AllocId,
    ) -> Result<&mut AllocRecord, Rejection> {
        self.spec()?;
        self.allocs
            .get_mut(alloc)
            .ok_or_else(|| Rejection::NotRegistered {
                alloc: alloc.clone(),
            })
    }

    /// Checks that `alloc` is registered with `incarnation` and not fenced.
    pub fn check_incarnation(
        &self,
        alloc: &AllocId,
        incarnation: Incarnation,
    ) -> Result<&AllocRecord, Rejection> {
        let rec = self
            .allocs
            .get(alloc)
            .ok_or_else(|| Rejection::NotRegistered {
                alloc: alloc.clone(),
            })?;
        if rec.incarnation != incarnation || rec.fenced {
            return Err(Rejection::StaleIncarnation {
                alloc: alloc.clone(),
                given: incarnation,
                current: if rec.fenced { 0 } else { rec.incarnation },
            });
        }
        Ok(rec)
    }
}
