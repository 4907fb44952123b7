//! The dev cluster's ports, checked before anything starts: a port held by
//! something else (another `seqsvr dev`, any server) would leave a child
//! crash-looping and `seqctl` answering from whatever holds it. Each port
//! is bound and released at once; those that cannot be bound are named,
//! with what they were for and the flag that chooses others.

use crate::defaults::DEV_PORT_SPAN;
use crate::error::Error;

/// A port the dev cluster needs that it cannot bind.
#[derive(Debug)]
pub struct Taken {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// What it was for (`store-1's client plane`).
    pub what: String,
    /// Why it cannot be bound (in use, not permitted…).
    pub error: std::io::Error,
}

/// Every port of `ports` (address, what for) that cannot be bound now.
pub fn taken(ports: &[(String, String)]) -> Vec<Taken> {
    ports
        .iter()
        .filter_map(|(addr, what)| {
            std::net::TcpListener::bind(addr.as_str())
                .err()
                .map(|error| Taken {
                    addr: addr.clone(),
                    what: what.clone(),
                    error,
                })
        })
        .collect()
}

/// The error `seqsvr dev` exits with when ports of the cluster at `base`
/// are taken: each one named, what it was for, and how to choose others.
pub fn taken_error(taken: &[Taken], base: u16) -> Error {
    let port = |t: &Taken| t.addr.rsplit_once(':').map_or("?", |p| p.1).to_string();
    let each: Vec<String> = taken
        .iter()
        .map(|t| {
            let why = match t.error.kind() {
                std::io::ErrorKind::AddrInUse => "is in use".to_string(),
                _ => format!("cannot be bound: {}", t.error),
            };
            format!("port {} ({}) {why}", port(t), t.what)
        })
        .collect();
    let first = taken.first().map(port).unwrap_or_default();
    Error::Failed(format!(
        "{}; nothing was started. Stop what holds {} (another `seqsvr dev`? `ss -ltnp \
         'sport = :{first}'` shows it) or choose other ports with `--port-base N` (the dev \
         ports are N+1 to N+{DEV_PORT_SPAN}; now N = {base}), then give seqctl the same \
         `--port-base N`",
        each.join("; "),
        if taken.len() == 1 { "it" } else { "them" },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_port_is_found_and_named_with_the_flag() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap().to_string();
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let free_addr = free.local_addr().unwrap().to_string();
        drop(free);
        let ports = [
            (free_addr, "store-1's peer plane".to_string()),
            (addr.clone(), "store-1's client plane".to_string()),
        ];
        let taken = taken(&ports);
        assert_eq!(taken.len(), 1, "{taken:?}");
        assert_eq!(taken[0].addr, addr);
        let port = addr.rsplit_once(':').unwrap().1;
        let msg = taken_error(&taken, 7100).to_string();
        assert!(
            msg.starts_with(&format!("port {port} (store-1's client plane) is in use;")),
            "{msg}"
        );
        assert!(msg.contains("nothing was started"), "{msg}");
        assert!(msg.contains("--port-base N"), "{msg}");
        assert!(msg.contains("now N = 7100"), "{msg}");
    }

    #[test]
    fn several_taken_ports_are_all_named() {
        let t = |addr: &str, what: &str, kind| Taken {
            addr: addr.into(),
            what: what.into(),
            error: std::io::Error::from(kind),
        };
        let msg = taken_error(
            &[
                t(
                    "127.0.0.1:7111",
                    "store-1's client plane",
                    std::io::ErrorKind::AddrInUse,
                ),
                t(
                    "127.0.0.1:7241",
                    "alloc-1's Redis-protocol door",
                    std::io::ErrorKind::PermissionDenied,
                ),
            ],
            7100,
        )
        .to_string();
        assert!(
            msg.starts_with(
                "port 7111 (store-1's client plane) is in use; port 7241 (alloc-1's \
                 Redis-protocol door) cannot be bound: permission denied; nothing was started. \
                 Stop what holds them"
            ),
            "{msg}"
        );
    }
}
