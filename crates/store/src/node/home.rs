//! Every set's leader keeps its own entry in the directory current: which
//! client- and admin-plane addresses its replicas answer on, so that a
//! client or an operator starting from any seed can reach the set's
//! stores after its replicas are replaced. Replicas are asked over the
//! peer plane (their `Status`); the leader writes the list once every
//! member answered and only when it changed (after a replica is added,
//! removed or readdressed). The home group (set 0) holds the directory and
//! writes its own entry itself; the leader of any other set sends its
//! entry to the home group (`StoreSets.ChangeDirectory`, which takes a
//! store certificate of set N for set N's addresses only) and keeps the
//! directory the home group answers with as its copy.

use std::time::Duration;

use seqsvr_core::directory::HOME_SET;
use seqsvr_core::{DirChange, SetId};
use seqsvr_proto::store_peer_client::StorePeerClient;

use crate::service::StoreApi;
use crate::types::Command;

/// How often the leader compares the entry with its members.
const EVERY: Duration = Duration::from_secs(1);

pub(super) async fn keep_own_entry(api: StoreApi) {
    let mut tick = tokio::time::interval(EVERY);
    loop {
        tick.tick().await;
        if api.raft.metrics().borrow().current_leader != Some(api.id) {
            continue;
        }
        let (set, have, home_admin) = {
            let a = api.sm.read();
            let Some(set) = a.state.set.as_ref().map(|s| s.set_id) else {
                continue;
            };
            let Some(dir) = a.state.directory.as_ref() else {
                continue;
            };
            let entry = |s: SetId| {
                dir.sets
                    .get(&s)
                    .map(|e| (e.stores.clone(), e.admin.clone()))
            };
            match (entry(set), entry(HOME_SET)) {
                (Some(own), Some(home)) => (set, own, home.1),
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
        if !due {
            continue;
        }
        let change = DirChange::SetStores {
            set,
            stores: want.0,
            admin: want.1,
        };
        if set != HOME_SET {
            send_home(&api, set, change, &home_admin).await;
            continue;
        }
        {
            let cmd = Command::Directory(change);
            match api.proposer.propose(cmd).await {
                Ok(Ok(_)) => tracing::info!("directory: set 0's store addresses updated"),
                Ok(Err(e)) => tracing::warn!("directory: set 0's store addresses refused: {e}"),
                Err(e) => tracing::warn!("directory: could not update set 0's stores: {e}"),
            }
        }
    }
}

/// Sends set `set`'s new entry to the home group at admin-plane
/// `home_admin` and takes the directory it answers with as this group's
/// copy (so the entry compares equal on the next tick).
async fn send_home(api: &StoreApi, set: SetId, change: DirChange, home_admin: &[String]) {
    let home = match seqsvr_store_api::SetsClient::new(home_admin, &api.home_connect) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("directory: cannot reach set 0 to update set {set}'s stores: {e}");
            return;
        }
    };
    let dir = match home.change_directory(&change).await {
        Ok((_, dir)) => dir,
        Err(e) => {
            tracing::warn!("directory: set 0 did not take set {set}'s store addresses: {e}");
            return;
        }
    };
    match api.proposer.propose(Command::CopyDirectory(dir)).await {
        Ok(Ok(_)) => tracing::info!("directory: set {set}'s store addresses updated in set 0"),
        Ok(Err(e)) => tracing::warn!("directory: the copy from set 0 was refused: {e}"),
        Err(e) => tracing::warn!("directory: could not store the copy from set 0: {e}"),
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
