//! The fault schedule applied: each fault to the set it names (or the set
//! of the replica or process it names), range moves handed to the mover,
//! and the final heal.

use seqsvr_core::directory::HOME_SET;
use seqsvr_core::{Grant, SectionId};

use super::World;
use crate::env::{trace, Env};
use crate::faults::{AdoptFate, Fault, Forgery};
use crate::model::{
    alloc_name, AdminMsg, CallRef, Msg, PeerMsg, Pending, Slot, StoreMsg, StoreReq,
};
use crate::mover::Cmd;
use crate::net::Node;

impl World {
    /// Applies the `i`-th fault of the schedule.
    pub(super) fn apply_fault(&mut self, i: usize) {
        let fault = self.env.cfg.faults[i].1.clone();
        trace!(self.env, "FAULT #{i}: {fault}");
        match fault {
            f @ (Fault::IsolateReplica { .. }
            | Fault::DeposeLeader { .. }
            | Fault::CutAlloc { .. }
            | Fault::Heal { .. }
            | Fault::SlowNetwork { .. }) => self.apply_network_fault(i, f),
            f @ (Fault::CrashLeader { .. }
            | Fault::CrashReplica { .. }
            | Fault::RestartReplica { .. }
            | Fault::PauseReplica { .. }) => self.apply_replica_fault(i, f),
            f @ (Fault::CrashAlloc { .. }
            | Fault::RestartAlloc { .. }
            | Fault::PauseAlloc { .. }
            | Fault::PauseAfterAdmit { .. }
            | Fault::PauseInRenewal { .. }
            | Fault::PauseAfterClaim { .. }
            | Fault::StartTwin { .. }) => self.apply_alloc_fault(f),
            f @ (Fault::Handoff { .. } | Fault::HandoffOf { .. } | Fault::ForgeAdopt { .. }) => {
                self.apply_handoff_fault(f)
            }
            f @ (Fault::HandoffRoundTrip { .. } | Fault::HandBack { .. }) => {
                self.apply_round_trip(i, f)
            }
            f @ (Fault::OperatorAssign { .. }
            | Fault::SetLease { .. }
            | Fault::MoveRange { .. }
            | Fault::MoveBeside { .. }
            | Fault::CrashMover
            | Fault::PauseMover { .. }
            | Fault::MoveAgain
            | Fault::ResumeMove) => self.apply_operator_fault(f),
            f @ (Fault::Fence { .. }
            | Fault::MoveAway { .. }
            | Fault::AddSetAgain { .. }
            | Fault::ForgeForwarded { .. }) => self.apply_trust_fault(f),
            Fault::HealEverything => self.heal_everything(),
        }
    }

    /// A network fault: links cut one way or both, healed, slowed.
    fn apply_network_fault(&mut self, i: usize, fault: Fault) {
        let env = &mut self.env;
        let l = env.cfg.layout();
        match fault {
            Fault::IsolateReplica { r, allocs_too } => {
                let set = l.set_of_replica(r);
                let mut cuts: Vec<(Node, Node)> = (l.replicas_of(set))
                    .filter(|&o| o != r)
                    .map(|o| (Node::Replica(r), Node::Replica(o)))
                    .collect();
                if allocs_too {
                    let slots = 0..l.slots();
                    cuts.extend(slots.map(|a| (Node::Replica(r), Node::Alloc(a))));
                }
                self.cut(i, cuts);
            }
            Fault::DeposeLeader { set, alloc } => {
                let Some(leader) = self.stores[set].effective_leader(env) else {
                    return;
                };
                let leader = l.replica(set, leader);
                let others = || l.replicas_of(set).filter(move |&o| o != leader);
                let mut cuts: Vec<(Node, Node)> = others()
                    .map(|o| (Node::Replica(leader), Node::Replica(o)))
                    .collect();
                if let Some(a) = alloc {
                    cuts.extend(others().map(|o| (Node::Alloc(a), Node::Replica(o))));
                }
                self.cut(i, cuts);
            }
            Fault::CutAlloc {
                a,
                replicas,
                answers_only,
            } => {
                let links = replicas.iter().map(|&r| (Node::Replica(r), Node::Alloc(a)));
                if answers_only {
                    self.cut_directions(i, links.collect());
                } else {
                    self.cut(i, links.collect());
                }
            }
            Fault::Heal { of } => {
                for (x, y) in self.faults.cuts.remove(&of).unwrap_or_default() {
                    env.net.heal_one_way(x, y);
                }
            }
            Fault::SlowNetwork { dur } => env.net.slow_until = env.now + dur,
            other => unreachable!("{other} is not a network fault"),
        }
    }

