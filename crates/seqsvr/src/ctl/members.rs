//! `seqctl store add | remove | replace`: the store group's membership,
//! changed online through the leader's admin plane (see
//! `docs/operations.md`, "Store replicas"), and the membership lines of
//! `seqctl status`.
//!
//! A replace is an add followed by a remove, never the other way round: the
//! group gains its new voter (caught up first) before it loses the old one,
//! so it never runs with fewer healthy voters than before.

use std::time::Duration;

use clap::Subcommand;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::membership::{describe, Member};
use seqsvr_store_api::{AdminClient, MembershipChange, NodeId};

use super::Ctl;
use crate::error::{Context, Error, Result};
use crate::outln;

/// Membership commands (under `seqctl store`).
#[derive(Debug, Clone, Subcommand)]
pub enum MemberOp {
    /// Adds a store replica to the running group: a learner first, promoted
    /// to voter once caught up. Start the replica first, with `join = true`
    /// and an empty data directory.
    Add {
        /// Its Raft node id (not used by any member).
        #[arg(long)]
        id: NodeId,
        /// Its peer-plane address, host:port.
        #[arg(long)]
        addr: String,
        /// How long it may take to catch up, in seconds, before it is
        /// removed again (at most the admin plane's request_timeout_ms less
        /// 10 s: 50 s with the default limits).
        #[arg(long, default_value_t = 30)]
        catch_up_timeout: u64,
    },
    /// Removes a store replica from the group (stop its process after).
    Remove {
        /// Its Raft node id.
        #[arg(long)]
        id: NodeId,
    },
    /// Replaces a store replica: adds the new one (caught up, promoted),
    /// then removes the old one.
    Replace {
        /// The replica to remove.
        #[arg(long)]
        old: NodeId,
        /// The replica to add, as ID=HOST:PORT.
        #[arg(long, value_parser = parse_new_member)]
        new: (NodeId, String),
        /// How long the new replica may take to catch up, in seconds.
        #[arg(long, default_value_t = 30)]
        catch_up_timeout: u64,
    },
}

/// Parses `ID=HOST:PORT`.
pub fn parse_new_member(s: &str) -> std::result::Result<(NodeId, String), String> {
    let (id, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not ID=HOST:PORT"))?;
    let id: NodeId = id
        .parse()
        .map_err(|e| format!("{id:?} is not a node id: {e}"))?;
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
            Ok((id, addr.to_string()))
        }
        _ => Err(format!("{addr:?} is not host:port")),
    }
}

/// Runs a membership command.
pub async fn run(ctl: &Ctl, op: MemberOp) -> Result<()> {
    let secs = Duration::from_secs;
    match op {
        MemberOp::Add {
            id,
            addr,
            catch_up_timeout,
        } => add(&ctl.admin, id, &addr, secs(catch_up_timeout))
            .await
            .map(drop),
        MemberOp::Remove { id } => remove(&ctl.admin, id).await.map(drop),
        MemberOp::Replace {
            old,
            new: (id, addr),
            catch_up_timeout,
        } => replace(ctl, old, id, &addr, secs(catch_up_timeout))
            .await
            .map(drop),
    }
}

/// `voters {1,2,3} -> voters {1,2,3,4} (membership at log index 57, by 1)`.
fn print_change(c: &MembershipChange) -> Result<()> {
    outln!(
        "membership: {} -> {} (log index {}, made by store {})",
        describe(&c.before),
        describe(&c.after),
        c.membership_index,
        c.leader_id
    )?;
    Ok(())
}

/// Adds replica `id` at `addr`; prints what happened.
pub async fn add(
    admin: &AdminClient,
    id: NodeId,
    addr: &str,
    catch_up: Duration,
) -> Result<MembershipChange> {
    outln!("adding store {id} at {addr} (catch-up limit {catch_up:?})")?;
    let c = admin
        .add_member(id, addr, catch_up)
        .await
        .with_context(|| format!("adding store {id}"))?;
    outln!(
        "store {id}: caught up in {} ms, promoted to voter",
        c.catch_up.as_millis()
    )?;
    print_change(&c)?;
    Ok(c)
}

