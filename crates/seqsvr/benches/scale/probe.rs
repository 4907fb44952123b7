//! What the scale bench reads: the store leader's counters (log entries,
//! commands by kind), route tables, AllocSvr status and processes' CPU
//! and memory.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use seqsvr_core::RouteTable;
use seqsvr_proto::alloc_client::AllocClient;
use seqsvr_proto::{self as pb};
use seqsvr_store_api::client::plaintext;
use seqsvr_store_api::ReadClient;
use tonic::transport::Channel;

use seqsvr_testkit::{metric, scrape, StoreCluster};

/// The store leader's counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Marks {
    /// Last log index (Raft entries written so far).
    pub entries: u64,
    /// Commands applied.
    pub commands: u64,
    /// Section runs the arbiter moved (one `Assign` each).
    pub assigns: u64,
    /// `TakeOver` commands proposed.
    pub take_overs: u64,
}

impl Marks {
    /// Reads replica `leader`'s counters (status, and metrics if served).
    pub async fn read(cluster: &StoreCluster, leader: usize) -> Marks {
        let c = ReadClient::new(&[cluster.client_addrs[leader].clone()], &plaintext()).unwrap();
        let st = c.leader_status().await.unwrap_or_default();
        let text = cluster
            .metrics_addrs
            .get(leader)
            .map(|a| scrape(a))
            .unwrap_or_default();
        let kind = |k: &str| {
            metric(
                &text,
                "seqsvr_store_commands_total",
                &[&format!("command=\"{k}\"")],
            ) as u64
        };
        Marks {
            entries: st.last_log_index,
            commands: st.commands,
            assigns: metric(&text, "seqsvr_store_arbiter_moves_total", &[]) as u64,
            take_overs: kind("take_over"),
        }
    }

    /// What happened between `self` and `later`.
    pub fn since(&self, later: &Marks) -> String {
        format!(
            "{} Raft entries, {} commands ({} arbiter Assign, {} TakeOver)",
            later.entries.saturating_sub(self.entries),
            later.commands.saturating_sub(self.commands),
            later.assigns.saturating_sub(self.assigns),
            later.take_overs.saturating_sub(self.take_overs),
        )
    }
}

/// Per AllocSvr in `t`: sections routed to it and the runs they form.
pub fn owners(t: &RouteTable) -> BTreeMap<String, (u32, u32)> {
    let mut out: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for e in &t.entries {
        let o = out.entry(e.alloc.clone()).or_default();
        o.0 += e.count;
        o.1 += 1;
    }
    out
}

/// The sections routed to `alloc` in `t`, in order.
pub fn sections_of(t: &RouteTable, alloc: &str) -> Vec<u32> {
    t.entries
        .iter()
        .filter(|e| e.alloc == alloc)
        .flat_map(|e| e.first..e.first + e.count)
        .collect()
}

/// Clients of AllocSvrs' client planes, for their status.
pub struct Allocs {
    /// One per AllocSvr, by index; connected lazily (and again after a
    /// restart).
    pub clients: Vec<AllocClient<Channel>>,
}

impl Allocs {
    pub fn new(addrs: &[String]) -> Allocs {
        let clients = addrs
            .iter()
            .map(|a| {
                let ch = seqsvr_net::client::channel(a, None, Duration::from_millis(200)).unwrap();
                AllocClient::new(ch).max_decoding_message_size(16 << 20)
            })
            .collect();
        Allocs { clients }
    }

    /// AllocSvr `i`'s status, if it answers within 500 ms.
    pub async fn status(&self, i: usize) -> Option<pb::AllocStatus> {
        let mut c = self.clients[i].clone();
        let call = c.status(pb::AllocStatusRequest {});
        match tokio::time::timeout(Duration::from_millis(500), call).await {
            Ok(Ok(r)) => Some(r.into_inner()),
            _ => None,
        }
    }

    /// Sections AllocSvr `i` serves now (0 if it does not answer or its
    /// lease is not valid).
    pub async fn serving(&self, i: usize) -> u32 {
        match self.status(i).await {
            Some(s) if s.lease_left_ms > 0 => s.sections.len() as u32,
            _ => 0,
        }
    }

    /// Sections the AllocSvrs `which` serve together.
    pub async fn serving_all(&self, which: &[usize]) -> u32 {
        let mut n = 0;
        for &i in which {
            n += self.serving(i).await;
        }
        n
    }
}

/// Polls `done` every 10 ms until it holds or `within` has passed; returns
/// the time it took, from `since`.
pub async fn until<F, Fut>(since: Instant, within: Duration, mut done: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    loop {
        if done().await {
            return Some(since.elapsed());
        }
        if since.elapsed() > within {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A duration for the figures (or that it never came).
pub fn ms(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:.0} ms", d.as_secs_f64() * 1e3),
        None => "never (timed out)".into(),
    }
}

/// Bytes as MiB for the figures.
pub fn mib(b: u64) -> String {
    format!("{:.0} MiB", b as f64 / (1 << 20) as f64)
}