    /// A store replica crashed, restarted or paused.
    fn apply_replica_fault(&mut self, i: usize, fault: Fault) {
        let env = &mut self.env;
        let l = env.cfg.layout();
        match fault {
            Fault::CrashLeader { set } => {
                if let Some(r) = self.stores[set].believed_leader() {
                    self.stores[set].crash(env, r);
                    self.faults.crashed.insert(i, l.replica(set, r));
                }
            }
            Fault::CrashReplica { r } => {
                let set = l.set_of_replica(r);
                self.stores[set].crash(env, r % l.replicas);
                self.faults.crashed.insert(i, r);
            }
            Fault::RestartReplica { of } => {
                if let Some(r) = self.faults.crashed.remove(&of) {
                    let set = l.set_of_replica(r);
                    self.stores[set].restart(env, r % l.replicas);
                }
            }
            Fault::PauseReplica {
                set,
                leader,
                r,
                dur,
            } => {
                let store = &mut self.stores[set];
                let lead = store.believed_leader();
                let target = if leader {
                    lead
                } else {
                    (0..store.len()).filter(|&o| Some(o) != lead).nth(r)
                };
                if let Some(t) = target {
                    store.pause(env, t, dur);
                }
            }
            other => unreachable!("{other} is not a replica fault"),
        }
    }

    /// An AllocSvr process crashed, restarted, paused (now or at its next
    /// admit, renewal or claim), or its twin started.
    fn apply_alloc_fault(&mut self, fault: Fault) {
        let env = &mut self.env;
        let l = env.cfg.layout();
        match fault {
            Fault::CrashAlloc { a } => self.allocs.crash(a),
            Fault::RestartAlloc { a } => self.allocs.restart(env, a),
            Fault::PauseAlloc { a, dur } => self.allocs.pause(env, a, dur),
            Fault::PauseAfterAdmit { a, dur } => {
                let p = &mut self.allocs.procs[a];
                if p.up && !p.paused {
                    p.pause_on_admit = Some(dur);
                }
            }
            Fault::PauseInRenewal { a, dur } => {
                let p = &mut self.allocs.procs[a];
                if p.up && !p.paused {
                    p.pause_on_renewal = Some(dur);
                }
            }
            Fault::PauseAfterClaim { a, dur } => {
                let p = &mut self.allocs.procs[a];
                if p.up && !p.paused {
                    p.pause_on_claim = Some(dur);
                }
            }
            Fault::StartTwin { set, a } => self.allocs.restart(env, l.twin_slot(set, a)),
            other => unreachable!("{other} is not an AllocSvr fault"),
        }
    }

    /// An operator's handoffs (`AllocAdmin.Handoff`), and a forged adopt.
    fn apply_handoff_fault(&mut self, fault: Fault) {
        let env = &mut self.env;
        match fault {
            Fault::Handoff {
                from,
                to,
                count,
                adopt,
            } => {
                let p = &self.allocs.procs[from];
                let Some(alloc) = p.alloc.as_ref().filter(|_| p.up && p.started) else {
                    return;
                };
                let mut served = alloc.served_sections();
                let mut moves = Vec::new();
                while moves.len() < count && !served.is_empty() {
                    let s = served.remove(env.rng.pick(served.len()));
                    moves.push((s, alloc_name(p.set, to)));
                }
                if moves.is_empty() {
                    return;
                }
                let m = Msg::Admin(AdminMsg::Handoff { moves, fate: adopt });
                env.send(Node::Operator, Node::Alloc(from), m);
            }
            Fault::HandoffOf { from, to, section } => {
                let p = &self.allocs.procs[from];
                let moves = vec![(section, alloc_name(p.set, to))];
                ask_handoff(env, from, moves);
            }
            Fault::ForgeAdopt { to, kind } => {
                let p = &self.allocs.procs[to];
                let grant = forge(env, p.set, &p.id, kind);
                let id = env.fresh_id();
                trace!(env, "forged adopt to p{to}: {grant:?}");
                let m = Msg::Peer(PeerMsg::Adopt { id, grant });
                env.send(Node::Operator, Node::Alloc(to), m);
            }
            other => unreachable!("{other} is not a handoff fault"),
        }
    }

