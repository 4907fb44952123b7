//! The home group keeps its own entry in the directory current: which
//! client- and admin-plane addresses its replicas answer on, so that a
//! client or an operator starting from any seed can reach set 0's stores.
//! Replicas are asked over the peer plane (their `Status`); the leader
//! writes the list once every member answered and only when it changed
//! (after a replica is added, removed or readdressed).

use std::time::Duration;

use seqsvr_core::directory::HOME_SET;
use seqsvr_core::DirChange;
use seqsvr_proto::store_peer_client::StorePeerClient;

use crate::service::StoreApi;
use crate::types::Command;

/// How often the leader compares the entry with its members.
const EVERY: Duration = Duration::from_secs(1);

pub(super) async fn keep_home_entry(api: StoreApi) {
    let mut tick = tokio::time::interval(EVERY);
    loop {
        tick.tick().await;
        if api.raft.metrics().borrow().current_leader != Some(api.id) {
            continue;
        }
        let have = {
            let a = api.sm.read();
            let home = a.state.set.as_ref().is_some_and(|s| s.set_id == HOME_SET);
            let entry = a
                .state
                .directory
                .as_ref()
                .and_then(|d| d.sets.get(&HOME_SET))
                .map(|s| (s.stores.clone(), s.admin.clone()));
            match (home, entry) {
                (true, Some(e)) => e,
                _ => continue,
            }
        };
        let (want, complete) = member_addrs(&api).await;
        // Every member's addresses once all answered; before the first
        // list, whichever answered (a slow or down replica must not keep
        // set 0 out of the directory).
        let due = if complete {
            want != have
        } else {
            have.0.is_empty() && !want.0.is_empty()
        };
        if due {
            let cmd = Command::Directory(DirChange::SetStores {
                set: HOME_SET,
                stores: want.0,
                admin: want.1,
            });
            match api.proposer.propose(cmd).await {
                Ok(Ok(_)) => tracing::info!("directory: set 0's store addresses updated"),
                Ok(Err(e)) => tracing::warn!("directory: set 0's store addresses refused: {e}"),
                Err(e) => tracing::warn!("directory: could not update set 0's stores: {e}"),
            }
        }
    }
}

/// The client and admin addresses of every voter that answered, in member
/// order, and whether all did.
async fn member_addrs(api: &StoreApi) -> ((Vec<String>, Vec<String>), bool) {
    let members: Vec<(u64, String)> = {
        let m = api.raft.metrics().borrow().clone();
        let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
        m.membership_config
            .nodes()
            .filter(|(id, _)| voters.contains(id))
            .map(|(id, n)| (*id, n.addr.clone()))
            .collect()
    };
    let (mut stores, mut admin) = (Vec::new(), Vec::new());
    let mut complete = true;
    for (id, addr) in members {
        if id == api.id {
            stores.push(api.client_addr.clone());
            admin.push(api.admin_addr.clone());
            continue;
        }
        match peer_addrs(api, &addr).await {
            Some((c, a)) => {
                stores.push(c);
                admin.push(a);
            }
            None => complete = false,
        }
    }
    ((stores, admin), complete)
}

/// The client and admin addresses the replica at peer address `addr`
/// reports, if it answers in time.
async fn peer_addrs(api: &StoreApi, addr: &str) -> Option<(String, String)> {
    let ch = (api.connect)(addr).ok()?;
    let mut c = StorePeerClient::new(ch);
    let call = c.status(seqsvr_proto::StatusRequest {});
    let s = tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .ok()?
        .ok()?
        .into_inner();
    if s.client_addr.is_empty() || s.admin_addr.is_empty() {
        return None;
    }
    Some((s.client_addr, s.admin_addr))
}
