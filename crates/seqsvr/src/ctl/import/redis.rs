//! A live Redis read for an import: every key matching a pattern (`SCAN`
//! with `MATCH`, so the server is never blocked the way `KEYS` blocks it)
//! and its value (`MGET` per batch: a key holding no string answers nil
//! instead of failing the batch). Each key becomes a floor or a refusal
//! ([`sources::plan_redis`](super::sources::plan_redis)).
//!
//! A key seen twice (`SCAN` may return a key more than once while the
//! keyspace is rehashed) keeps its highest value.

use redis::aio::MultiplexedConnection;
use seqsvr_resp::keys::KeyMap;

use super::{sources, Plan};
use crate::error::{Error, Result};

/// Keys asked for per `SCAN` call (a hint to the server) and per `MGET`.
const BATCH: usize = 1000;

/// The plan of every key of the Redis at `url` matching `pattern`.
pub async fn plan(url: &str, pattern: &str, keys: &KeyMap) -> Result<Plan> {
    let failed =
        |what: &str, e: redis::RedisError| Error::Failed(format!("redis {url}: {what}: {e}"));
    let client = redis::Client::open(url).map_err(|e| failed("not a Redis URL", e))?;
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| failed("connecting", e))?;
    let mut plan = Plan::default();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(BATCH)
            .query_async(&mut con)
            .await
            .map_err(|e| failed("SCAN", e))?;
        for chunk in batch.chunks(BATCH) {
            let values = values(&mut con, chunk)
                .await
                .map_err(|e| failed("MGET", e))?;
            for (key, value) in chunk.iter().zip(&values) {
                sources::plan_redis(&mut plan, keys, key, value.as_deref());
            }
        }
        if next == 0 {
            return Ok(plan);
        }
        cursor = next;
    }
}

/// The string values of `keys` (`None`: no string there).
async fn values(
    con: &mut MultiplexedConnection,
    keys: &[Vec<u8>],
) -> redis::RedisResult<Vec<Option<Vec<u8>>>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut cmd = redis::cmd("MGET");
    for k in keys {
        cmd.arg(k.as_slice());
    }
    cmd.query_async(con).await
}
