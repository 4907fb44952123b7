//! `seqctl health <addr>`: a probe of one process, for container health
//! checks and Kubernetes probes.
//!
//! It calls the process's own `Status` on its client plane — a store
//! replica's `StoreRead.Status`, or, where that is not served, an
//! AllocSvr's `Alloc.Status` — prints one line and exits:
//!
//! | exit | meaning |
//! | --- | --- |
//! | 0 | it answered (and, with `--ready`, is ready) |
//! | 1 | it answered but is not ready (`--ready`), or is shutting down |
//! | 2 | no answer in time (down, paused, wrong address or TLS flags), or bad flags |
//!
//! Ready means able to do its job now:
//! - a store replica knows a leader and has its set configured (it can
//!   answer reads and forward writes);
//! - an AllocSvr is registered with the store and holds a valid lease (it
//!   serves whatever sections it is routed; none, right after it joins or
//!   while drained, is still ready).
//!
//! Alive (no `--ready`) needs only an answer: a replica cut off from its
//! peers, or an AllocSvr that cannot reach the store, is not restarted for
//! it — a new process would be no better off.

use std::time::Duration;

use clap::Args;
use seqsvr_net::{ClientTls, ServerRole};
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::store_read_client::StoreReadClient;
use seqsvr_proto::{self as pb};

use crate::drill::parse_duration;
use crate::error::Result;

/// `seqctl health` flags.
#[derive(Args, Debug, Clone)]
pub struct HealthArgs {
    /// The process's client-plane address (`host:port`).
    pub addr: String,
    /// Also require readiness: a store replica that knows a leader and has
    /// its set; an AllocSvr registered and holding a valid lease.
    #[arg(long)]
    pub ready: bool,
    /// How long the probe may take, connecting included (e.g. `2s`).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Print `{"addr", "verdict", "exit_code", "line"}` instead of the line.
    #[arg(long)]
    pub json: bool,
}

/// What a probe found: the verdict and the line it prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// It answered (and, if asked, is ready). Exit 0.
    Ok(String),
    /// It answered but is not ready, or not well. Exit 1.
    NotReady(String),
    /// No answer. Exit 2.
    Unreachable(String),
}

impl Health {
    /// The line to print.
    pub fn line(&self) -> &str {
        match self {
            Health::Ok(l) | Health::NotReady(l) | Health::Unreachable(l) => l,
        }
    }

    /// The verdict as `--json` prints it: `ok`, `not_ready`, `unreachable`.
    pub fn verdict(&self) -> &'static str {
        match self {
            Health::Ok(_) => "ok",
            Health::NotReady(_) => "not_ready",
            Health::Unreachable(_) => "unreachable",
        }
    }

    /// What `--json` prints for the probe of `addr`.
    pub fn json(&self, addr: &str) -> String {
        serde_json::json!({
            "addr": addr,
            "verdict": self.verdict(),
            "exit_code": self.exit_code(),
            "line": self.line(),
        })
        .to_string()
    }

    /// The process exit code (see the module docs).
    pub fn exit_code(&self) -> u8 {
        match self {
            Health::Ok(_) => 0,
            Health::NotReady(_) => 1,
            Health::Unreachable(_) => 2,
        }
    }
}