    /// A handoff whose section is to come back (`HandoffRoundTrip`), and
    /// its return (`HandBack`).
    fn apply_round_trip(&mut self, i: usize, fault: Fault) {
        let env = &mut self.env;
        let l = env.cfg.layout();
        match fault {
            Fault::HandoffRoundTrip {
                from,
                to,
                stall,
                window,
            } => {
                let p = &self.allocs.procs[from];
                let Some(alloc) = p.alloc.as_ref().filter(|_| p.up && p.started) else {
                    return;
                };
                let served = alloc.served_sections();
                if served.is_empty() {
                    return;
                }
                let s = served[env.rng.pick(served.len())];
                env.net.stalls.retain(|(_, until, _)| *until > env.now);
                (env.net.stalls).push((Node::Alloc(from), env.now + window, stall));
                self.faults.round_trips.insert(i, (s, from));
                let moves = vec![(s, alloc_name(p.set, to))];
                ask_handoff(env, from, moves);
            }
            Fault::HandBack { of } => {
                let Some((s, from)) = self.faults.round_trips.remove(&of) else {
                    return;
                };
                // The operator asks whichever process of the set serves it.
                let set = l.set_of_slot(from);
                let holder = (l.slots_of(set)).find(|&q| self.allocs.procs[q].serves(s, env.now));
                let Some(q) = holder.filter(|&q| q != from) else {
                    return;
                };
                let moves = vec![(s, self.allocs.procs[from].id.clone())];
                ask_handoff(env, q, moves);
            }
            other => unreachable!("{other} is not a round trip fault"),
        }
    }

    /// An operator's store calls and range moves (the mover crashed,
    /// paused, run again).
    fn apply_operator_fault(&mut self, fault: Fault) {
        let env = &mut self.env;
        match fault {
            Fault::OperatorAssign {
                set,
                to,
                first,
                count,
                stale,
            } => {
                let range = first as usize..(first + count) as usize;
                let mut expected: Vec<u64> = env.truth[set].sections[range]
                    .iter()
                    .map(|r| r.epoch)
                    .collect();
                if stale {
                    expected[0] = expected[0].checked_sub(1).unwrap_or(1);
                }
                let req = StoreReq::Assign {
                    alloc: alloc_name(set, to),
                    first,
                    expected,
                };
                self.operator.call(env, set, req);
            }
            Fault::SetLease { set, terms } => {
                self.operator.call(env, set, StoreReq::SetLease(terms))
            }
            Fault::MoveRange {
                first,
                count,
                stop_after,
            } => {
                // The operator waits for a running mover to end: two
                // movers side by side are not drawn (see
                // `a_stale_mover_does_not_reinstall_a_moved_section`).
                if self.movers.running() {
                    return trace!(env, "operator: a mover still runs; no new move");
                }
                if let Some(cmd) = move_cmd(env, first, count) {
                    self.movers.start(env, cmd, stop_after);
                }
            }
            Fault::MoveBeside { first, count } => {
                if let Some(cmd) = move_cmd(env, first, count) {
                    self.movers.start(env, cmd, None);
                }
            }
            Fault::CrashMover => self.movers.crash(env),
            Fault::PauseMover { dur } => self.movers.pause(env, dur),
            Fault::MoveAgain => {
                if let Some(cmd) = pending_move(env).or(self.movers.last) {
                    self.movers.start(env, cmd, None);
                }
            }
            Fault::ResumeMove => {
                // The operator stops any mover still running (a hung
                // `seqctl`), then runs the move under way (`seqctl set
                // status` shows it) again, else the last command given.
                // Two movers of one move side by side are not drawn: see
                // `a_stale_mover_does_not_reinstall_a_moved_section`.
                self.movers.crash(env);
                if let Some(cmd) = pending_move(env).or(self.movers.last) {
                    self.movers.start(env, cmd, None);
                }
            }
            other => unreachable!("{other} is not an operator fault"),
        }
    }

    /// The final heal: every link healed, every replica and first process
    /// restarted (a fenced one crashed first), the twins stopped, and a move
    /// left half done finished.
    fn heal_everything(&mut self) {
        let env = &mut self.env;
        let l = env.cfg.layout();
        env.net.heal_all();
        self.faults.cuts.clear();
        for store in &mut self.stores {
            for r in 0..store.len() {
                store.restart(env, r);
            }
        }
        for set in 0..l.sets {
            for a in 0..l.allocs {
                let p = l.first_slot(set, a);
                if self.allocs.procs[p].fenced {
                    self.allocs.crash(p);
                }
                self.allocs.restart(env, p);
                self.allocs.procs[p].pause_on_admit = None;
                self.allocs.procs[p].pause_on_renewal = None;
                self.allocs.procs[p].pause_on_claim = None;
                self.allocs.crash(l.twin_slot(set, a));
            }
        }
        // The operator finishes a move left half done (stopping
        // any mover still running first).
        if let Some(cmd) = pending_move(env) {
            self.movers.crash(env);
            self.movers.start(env, cmd, None);
        }
    }

