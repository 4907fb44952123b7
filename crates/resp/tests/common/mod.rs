//! What the door's tests share: a backend over a map in memory (numbers
//! per uid, uids at or above `LIMIT` out of range, uid 13 not owned here),
//! and a door on a loopback port in front of it.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use seqsvr_proto::ErrorKind;
use seqsvr_resp::{Backend, BackendError, Ctx, DoorConfig, DoorMetrics};
use tokio::net::TcpListener;

/// Uids at or above this are out of range.
pub const LIMIT: u64 = 1_000_000;

/// A uid this backend does not own (a retryable error).
pub const NOT_OWNED: u64 = 13;

/// Numbers per uid in a map; counts its batch calls.
#[derive(Default)]
pub struct MemBackend {
    pub cur: Mutex<HashMap<u64, u64>>,
    pub batches: Mutex<Vec<usize>>,
    /// Numbers per named counter.
    pub names: Mutex<HashMap<Vec<u8>, u64>>,
    /// Every `next_name_n` call: the name and the count.
    pub name_calls: Mutex<Vec<(Vec<u8>, u64)>>,
    /// The last id per namespace (ids are 1, 2, 3 … per namespace).
    pub ids: Mutex<HashMap<String, u64>>,
    /// Every `next_ids` call: the namespace and the count.
    pub id_calls: Mutex<Vec<(String, u64)>>,
}

/// An id namespace whose calls for more than one id are refused (a
/// retryable error).
pub const NS_ONE_AT_A_TIME: &str = "one-at-a-time";

/// A name whose reservations of more than one number are refused (a
/// retryable error), as a section short of headroom refuses them.
pub const NAME_ONE_AT_A_TIME: &[u8] = b"one-at-a-time";

fn refuse(uid: u64) -> Option<BackendError> {
    if uid >= LIMIT {
        return Some(BackendError {
            kind: ErrorKind::OutOfRange,
            message: format!("uid {uid} is outside the set"),
            retryable: false,
            retry_after: None,
        });
    }
    (uid == NOT_OWNED).then(|| BackendError {
        kind: ErrorKind::NotOwner,
        message: format!("uid {uid} is served elsewhere"),
        retryable: true,
        retry_after: Some(std::time::Duration::from_millis(50)),
    })
}

impl Backend for MemBackend {
    async fn next_n(&self, uid: u64, n: u64) -> Result<u64, BackendError> {
        if let Some(e) = refuse(uid) {
            return Err(e);
        }
        let mut m = self.cur.lock().unwrap();
        let v = m.entry(uid).or_insert(0);
        *v += n;
        Ok(*v)
    }

    async fn next_batch<'a>(
        &'a self,
        uids: &'a [u64],
        out: &'a mut Vec<u64>,
    ) -> Result<(), BackendError> {
        self.batches.lock().unwrap().push(uids.len());
        for &u in uids {
            out.push(self.next_n(u, 1).await?);
        }
        Ok(())
    }

    async fn current(&self, uid: u64) -> Result<u64, BackendError> {
        if let Some(e) = refuse(uid) {
            return Err(e);
        }
        Ok(*self.cur.lock().unwrap().get(&uid).unwrap_or(&0))
    }

    async fn next_name_n<'a>(&'a self, name: &'a [u8], n: u64) -> Result<u64, BackendError> {
        self.name_calls.lock().unwrap().push((name.to_vec(), n));
        if name == NAME_ONE_AT_A_TIME && n > 1 {
            return Err(BackendError {
                kind: ErrorKind::CeilingExhausted,
                message: format!("no room for {n} numbers now"),
                retryable: true,
                retry_after: None,
            });
        }
        let mut m = self.names.lock().unwrap();
        let v = m.entry(name.to_vec()).or_insert(0);
        *v += n;
        Ok(*v)
    }

    async fn current_name<'a>(&'a self, name: &'a [u8]) -> Result<u64, BackendError> {
        Ok(*self.names.lock().unwrap().get(name).unwrap_or(&0))
    }

    fn max_count(&self) -> u64 {
        1000
    }

    async fn next_ids(&self, ns: &str, n: u64) -> Result<Vec<u64>, BackendError> {
        self.id_calls.lock().unwrap().push((ns.to_string(), n));
        if ns == NS_ONE_AT_A_TIME && n > 1 {
            return Err(BackendError {
                kind: ErrorKind::ClockBehind,
                message: format!("no room for {n} ids now"),
                retryable: true,
                retry_after: None,
            });
        }
        let mut m = self.ids.lock().unwrap();
        let last = m.entry(ns.to_string()).or_insert(0);
        let first = *last + 1;
        *last += n;
        Ok((first..=*last).collect())
    }

    fn max_batch(&self) -> usize {
        4096
    }
}

/// A door on a loopback port in front of a fresh [`MemBackend`].
pub async fn door(cfg: DoorConfig) -> (SocketAddr, Arc<MemBackend>, Arc<Ctx>) {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let backend = Arc::new(MemBackend::default());
    let ctx = Arc::new(Ctx::new(cfg, DoorMetrics::unregistered(), &*backend));
    tokio::spawn(seqsvr_resp::serve(
        tcp,
        None,
        backend.clone(),
        ctx.clone(),
        std::future::pending(),
    ));
    (addr, backend, ctx)
}

/// Sends `bytes` on a fresh connection and reads until the server closes
/// it or `within` passes; returns what came back.
pub async fn raw(addr: SocketAddr, bytes: &[u8], within: std::time::Duration) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(within, s.read_to_end(&mut out)).await;
    out
}

/// A redis-crate connection to `addr` (RESP2, or RESP3 with `resp3`).
pub async fn client(addr: SocketAddr, resp3: bool) -> redis::aio::MultiplexedConnection {
    let proto = if resp3 { "?protocol=resp3" } else { "" };
    redis::Client::open(format!("redis://{addr}/{proto}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Waits (up to 5 s) until `f` holds.
pub async fn eventually(what: &str, f: impl Fn() -> bool) {
    let t0 = std::time::Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "never: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}
