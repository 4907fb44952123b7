//! `seqsvr alloc drain --self`: stops the AllocSvr of a config file the
//! planned way, from beside it — a Kubernetes `preStop` exec hook in an
//! image that holds nothing but the seqsvr binaries (docs/deploy.md,
//! Kubernetes). It reads the AllocSvr's own config (the `SEQSVR_CONFIG`
//! the pod sets), calls `AllocAdmin.Drain` on the admin plane over
//! loopback with the AllocSvr's own certificate (which its admin plane
//! accepts for this call), and waits until the process has gone: it hands
//! every section to live peers, records its stop in the store and exits,
//! as on SIGTERM (docs/operations.md, Stopping an AllocSvr). The SIGTERM
//! that follows the hook finds nothing left to do.

use std::time::{Duration, Instant};

use seqsvr_alloc::node::AllocNodeConfig;
use seqsvr_net::{Plane, ServerRole};
use seqsvr_proto::alloc_admin_client::AllocAdminClient;
use seqsvr_proto::{self as pb};

use crate::error::{Context, Error, Result};
use crate::outln;

/// How long connecting to the admin plane may take.
const CONNECT: Duration = Duration::from_secs(1);

/// How often the process is looked for while it stops.
const POLL: Duration = Duration::from_millis(200);

/// Where this machine reaches the admin plane `cfg` binds: its bind
/// address, with an unspecified host (`0.0.0.0`, `[::]`) as loopback.
pub fn local_admin_addr(cfg: &AllocNodeConfig) -> String {
    let bind = cfg.listen_addr(Plane::Admin);
    match bind.rsplit_once(':') {
        Some(("0.0.0.0" | "[::]" | "" | "*", port)) => format!("127.0.0.1:{port}"),
        _ => bind.to_string(),
    }
}

/// Asks the AllocSvr of `cfg` to stop the planned way and waits, at most
/// `wait`, until it has exited.
pub async fn drain_self(cfg: &AllocNodeConfig, wait: Duration) -> Result<()> {
    let addr = local_admin_addr(cfg);
    let tls = match &cfg.tls {
        Some(t) => Some(t.client()?.expecting(ServerRole::Alloc)),
        None => None,
    };
    let ch = seqsvr_net::client::channel(&addr, tls.as_ref(), CONNECT)?;
    let mut c = AllocAdminClient::new(ch);
    let started = Instant::now();
    let reply = c
        .drain(pb::AllocDrainRequest {})
        .await
        .with_context(|| format!("{} at {addr} did not take the drain", cfg.id))?
        .into_inner();
    outln!(
        "{}: {} — handing {} sections to live peers, then exiting",
        cfg.id,
        if reply.already_stopping {
            "already stopping"
        } else {
            "stopping the planned way"
        },
        reply.sections
    )?;
    loop {
        tokio::time::sleep(POLL).await;
        let alive = tokio::time::timeout(CONNECT, c.status(pb::AllocStatusRequest {})).await;
        if matches!(alive, Ok(Err(_))) {
            outln!(
                "{}: stopped after {:.1} s",
                cfg.id,
                started.elapsed().as_secs_f64()
            )?;
            return Ok(());
        }
        if started.elapsed() >= wait {
            return Err(Error::Failed(format!(
                "{} at {addr} still runs after {wait:?}; what it still holds moves when its \
                 lease ends",
                cfg.id
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_bind_is_reached_over_loopback() {
        let text = |admin: &str| {
            format!(
                "id = \"alloc-1\"\naddr = \"127.0.0.1:7201\"\npeer_addr = \"127.0.0.1:7211\"\n\
                 admin_addr = \"10.1.2.3:7221\"\nadmin_listen = \"{admin}\"\n\
                 store = [\"127.0.0.1:7101\"]\ninsecure = true\n"
            )
        };
        for (listen, want) in [
            ("0.0.0.0:7221", "127.0.0.1:7221"),
            ("[::]:7221", "127.0.0.1:7221"),
            ("127.0.0.1:7221", "127.0.0.1:7221"),
        ] {
            match AllocNodeConfig::from_toml(&text(listen)) {
                Ok(cfg) => assert_eq!(local_admin_addr(&cfg), want, "{listen}"),
                Err(e) => panic!("{listen}: {e}"),
            }
        }
    }
}
