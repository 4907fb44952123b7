//! Bootstrap, safe to repeat: only a brand-new lowest-id member whose
//! peers report no cluster initialises the group; then the leader
//! configures the set, the initial routes and the lease terms once.
//!
//! A replica configured with `join = true` never initialises. A replica
//! added to a running group is usually brand-new and often the lowest id
//! of the members it is told about (a replacement for every original
//! replica, say, lists only the new ones); asking its peers is no
//! protection when none of them runs yet. Initialising would give it a
//! history of its own, and the group it is added to would then have two
//! logs claiming the same terms. (The leader refuses to add a replica that
//! reports any history, so such a mistake is caught; `join` keeps it from
//! happening.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use seqsvr_proto::store_peer_client::StorePeerClient;
use seqsvr_store_api::client::Connector;
use seqsvr_store_core::backup::RestorePlan;

use crate::service::StoreApi;
use crate::types::{Command, NodeId, Raft};

use super::config::StoreConfig;

/// Whether this replica may initialise a new group: it is brand-new
/// (`fresh`: no vote, no log), the lowest id among its configured members,
/// and not configured to join a running group.
pub(super) fn may_initialise(cfg: &StoreConfig, fresh: bool) -> bool {
    let lowest = cfg.members.iter().map(|m| m.id).min() == Some(cfg.id);
    fresh && lowest && !cfg.join
}

/// Whether any peer already belongs to an initialised cluster.
pub(super) async fn peers_initialised(cfg: &StoreConfig, connect: &Connector) -> bool {
    for m in cfg.members.iter().filter(|m| m.id != cfg.id) {
        let Ok(ch) = connect(&m.addr) else {
            continue;
        };
        let mut c = StorePeerClient::new(ch);
        let call = c.status(seqsvr_proto::StatusRequest {});
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(500), call).await {
            let s = s.into_inner();
            if s.term > 0 || s.last_log_index > 0 || !s.members.is_empty() {
                return true;
            }
        }
    }
    false
}

/// Whether this replica, starting on an empty disk (`fresh`), is a member
/// that lost its disk: some peer leads a group that has replicated its log
/// to this node id already. Its vote and log went with the disk, so it
/// could vote twice in one term, and its leader's Raft core stops when a
/// follower's log goes back; the way out is a new id
/// (docs/operations.md, "Lost one replica"). Returns the refusal.
///
/// Asked of the configured peers and of any leader they name, each within
/// 500 ms; a peer that does not answer says nothing. A brand-new member
/// that starts late, or a joining one, has received nothing yet, so the
/// leader knows no matched index for it and it starts as before.
pub(super) async fn lost_disk(cfg: &StoreConfig, connect: &Connector) -> Option<String> {
    let mut ask: Vec<String> = cfg
        .members
        .iter()
        .filter(|m| m.id != cfg.id)
        .map(|m| m.addr.clone())
        .collect();
    let mut asked = 0;
    while asked < ask.len() && asked < 8 {
        let addr = ask[asked].clone();
        asked += 1;
        let Ok(ch) = connect(&addr) else {
            continue;
        };
        let mut c = StorePeerClient::new(ch);
        let call = c.status(seqsvr_proto::StatusRequest {});
        let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(500), call).await else {
            continue;
        };
        let s = s.into_inner();
        if let Some(r) = s
            .replication
            .iter()
            .find(|r| r.id == cfg.id && r.matched && r.matched_index > 0)
        {
            return Some(format!(
                "store node {} starts on an empty data dir ({}), but the group's leader \
                 (node {}) has replicated its log to node {} up to index {}: this replica \
                 lost its disk, and with it its vote and log. It must not rejoin under its \
                 old id; start it under a new id and run `seqctl store replace --old {} \
                 --new <id>=<addr>` (docs/operations.md, \"Lost one replica\")",
                cfg.id,
                cfg.data_dir.display(),
                s.node_id,
                cfg.id,
                r.matched_index,
                cfg.id
            ));
        }
        if s.has_leader && !s.leader_addr.is_empty() && !ask.contains(&s.leader_addr) {
            ask.push(s.leader_addr);
        }
    }
    None
}