    /// The operator's and a stranger's faults (`Fault::Fence`,
    /// `MoveAway`, `AddSetAgain`, `ForgeForwarded`).
    fn apply_trust_fault(&mut self, fault: Fault) {
        let env = &mut self.env;
        match fault {
            Fault::Fence { a } => {
                let p = &self.allocs.procs[a];
                let set = p.set;
                // The incarnation the store has registered (the operator
                // reads it from `seqctl alloc list`).
                let Some(rec) = env.truth[set].allocs.get(&p.id) else {
                    return;
                };
                env.stats.operator_fences += 1;
                let req = StoreReq::Fence {
                    alloc: p.id.clone(),
                    incarnation: rec.incarnation,
                };
                self.operator.call(env, set, req);
            }
            Fault::MoveAway { a } => {
                if self.movers.running() {
                    return trace!(env, "operator: a mover still runs; no new move");
                }
                let p = &self.allocs.procs[a];
                let movable = env.cfg.movable();
                let Some(s) = (env.truth[p.set].sections.iter().enumerate())
                    .filter(|(s, r)| {
                        movable.contains(&(*s as SectionId))
                            && r.owner.as_deref() == Some(p.id.as_str())
                    })
                    .map(|(s, _)| s as SectionId)
                    .next()
                else {
                    return trace!(env, "operator: p{a} owns no movable section");
                };
                if let Some(cmd) = move_cmd(env, s, 1) {
                    self.movers.start(env, cmd, None);
                }
            }
            Fault::AddSetAgain { set } => self.add_set_again(set),
            Fault::ForgeForwarded { by, a, to } => self.forge_forwarded(by, a, to),
            other => unreachable!("{other} is not one of the trust faults"),
        }
    }

    /// An operator adds set `set` again (`Fault::AddSetAgain`): the
    /// addition's install repeated, with the range it was added with.
    fn add_set_again(&mut self, set: usize) {
        let env = &mut self.env;
        let Some(dir) = env.truth[HOME_SET as usize].directory.as_ref() else {
            return;
        };
        let spec = env.cfg.spec(set).clone();
        let id = spec.set_id;
        let (begin, end) = match dir.moving {
            Some(m) if m.from == id || m.to == id => (m.begin, m.end),
            // The range it was added with: what its span holds
            // beyond the set before it (`bootstrap_logs`).
            _ => (env.cfg.spec(set - 1).uid_end, spec.uid_end),
        };
        let (Some(first), Some(last)) = (spec.section_of(begin), spec.section_of(end - 1)) else {
            return;
        };
        env.stats.additions_repeated += 1;
        let call = seqsvr_core::SetCall {
            set: id,
            move_id: 0,
            begin,
            end,
            kind: seqsvr_core::SetKind::Addition,
        };
        let req = StoreReq::Install {
            first,
            floors: vec![0; (last - first + 1) as usize],
            call,
        };
        self.operator.call(env, set, req);
    }

    /// A member replica `by` forwards a forged `Handoff` of one of process
    /// `a`'s sections to `to` (`Fault::ForgeForwarded`).
    fn forge_forwarded(&mut self, by: usize, a: Slot, to: usize) {
        let env = &mut self.env;
        let l = env.cfg.layout();
        let p = &self.allocs.procs[a];
        let set = p.set;
        let mine: Vec<SectionId> = (env.truth[set].sections.iter().enumerate())
            .filter(|(_, r)| r.owner.as_deref() == Some(p.id.as_str()))
            .map(|(s, _)| s as SectionId)
            .collect();
        let Some(leader) = self.stores[set].believed_leader() else {
            return;
        };
        if mine.is_empty() {
            return;
        }
        let s = mine[env.rng.pick(mine.len())];
        let rec = &env.truth[set].sections[s as usize];
        let req = StoreReq::Handoff {
            from: p.id.clone(),
            incarnation: rec.incarnation,
            to: alloc_name(set, to),
            section: s,
            epoch: rec.epoch,
        };
        trace!(env, "r{by} forges {req:?}");
        let call = CallRef {
            node: Node::Replica(by),
            life: 0,
            call: env.fresh_id(),
            attempt: 0,
        };
        // As a member's forward would look (its answer goes back
        // through the forwarder, which has no such call).
        let fwd = Pending {
            call,
            req,
            forwarded: true,
            via: Some((leader, env.fresh_id())),
        };
        let to = Node::Replica(l.replica(set, leader));
        env.send(Node::Replica(by), to, Msg::Store(StoreMsg::Req(fwd)));
    }