/// Removes replica `id`; prints what happened.
pub async fn remove(admin: &AdminClient, id: NodeId) -> Result<MembershipChange> {
    let c = admin
        .remove_member(id)
        .await
        .with_context(|| format!("removing store {id}"))?;
    outln!("store {id} removed; stop its process and retire its data directory")?;
    print_change(&c)?;
    Ok(c)
}

/// Replaces voter `old` with `id` at `addr`: add (caught up, promoted),
/// then remove. `old` is checked to be a member before anything changes.
pub async fn replace(
    ctl: &Ctl,
    old: NodeId,
    id: NodeId,
    addr: &str,
    catch_up: Duration,
) -> Result<(MembershipChange, MembershipChange)> {
    if old == id {
        return Err(Error::Usage(format!(
            "--old and --new name the same store {id}"
        )));
    }
    let leader = leader_status(ctl).await?;
    if !leader.members.iter().any(|m| m.id == old) {
        return Err(Error::Failed(format!(
            "store {old} is not a member ({}); nothing changed",
            describe(&members(&leader))
        )));
    }
    let added = add(&ctl.admin, id, addr, catch_up).await?;
    let removed = remove(&ctl.admin, old).await.with_context(|| {
        format!("store {id} was added but {old} is still a member; retry `seqctl store remove --id {old}`")
    })?;
    Ok((added, removed))
}

/// How long `replace` waits for a leader to name the members (an election
/// after the previous change removed the leader takes about a second).
const LEADER_WAIT: Duration = Duration::from_secs(10);

async fn leader_status(ctl: &Ctl) -> Result<pb::StoreStatus> {
    let start = std::time::Instant::now();
    loop {
        if let Some(s) = ctl.leader_status().await {
            return Ok(s);
        }
        if start.elapsed() > LEADER_WAIT {
            return Err(Error::Failed(format!(
                "no store leader answered within {LEADER_WAIT:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn members(s: &pb::StoreStatus) -> Vec<Member> {
    s.members.iter().map(Member::from).collect()
}

/// The membership lines of `seqctl status`: voters and learners, and each
/// member's replication lag as the leader reports it.
pub fn print_membership(
    replicas: &[(String, seqsvr_store_api::Result<pb::StoreStatus>)],
) -> Result<()> {
    let answered = replicas.iter().filter_map(|(_, s)| s.as_ref().ok());
    let Some(s) = answered
        .clone()
        .find(|s| s.leads())
        .or(answered.clone().next())
    else {
        return Ok(());
    };
    let joint = if s.joint { " (change under way)" } else { "" };
    outln!(
        "membership{joint} at log index {}: {}",
        s.membership_index,
        describe(&members(s))
    )?;
    if s.replication.is_empty() {
        return Ok(());
    }
    outln!("replication (leader {}):", s.node_id)?;
    for r in &s.replication {
        let role = if s.voter_ids.contains(&r.id) {
            "voter"
        } else {
            "learner"
        };
        let addr = s
            .members
            .iter()
            .find(|m| m.id == r.id)
            .map(|m| m.addr.as_str());
        let matched = if r.matched {
            r.matched_index.to_string()
        } else {
            "-".into()
        };
        outln!(
            "  {:<3} {role:<7} {:<22} matched {matched:<8} lag {}",
            r.id,
            addr.unwrap_or("?"),
            r.lag
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_members_are_id_equals_host_port() {
        assert_eq!(
            parse_new_member("4=10.0.0.4:7101"),
            Ok((4, "10.0.0.4:7101".into()))
        );
        assert!(parse_new_member("4").is_err());
        assert!(parse_new_member("x=h:1").is_err());
        assert!(parse_new_member("4=h").is_err());
        assert!(parse_new_member("4=:1").is_err());
        assert!(parse_new_member("4=h:99999").is_err());
    }
}