/// Initialises a brand-new cluster from the configured members (see the
/// module docs for why this only ever happens once).
pub(super) async fn bootstrap(raft: Raft, cfg: StoreConfig, connect: Connector) {
    if peers_initialised(&cfg, &connect).await {
        tracing::warn!(
            "a peer already belongs to a cluster: not initialising; waiting to be caught up"
        );
        return;
    }
    let members: BTreeMap<NodeId, BasicNode> = cfg
        .members
        .iter()
        .map(|m| {
            (
                m.id,
                BasicNode {
                    addr: m.addr.clone(),
                },
            )
        })
        .collect();
    match raft.initialize(members).await {
        Ok(()) => tracing::info!("initialised a new store cluster"),
        Err(e) => tracing::info!("not initialising: {e}"),
    }
}

/// Makes sure the replicated state holds the configured set, the initial
/// lease terms and the initial routes: whichever replica leads proposes
/// them (idempotently). Initial routes wait for each AllocSvr to register
/// (a route needs its address) and touch only sections still unowned.
///
/// A replica restoring a backup writes the restore instead of a new set
/// ([`RestorePlan::commands`]: the set with every section absent, then
/// each piece of sections at its raised ceiling, resumed where it stands
/// after a crash or a leader change), and only then the initial routes.
pub(super) async fn configure_set(
    api: StoreApi,
    cfg: StoreConfig,
    restore: Option<Arc<RestorePlan>>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut restored = restore.is_none();
    loop {
        tick.tick().await;
        let (pending, done) = match &restore {
            Some(plan) if !restored => {
                let cmds = plan.commands(&api.sm.read().state);
                if cmds.is_empty() {
                    restored = true;
                    tracing::info!(
                        margin = plan.margin,
                        "restore complete: every section landed"
                    );
                    continue;
                }
                (cmds, false)
            }
            _ => initial_commands(&api, &cfg),
        };
        if done && pending.is_empty() {
            return;
        }
        if api.raft.metrics().borrow().current_leader != Some(api.id) {
            continue;
        }
        for cmd in pending {
            match api.proposer.propose(cmd).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!("initial configuration refused: {e}"),
                Err(e) => {
                    tracing::warn!("initial configuration failed, will retry: {e}");
                    break;
                }
            }
        }
    }
}

/// What is still missing of the configured set and routes, and whether
/// nothing more can become due (every configured AllocSvr registered).
pub(super) fn initial_commands(api: &StoreApi, cfg: &StoreConfig) -> (Vec<Command>, bool) {
    let a = api.sm.read();
    if a.state.set.is_none() {
        let cmds = vec![
            if cfg.added_set {
                Command::ConfigureAddedSet(cfg.set.clone())
            } else {
                Command::ConfigureSet(cfg.set.clone())
            },
            Command::SetLease(cfg.lease.terms()),
        ];
        return (cmds, false);
    }
    let mut cmds = Vec::new();
    let mut done = true;
    for al in &cfg.allocs {
        if !a.state.allocs.contains_key(&al.id) {
            done = false;
            continue;
        }
        let unowned = |s: u32| {
            a.state.sections[s as usize].owner.is_none()
                && a.state.placement.place_of(s) == seqsvr_core::Place::Serving
        };
        let mut s = al.first;
        while s < al.first + al.count {
            if !unowned(s) {
                s += 1;
                continue;
            }
            let start = s;
            // In pieces a command may hold (MAX_SECTIONS_PER_CALL).
            while s < al.first + al.count
                && unowned(s)
                && s - start < crate::types::MAX_SECTIONS_PER_CALL
            {
                s += 1;
            }
            let expected = (start..s)
                .map(|x| a.state.sections[x as usize].epoch)
                .collect();
            cmds.push(Command::Assign {
                alloc: al.id.clone(),
                first: start,
                expected,
            });
        }
    }
    (cmds, done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_fresh_lowest_member_not_joining_initialises() {
        let text = include_str!("../../../../config/store-1.toml");
        let first = StoreConfig::from_toml(text).unwrap();
        assert!(may_initialise(&first, true));
        assert!(!may_initialise(&first, false));
        let second = StoreConfig {
            id: 2,
            ..first.clone()
        };
        assert!(!may_initialise(&second, true));
        // A replacement for every original replica is the lowest id of
        // the group it is told about, and brand-new: only `join` stops it.
        let joining = StoreConfig {
            join: true,
            ..first
        };
        assert!(!may_initialise(&joining, true));
        let text = format!("join = true\n{text}");
        assert!(StoreConfig::from_toml(&text).unwrap().join);
    }
}