    /// Cuts `links` both ways, remembering them under fault `i`.
    fn cut(&mut self, i: usize, links: Vec<(Node, Node)>) {
        let both = links.iter().flat_map(|&(x, y)| [(x, y), (y, x)]).collect();
        self.cut_directions(i, both);
    }

    fn cut_directions(&mut self, i: usize, cuts: Vec<(Node, Node)>) {
        for &(x, y) in &cuts {
            self.env.net.cut_one_way(x, y);
        }
        self.faults.cuts.entry(i).or_default().extend(cuts);
    }
}

/// The operator asks AllocSvr process `to` to hand `moves` off
/// (`AllocAdmin.Handoff`), its adopts delivered normally.
fn ask_handoff(env: &mut Env, to: Slot, moves: Vec<(SectionId, String)>) {
    let m = Msg::Admin(AdminMsg::Handoff {
        moves,
        fate: AdoptFate::Normal,
    });
    env.send(Node::Operator, Node::Alloc(to), m);
}

/// The command that finishes the move under way, if any (the committed
/// directory shows it).
fn pending_move(env: &Env) -> Option<Cmd> {
    let home = &env.truth[HOME_SET as usize];
    let m = home.directory.as_ref()?.moving?;
    Some(Cmd {
        begin: m.begin,
        end: m.end,
        to: m.to,
    })
}

/// The command an operator gives for "move sections `first..first+count`
/// to the other set", reading the directory first: the range is cut short
/// to the run the set serving `first` serves, and goes to the other set.
fn move_cmd(env: &Env, first: SectionId, count: u32) -> Option<Cmd> {
    let dir = env.truth[HOME_SET as usize].directory.as_ref()?;
    let grid = env.cfg.grid();
    let uid = |s: SectionId| grid.uids_of(s).start;
    let from = dir.set_of(uid(first))?;
    let mut end = first + 1;
    while end < first + count && dir.set_of(uid(end)) == Some(from) {
        end += 1;
    }
    let to = (0..env.cfg.sets.len() as u32).find(|&s| s != from)?;
    Some(Cmd {
        begin: uid(first),
        end: grid.uids_of(end - 1).end,
        to,
    })
}

/// A forged adopt's grant for AllocSvr `me` of `set`, from the committed
/// state.
fn forge(env: &mut Env, set: usize, me: &str, kind: Forgery) -> Grant {
    let step = env.cfg.step();
    let truth = &env.truth[set];
    let n = truth.sections.len();
    let mine: Vec<bool> = (truth.sections.iter())
        .map(|r| r.owner.as_deref() == Some(me))
        .collect();
    let owned: Vec<bool> = truth.sections.iter().map(|r| r.owner.is_some()).collect();
    let fits: Vec<usize> = (0..n)
        .filter(|&s| match kind {
            Forgery::HugeEpoch | Forgery::Replay => mine[s],
            Forgery::OtherOwners => !mine[s] && owned[s],
            Forgery::WrongSection => true,
        })
        .collect();
    let s = if fits.is_empty() {
        env.rng.pick(n)
    } else {
        fits[env.rng.pick(fits.len())]
    } as SectionId;
    let recs = &env.truth[set].sections;
    let r = &recs[s as usize];
    match kind {
        Forgery::HugeEpoch => Grant {
            section: s,
            epoch: 1 << 63,
            prev_ceiling: r.start,
            max_seq: r.max_seq + step,
        },
        Forgery::OtherOwners => Grant {
            section: s,
            epoch: r.epoch,
            prev_ceiling: r.start,
            max_seq: r.max_seq.max(r.start + 1),
        },
        Forgery::WrongSection => {
            let o = &recs[(s as usize + 1) % n];
            Grant {
                section: s,
                epoch: r.epoch + 1,
                prev_ceiling: o.start,
                max_seq: o.max_seq.max(o.start + 1),
            }
        }
        Forgery::Replay => {
            let prev = r.start.saturating_sub(step);
            Grant {
                section: s,
                epoch: r.epoch.saturating_sub(1),
                prev_ceiling: prev,
                max_seq: prev + step,
            }
        }
    }
}