/// Probes the process at `args.addr`, dialed with `tls` (the CA is enough:
/// the client plane asks for no certificate), whose certificate must be a
/// store replica's or an AllocSvr's: anything else answering there is not
/// the process probed. A bad address is an error (exit 2, like any bad
/// flag).
pub async fn probe(args: &HealthArgs, tls: Option<&ClientTls>) -> Result<Health> {
    let tls = tls.map(|t| t.clone().expecting(ServerRole::Server));
    let ch = seqsvr_net::client::channel(&args.addr, tls.as_ref(), args.timeout)?;
    let addr = &args.addr;
    let asked = async {
        match StoreReadClient::new(ch.clone())
            .status(pb::StatusRequest {})
            .await
        {
            Ok(s) => Ok(Answer::Store(Box::new(s.into_inner()))),
            // Not a store replica's client plane: an AllocSvr's, maybe.
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                let s = AllocClient::new(ch)
                    .status(pb::AllocStatusRequest {})
                    .await?;
                Ok(Answer::Alloc(s.into_inner()))
            }
            Err(s) => Err(s),
        }
    };
    Ok(match tokio::time::timeout(args.timeout, asked).await {
        Err(_) => Health::Unreachable(format!(
            "{addr}: unreachable: no answer within {:?}",
            args.timeout
        )),
        Ok(Err(s)) => match starting(&s) {
            // An AllocSvr starting: alive (it answers), not ready.
            Some(why) if args.ready => Health::NotReady(format!("{addr}: not serving yet: {why}")),
            Some(why) => Health::Ok(format!("{addr}: alive, not serving yet: {why}")),
            None => refused(addr, &s, tls.is_some()),
        },
        Ok(Ok(Answer::Store(s))) => judge_store(addr, &s, args.ready),
        Ok(Ok(Answer::Alloc(s))) => judge_alloc(addr, &s, args.ready),
    })
}

/// A `Status` reply, from whichever kind of process answered.
enum Answer {
    Store(Box<pb::StoreStatus>),
    Alloc(pb::AllocStatus),
}

/// The reason a starting AllocSvr gave (`NOT_SERVING_YET`), if that is
/// what `s` is.
fn starting(s: &tonic::Status) -> Option<String> {
    let d = seqsvr_proto::detail_of(s)?;
    (d.kind == seqsvr_proto::ErrorKind::NotServingYet as i32)
        .then(|| format!("{} (retry in {} ms)", d.reason, d.retry_after_ms))
}

/// A call that failed: no connection (or TLS, or HTTP/2) is unreachable;
/// a status the process itself sent back means it is up but refusing.
fn refused(addr: &str, s: &tonic::Status, tls: bool) -> Health {
    let transport = std::error::Error::source(s).is_some();
    let mut why = format!("{}: {}", s.code(), s.message());
    if let Some(sentence) = super::reach::tls_sentence(&why, tls) {
        why = format!("{sentence} ({why})");
    }
    if transport {
        Health::Unreachable(format!("{addr}: unreachable: {why}"))
    } else {
        Health::NotReady(format!("{addr}: answered with an error: {why}"))
    }
}

/// A store replica's verdict from its own status.
pub fn judge_store(addr: &str, s: &pb::StoreStatus, ready: bool) -> Health {
    let leader = if s.has_leader {
        s.leader_id.to_string()
    } else {
        "-".into()
    };
    let facts = format!(
        "{}, term {}, leader {leader}, applied {}",
        s.state, s.term, s.last_applied
    );
    let who = format!("store {} ({addr})", s.node_id);
    if s.state == "Shutdown" {
        return Health::NotReady(format!("{who}: shutting down — {facts}"));
    }
    let not_ready = if !s.has_leader {
        Some("no leader known")
    } else if s.set.is_none() {
        Some("set not configured yet")
    } else {
        None
    };
    verdict(&who, &facts, not_ready, ready)
}

/// An AllocSvr's verdict from its own status.
pub fn judge_alloc(addr: &str, s: &pb::AllocStatus, ready: bool) -> Health {
    let lease = match s.lease_left_ms {
        ms if ms > 0 => format!("lease {ms} ms left"),
        0 => "no lease".into(),
        ms => format!("lease expired {} ms ago", -ms),
    };
    let facts = format!(
        "{lease}, {} sections, route version {}{}",
        s.sections.len(),
        s.route_version,
        if s.draining { ", draining" } else { "" }
    );
    let who = format!("alloc {} ({addr})", s.alloc_id);
    let not_ready = if s.incarnation == 0 {
        Some("not registered with the store yet")
    } else if s.lease_left_ms <= 0 {
        Some("no valid lease (store unreachable, or renewals refused)")
    } else {
        None
    };
    verdict(&who, &facts, not_ready, ready)
}

