//! A replica's crash, restart (rejoining from its log) and pause
//! (SIGSTOP), with what queued meanwhile handled on resume.

use crate::env::{trace, Env};
use crate::model::{Ev, RTimer};
use crate::net::{Time, MS, US};

use super::{Replica, Store};

impl Store {
    /// kill -9 of a replica: the API layer's state is volatile.
    pub(crate) fn crash(&mut self, env: &mut Env, r: usize) {
        if !self.raft.nodes[r].up {
            return;
        }
        let mut out = Vec::new();
        self.raft.crash(r, &mut out);
        self.process(env, out);
        let terms = self.raft.nodes[r].state.lease.terms;
        self.reps[r] = Replica::new(env, terms);
    }

    /// Restarts a crashed replica as a follower.
    pub(crate) fn restart(&mut self, env: &mut Env, r: usize) {
        if self.raft.nodes[r].up {
            return;
        }
        let t = env.election_timeout();
        let node = &mut self.raft.nodes[r];
        node.up = true;
        node.election_at = t;
        self.reps[r].tick_gen += 1;
        self.next_tick(env, r);
    }

    /// SIGSTOP of replica `r` for `d`.
    pub(crate) fn pause(&mut self, env: &mut Env, r: usize, d: Time) {
        let node = &mut self.raft.nodes[r];
        if !node.up || node.paused {
            return;
        }
        node.paused = true;
        let life = node.life;
        trace!(env, "{} paused for {} ms", self.raft.node(r), d / MS);
        env.after(
            d,
            Ev::Replica {
                set: self.raft.set,
                r,
                life,
                t: RTimer::Resume,
            },
        );
    }

    /// SIGCONT: what queued up is handled in a random interleaving; the
    /// timers run again (an election or heartbeat is due at once).
    pub(super) fn resume(&mut self, env: &mut Env, r: usize) {
        let node = &mut self.raft.nodes[r];
        if !node.paused {
            return;
        }
        node.paused = false;
        let life = node.life;
        trace!(env, "{} resumes", self.raft.node(r));
        for input in std::mem::take(&mut self.reps[r].inbox) {
            let d = env.rng.range(0, 200 * US);
            let set = self.raft.set;
            env.after(
                d,
                Ev::ReplicaResumed {
                    set,
                    r,
                    life,
                    input,
                },
            );
        }
        self.reps[r].tick_gen += 1;
        let gen = self.reps[r].tick_gen;
        env.after(
            0,
            Ev::Replica {
                set: self.raft.set,
                r,
                life,
                t: RTimer::Tick(gen),
            },
        );
    }
}
