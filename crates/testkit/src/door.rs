//! A Redis-protocol client of one AllocSvr's door, for the failover
//! drills: one connection, made again after a failure.

use std::time::Duration;

/// How long one call (or a connect) may take before it counts as hung.
const CALL_TIMEOUT: Duration = Duration::from_millis(300);

/// One door and its connection (made again after a failure).
pub struct Door {
    addr: String,
    conn: Option<redis::aio::MultiplexedConnection>,
}

impl Door {
    /// The door at `addr`, not connected yet.
    pub fn new(addr: &str) -> Door {
        Door {
            addr: addr.to_string(),
            conn: None,
        }
    }

    /// `INCR key` through this door, or `None` (refused, hung, dropped).
    pub async fn incr(&mut self, key: &str) -> Option<u64> {
        if self.conn.is_none() {
            let client = redis::Client::open(format!("redis://{}/", self.addr)).ok()?;
            let c = tokio::time::timeout(CALL_TIMEOUT, client.get_multiplexed_async_connection());
            self.conn = Some(c.await.ok()?.ok()?);
        }
        let conn = self.conn.as_mut()?;
        let mut cmd = redis::cmd("INCR");
        cmd.arg(key);
        let call = cmd.query_async::<u64>(conn);
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(v)) => Some(v),
            // A refusal: the connection is fine.
            Ok(Err(e)) if e.kind() != redis::ErrorKind::Io && !e.is_connection_dropped() => None,
            // Hung or dropped: a fresh connection next time.
            _ => {
                self.conn = None;
                None
            }
        }
    }
}

/// Every door of a set, as a client that knows them all: a call goes to
/// the door that answered last, and on to the next while one refuses
/// (`TRYAGAIN NOT_OWNER …`), hangs or drops the connection.
pub struct Doors {
    doors: Vec<Door>,
    /// The door that answered last.
    prefer: usize,
}

impl Doors {
    /// The doors at `addrs`, none connected yet.
    pub fn new(addrs: &[String]) -> Doors {
        Doors {
            doors: addrs.iter().map(|a| Door::new(a)).collect(),
            prefer: 0,
        }
    }

    /// `INCR key` through the first door that answers, or `None` if none
    /// did.
    pub async fn incr(&mut self, key: &str) -> Option<u64> {
        for i in 0..self.doors.len() {
            let d = (self.prefer + i) % self.doors.len();
            if let Some(v) = self.doors[d].incr(key).await {
                self.prefer = d;
                return Some(v);
            }
        }
        None
    }
}