/// The line and verdict: ready or not; alive regardless unless readiness
/// was asked for.
fn verdict(who: &str, facts: &str, not_ready: Option<&str>, ready: bool) -> Health {
    match (not_ready, ready) {
        (None, _) => Health::Ok(format!("{who}: ready — {facts}")),
        (Some(why), true) => Health::NotReady(format!("{who}: not ready: {why} — {facts}")),
        (Some(why), false) => Health::Ok(format!("{who}: alive, not ready: {why} — {facts}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(has_leader: bool, configured: bool, state: &str) -> pb::StoreStatus {
        pb::StoreStatus {
            node_id: 2,
            state: state.into(),
            term: 3,
            leader_id: if has_leader { 1 } else { 0 },
            has_leader,
            last_applied: 40,
            set: configured.then(pb::SetSpec::default),
            ..Default::default()
        }
    }

    fn alloc(incarnation: u64, lease_left_ms: i64) -> pb::AllocStatus {
        pb::AllocStatus {
            alloc_id: "alloc-1".into(),
            lease_left_ms,
            sections: vec![1, 2],
            route_version: 5,
            incarnation,
            ..Default::default()
        }
    }

    #[test]
    fn a_store_replica_is_ready_with_a_leader_and_its_set() {
        let h = judge_store("a:1", &store(true, true, "Follower"), true);
        assert_eq!(
            h,
            Health::Ok("store 2 (a:1): ready — Follower, term 3, leader 1, applied 40".into())
        );
        for (s, why) in [
            (store(false, true, "Candidate"), "no leader known"),
            (store(true, false, "Follower"), "set not configured yet"),
        ] {
            let h = judge_store("a:1", &s, true);
            assert_eq!(h.exit_code(), 1, "{h:?}");
            assert!(h.line().contains(why), "{h:?}");
            // Alive all the same: cut off is not a reason to restart.
            let h = judge_store("a:1", &s, false);
            assert_eq!(h.exit_code(), 0, "{h:?}");
            assert!(h.line().contains("alive, not ready"), "{h:?}");
        }
        let down = judge_store("a:1", &store(true, true, "Shutdown"), false);
        assert_eq!(down.exit_code(), 1, "{down:?}");
    }

    #[test]
    fn an_alloc_is_ready_registered_with_a_valid_lease() {
        let h = judge_alloc("b:2", &alloc(0xab, 1500), true);
        assert_eq!(
            h,
            Health::Ok(
                "alloc alloc-1 (b:2): ready — lease 1500 ms left, 2 sections, route version 5"
                    .into()
            )
        );
        for (s, why) in [
            (alloc(0, 0), "not registered"),
            (alloc(0xab, -20), "no valid lease"),
            (alloc(0xab, 0), "no valid lease"),
        ] {
            let h = judge_alloc("b:2", &s, true);
            assert_eq!(h.exit_code(), 1, "{h:?}");
            assert!(h.line().contains(why), "{h:?}");
            assert_eq!(judge_alloc("b:2", &s, false).exit_code(), 0);
        }
        let late = judge_alloc("b:2", &alloc(0xab, -20), false);
        assert!(late.line().contains("lease expired 20 ms ago"), "{late:?}");
    }

    #[tokio::test]
    async fn nothing_listening_is_unreachable_and_a_bad_address_an_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let args = HealthArgs {
            addr: format!("127.0.0.1:{port}"),
            ready: false,
            timeout: Duration::from_secs(2),
            json: false,
        };
        let h = probe(&args, None).await.unwrap();
        assert_eq!(h.exit_code(), 2, "{h:?}");
        assert!(h.line().contains("unreachable"), "{h:?}");
        let j: serde_json::Value = serde_json::from_str(&h.json(&args.addr)).unwrap();
        assert_eq!(j["verdict"], "unreachable");
        assert_eq!(j["exit_code"], 2);
        assert_eq!(j["addr"], args.addr.as_str());
        // A process that accepts connections but never answers (paused).
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let paused = HealthArgs {
            addr: silent.local_addr().unwrap().to_string(),
            timeout: Duration::from_millis(300),
            ..args.clone()
        };
        let h = probe(&paused, None).await.unwrap();
        assert_eq!(h.exit_code(), 2, "{h:?}");
        assert!(h.line().contains("no answer within 300ms"), "{h:?}");
        let bad = HealthArgs {
            addr: "ftp://x:1".into(),
            ..args
        };
        assert!(probe(&bad, None).await.is_err());
    }
}
