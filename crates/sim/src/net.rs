//! Virtual time and the network: who can reach whom, and how long a
//! message takes.
//!
//! Links are either up or cut, per direction (most faults cut both; a
//! one-way cut models an asymmetric partition: requests get through,
//! answers do not). A message is dropped if its link is cut when it is sent
//! *or* when it would arrive (a partition that starts while a message is in
//! flight loses it). Delays are drawn per
//! message, so messages on one link may overtake each other, as on a real
//! network with retransmissions and several connections.

use std::collections::BTreeSet;

use crate::rng::Rng;

/// Virtual time in nanoseconds since the start of the run.
pub type Time = u64;
/// One microsecond of virtual time.
pub const US: Time = 1_000;
/// One millisecond of virtual time.
pub const MS: Time = 1_000_000;
/// One second of virtual time.
pub const SEC: Time = 1_000_000_000;

/// Formats a virtual time as seconds with microseconds (`12.345678s`).
pub fn fmt_time(t: Time) -> String {
    format!("{}.{:06}s", t / SEC, (t % SEC) / US)
}

/// A process of the simulated deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Node {
    /// A store replica, by index.
    Replica(usize),
    /// An AllocSvr process, by slot (two slots may share an AllocSvr id:
    /// twins).
    Alloc(usize),
    /// A client, by index.
    Client(usize),
    /// The operator (`seqctl`): admin calls to the store and AllocSvrs,
    /// and forged messages.
    Operator,
    /// The operator's range mover (`seqctl set move`), a process of its
    /// own that may crash between or during its steps.
    Mover,
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Node::Replica(i) => write!(f, "r{i}"),
            Node::Alloc(i) => write!(f, "a{i}"),
            Node::Client(i) => write!(f, "c{i}"),
            Node::Operator => write!(f, "op"),
            Node::Mover => write!(f, "mover"),
        }
    }
}

/// How long messages take.
#[derive(Debug, Clone, PartialEq)]
pub struct Delays {
    /// Shortest one-way delay.
    pub min: Time,
    /// Longest ordinary one-way delay.
    pub max: Time,
    /// Chance that a message is slow (a retransmission, a GC on the way).
    pub slow_chance: f64,
    /// Longest delay of a slow message.
    pub slow_max: Time,
}

impl Default for Delays {
    fn default() -> Self {
        Self {
            min: 50 * US,
            max: 2 * MS,
            slow_chance: 0.01,
            slow_max: 150 * MS,
        }
    }
}

/// The network: cut links and delays.
#[derive(Debug, Clone, Default)]
pub struct Net {
    /// Cut directions `(from, to)`.
    cut: BTreeSet<(Node, Node)>,
    /// Delays in ordinary times.
    pub delays: Delays,
    /// Until when every message is slow (a fault), if ever.
    pub slow_until: Time,
    /// Stalled senders: messages `node` sends to store replicas before
    /// `until` arrive `extra` late (a lossy link's retransmissions).
    pub stalls: Vec<(Node, Time, Time)>,
}

impl Net {
    /// Whether a message from `a` to `b` currently gets through.
    pub fn reaches(&self, a: Node, b: Node) -> bool {
        a == b || !self.cut.contains(&(a, b))
    }

    /// Whether `a` and `b` can currently exchange messages both ways.
    pub fn connected(&self, a: Node, b: Node) -> bool {
        self.reaches(a, b) && self.reaches(b, a)
    }

    /// Cuts messages from `a` to `b` (only that direction).
    pub fn cut_one_way(&mut self, a: Node, b: Node) {
        if a != b {
            self.cut.insert((a, b));
        }
    }

    /// Restores messages from `a` to `b`.
    pub fn heal_one_way(&mut self, a: Node, b: Node) {
        self.cut.remove(&(a, b));
    }

    /// Cuts the link between `a` and `b`, both ways.
    pub fn cut(&mut self, a: Node, b: Node) {
        self.cut_one_way(a, b);
        self.cut_one_way(b, a);
    }

    /// Restores the link between `a` and `b`, both ways.
    pub fn heal(&mut self, a: Node, b: Node) {
        self.heal_one_way(a, b);
        self.heal_one_way(b, a);
    }

    /// Restores every link.
    pub fn heal_all(&mut self) {
        self.cut.clear();
    }

    /// Whether any link is cut.
    pub fn any_cut(&self) -> bool {
        !self.cut.is_empty()
    }

    /// A one-way delay for a message from `from` to `to` sent at `now`.
    pub fn delay(&self, rng: &mut Rng, now: Time, from: Node, to: Node) -> Time {
        let d = &self.delays;
        let stall = (self.stalls.iter())
            .filter(|(n, until, _)| *n == from && now < *until && matches!(to, Node::Replica(_)))
            .map(|(_, _, extra)| *extra)
            .max()
            .unwrap_or(0);
        stall
            + if now < self.slow_until || rng.chance(d.slow_chance) {
                rng.range(d.max, d.slow_max + 1)
            } else {
                rng.range(d.min, d.max + 1)
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_are_symmetric_and_heal() {
        let mut n = Net::default();
        let (r0, a1) = (Node::Replica(0), Node::Alloc(1));
        assert!(n.connected(r0, a1));
        n.cut(a1, r0);
        assert!(!n.connected(r0, a1) && !n.connected(a1, r0));
        assert!(n.connected(r0, r0));
        n.heal(r0, a1);
        assert!(n.connected(a1, r0) && !n.any_cut());
        n.cut_one_way(r0, a1);
        assert!(!n.reaches(r0, a1) && n.reaches(a1, r0) && !n.connected(a1, r0));
        n.heal_one_way(r0, a1);
        assert!(!n.any_cut());
        assert_eq!(fmt_time(12 * SEC + 345 * MS + 6 * US), "12.345006s");
    }
}
