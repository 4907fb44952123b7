//! What one plane's listener allows.
//!
//! Every limit bounds what a caller can make the server hold: memory for
//! messages and connections, tasks for streams, sockets for slow or silent
//! peers. The defaults differ per plane because the callers do:
//!
//! | | client | peer | admin |
//! | --- | --- | --- | --- |
//! | `max_message` | 64 KiB | 8 MiB | 1 MiB |
//! | `max_concurrent_streams` (per connection) | 1024 | 256 | 64 |
//! | `max_pending_resets` (per connection) | 1024 | 256 | 64 |
//! | `max_connections` (per listener, handshake done) | 4096 | 1024 | 64 |
//! | `max_handshakes` (per listener, handshake under way) | 1024 | 256 | 64 |
//! | `max_handshakes_per_source` (per IPv4 address or IPv6 /64) | 64 | 16 | 16 |
//! | `max_unfinished_bytes` (per listener) | 128 MiB | 1 GiB | 64 MiB |
//! | `idle_timeout_ms` | 300 000 | 300 000 | 300 000 |
//! | `handshake_timeout_ms` | 3 000 | 3 000 | 3 000 |
//! | `request_timeout_ms` | 5 000 | 30 000 | 60 000 |
//! | `keepalive_interval_ms` | 0 (off) | 10 000 | 30 000 |
//! | `keepalive_timeout_ms` | 10 000 | 5 000 | 10 000 |
//!
//! - Client-plane requests are a user id or a short batch of them, so 64
//!   KiB is generous while keeping what a stranger can make the server
//!   buffer small. IM backends multiplex many calls on few connections,
//!   hence many streams per connection.
//! - Peer-plane messages carry Raft snapshot chunks (at most 4 MiB) and
//!   batches of log entries; 8 MiB leaves room for their framing. Calls
//!   may wait on a disk sync or a slow link, hence the longer request
//!   timeout; the shorter keepalive finds a dead replica sooner.
//! - Admin calls are few, from few operators, and may wait for a Raft
//!   commit (membership changes), hence the longest request timeout.
//! - The client plane sends no keepalive pings of its own. They would find
//!   a vanished client sooner than the idle timeout does, but nothing else:
//!   pings do not count as use, so they cannot keep a connection open past
//!   `idle_timeout`, and a call whose client vanished ends at
//!   `request_timeout`. (Clients ping from their side while they have
//!   calls open, as `SeqClient` does, to find a dead server fast.)
//!   What they would cost is on every call: with keepalive on, the HTTP/2
//!   server records the time of every frame it reads under a lock, a
//!   measurable share of a call on the busiest plane. A vanished client's
//!   connection therefore holds its slot under `max_connections` until the
//!   idle timeout closes it; set `keepalive_interval_ms` to find it sooner.
//!   `keepalive_interval_ms = 0` turns keepalive off on any plane.
//! - A caller resets a call when its deadline passes. Calls opened and
//!   reset before the server has taken them up count against
//!   `max_pending_resets`; beyond it the connection is closed with GOAWAY
//!   `ENHANCE_YOUR_CALM` (HTTP/2's guard against "rapid reset" floods,
//!   whose own default is 20). A process resumed after a pause reads its
//!   whole backlog before taking up any of it, so every call opened and
//!   reset during the pause counts at once: with 20, a pause of a second
//!   under a few dozen callers closed their connection and failed the
//!   calls that were still in time. As many as the connection's
//!   `max_concurrent_streams` lets a pause reset a full window of calls,
//!   or a smaller load's calls many times over, and makes a flood hold no
//!   more than the streams a connection may hold open anyway (see
//!   docs/architecture/security.md, "Resets after a pause").
//! - Only connections that finished their TLS handshake (and, on the peer
//!   and admin planes, presented a certificate naming a seqsvr role) count
//!   under `max_connections`. Connections still handshaking have their own,
//!   smaller pool and a per-source share of it, and get `handshake_timeout`
//!   to finish: a stranger who opens sockets and says nothing holds at most
//!   `max_handshakes_per_source` of them for at most that long, and never a
//!   slot a legitimate caller needs (see docs/architecture/security.md).
//!
//! In configuration each plane is a table whose missing keys take that
//! plane's defaults ([`PlaneLimits`]); durations are whole milliseconds:
//!
//! ```toml
//! [limits.client]
//! max_connections = 20000
//!
//! [limits.peer]
//! request_timeout_ms = 10000
//! ```
//!
//! # What "idle" means
//!
//! A connection is idle while the peer sends no request frames (HTTP/2
//! HEADERS, DATA, CONTINUATION or RST_STREAM); pings, settings and window
//! updates do not count, so neither side's keepalive keeps an unused
//! connection open. `request_timeout` must be shorter than `idle_timeout`,
//! so a call still being served keeps its connection.

use crate::error::{Error, Result};
use crate::plane::Plane;
use serde::{Deserialize, Deserializer, Serialize};
use std::time::Duration;

/// The limits of one plane's listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// The largest request message, in bytes, as sent on the wire (after
    /// compression). A larger one is answered `RESOURCE_EXHAUSTED`.
    pub max_message: usize,
    /// Streams (calls) one connection may have open at once. The server
    /// advertises it in HTTP/2 SETTINGS, so a client queues calls beyond
    /// it; calls a client sends before those SETTINGS reach it (a burst on
    /// a new connection) are refused beyond it with REFUSED_STREAM, which
    /// clients see as `UNAVAILABLE` and may retry.
    pub max_concurrent_streams: u32,
    /// Calls one connection may have opened and reset before the server
    /// has taken them up (read, not yet accepted). Beyond it the server
    /// closes the connection with GOAWAY `ENHANCE_YOUR_CALM`: a flood of
    /// resets. A paused process reads the resets its callers sent during
    /// the pause all at once, so this bounds the calls a pause may reset
    /// on one connection without costing the others.
    pub max_pending_resets: usize,
    /// Connections the listener serves at once: those whose TLS handshake
    /// is done (on the peer and admin planes, with a certificate naming a
    /// role). A connection finishing its handshake beyond it is closed at
    /// once. (Plaintext connections count from their accept.)
    pub max_connections: usize,
    /// Connections still in their TLS handshake, at once. A new connection
    /// beyond it is accepted and closed at once.
    pub max_handshakes: usize,
    /// Of those, from one source at once: one IPv4 address, or one IPv6
    /// /64 (what one host is usually given).
    pub max_handshakes_per_source: usize,
    /// Bytes that request messages begun and not yet complete may announce,
    /// over all the listener's connections. A message not complete within
    /// the HTTP/2 frame that starts it holds its announced length until it
    /// is complete or its call ends; one that finds no room fails its
    /// call with `RESOURCE_EXHAUSTED`. Messages that arrive in one frame
    /// (up to 16 KiB) never count.
    pub max_unfinished_bytes: usize,
    /// A connection that sends no request frames this long is closed.
    #[serde(rename = "idle_timeout_ms", with = "ms")]
    pub idle_timeout: Duration,
    /// Time from accepting a connection to having its TLS handshake (if
    /// any) done and the HTTP/2 preface read; a slower one is closed.
    #[serde(rename = "handshake_timeout_ms", with = "ms")]
    pub handshake_timeout: Duration,
    /// The longest a call is served; a client's shorter `grpc-timeout`
    /// wins. A call past it is answered `CANCELLED`.
    #[serde(rename = "request_timeout_ms", with = "ms")]
    pub request_timeout: Duration,
    /// The server pings a connection it has heard nothing from this long…
    /// (zero: it never pings)
    #[serde(rename = "keepalive_interval_ms", with = "ms")]
    pub keepalive_interval: Duration,
    /// …and closes it if the ping is not answered within this.
    #[serde(rename = "keepalive_timeout_ms", with = "ms")]
    pub keepalive_timeout: Duration,
}

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const MAX_MESSAGE_CEILING: usize = 256 * MIB;
const MAX_MESSAGE_FLOOR: usize = KIB;

impl Limits {
    /// The defaults for `plane` (see the module doc for why).
    pub fn for_plane(plane: Plane) -> Limits {
        let s = Duration::from_secs;
        match plane {
            Plane::Client => Limits {
                max_message: 64 * KIB,
                max_concurrent_streams: 1024,
                max_pending_resets: 1024,
                max_connections: 4096,
                max_handshakes: 1024,
                max_handshakes_per_source: 64,
                max_unfinished_bytes: 128 * MIB,
                idle_timeout: s(300),
                handshake_timeout: s(3),
                request_timeout: s(5),
                keepalive_interval: Duration::ZERO,
                keepalive_timeout: s(10),
            },
            Plane::Peer => Limits {
                max_message: 8 * MIB,
                max_concurrent_streams: 256,
                max_pending_resets: 256,
                max_connections: 1024,
                max_handshakes: 256,
                max_handshakes_per_source: 16,
                max_unfinished_bytes: 1024 * MIB,
                idle_timeout: s(300),
                handshake_timeout: s(3),
                request_timeout: s(30),
                keepalive_interval: s(10),
                keepalive_timeout: s(5),
            },
            Plane::Admin => Limits {
                max_message: MIB,
                max_concurrent_streams: 64,
                max_pending_resets: 64,
                max_connections: 64,
                max_handshakes: 64,
                max_handshakes_per_source: 16,
                max_unfinished_bytes: 64 * MIB,
                idle_timeout: s(300),
                handshake_timeout: s(3),
                request_timeout: s(60),
                keepalive_interval: s(30),
                keepalive_timeout: s(10),
            },
        }
    }

    /// Checks that the limits make sense together; `plane` only names the
    /// plane in the error.
    pub fn validate(&self, plane: Plane) -> Result<()> {
        let bad = |reason: String| Err(Error::Limits { plane, reason });
        if !(MAX_MESSAGE_FLOOR..=MAX_MESSAGE_CEILING).contains(&self.max_message) {
            return bad(format!(
                "max_message {} is outside {MAX_MESSAGE_FLOOR}..={MAX_MESSAGE_CEILING}",
                self.max_message
            ));
        }
        if self.max_unfinished_bytes < self.max_message {
            return bad(format!(
                "max_unfinished_bytes {} is below max_message {}: a message sent in several \
                 frames could never fit",
                self.max_unfinished_bytes, self.max_message
            ));
        }
        if self.max_concurrent_streams == 0 {
            return bad("max_concurrent_streams must be at least 1".into());
        }
        if self.max_pending_resets == 0 {
            return bad("max_pending_resets must be at least 1".into());
        }
        if self.max_connections == 0 {
            return bad("max_connections must be at least 1".into());
        }
        if self.max_handshakes == 0 || self.max_handshakes_per_source == 0 {
            return bad("max_handshakes and max_handshakes_per_source must be at least 1".into());
        }
        for (name, d) in [
            ("idle_timeout_ms", self.idle_timeout),
            ("handshake_timeout_ms", self.handshake_timeout),
            ("request_timeout_ms", self.request_timeout),
            ("keepalive_timeout_ms", self.keepalive_timeout),
        ] {
            if d.is_zero() {
                return bad(format!("{name} must be positive"));
            }
        }
        if self.request_timeout >= self.idle_timeout {
            return bad(format!(
                "request_timeout_ms ({}) must be shorter than idle_timeout_ms ({}), or a call \
                 still being served could lose its connection",
                self.request_timeout.as_millis(),
                self.idle_timeout.as_millis()
            ));
        }
        Ok(())
    }

    /// The keepalive interval, if the server pings at all.
    pub fn keepalive(&self) -> Option<Duration> {
        (!self.keepalive_interval.is_zero()).then_some(self.keepalive_interval)
    }
}

/// The limits of all three planes. In configuration, each plane's table
/// may leave out any key; a missing key takes that plane's default.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlaneLimits {
    /// The client plane.
    pub client: Limits,
    /// The peer plane.
    pub peer: Limits,
    /// The admin plane.
    pub admin: Limits,
}

impl Default for PlaneLimits {
    fn default() -> Self {
        PlaneLimits {
            client: Limits::for_plane(Plane::Client),
            peer: Limits::for_plane(Plane::Peer),
            admin: Limits::for_plane(Plane::Admin),
        }
    }
}

impl PlaneLimits {
    /// One plane's limits.
    pub fn get(&self, plane: Plane) -> &Limits {
        match plane {
            Plane::Client => &self.client,
            Plane::Peer => &self.peer,
            Plane::Admin => &self.admin,
        }
    }

    /// Validates every plane.
    pub fn validate(&self) -> Result<()> {
        Plane::ALL.iter().try_for_each(|&p| self.get(p).validate(p))
    }
}

/// A plane's table as written: any key may be missing.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Patch {
    max_message: Option<usize>,
    max_concurrent_streams: Option<u32>,
    max_pending_resets: Option<usize>,
    max_connections: Option<usize>,
    max_handshakes: Option<usize>,
    max_handshakes_per_source: Option<usize>,
    max_unfinished_bytes: Option<usize>,
    idle_timeout_ms: Option<u64>,
    handshake_timeout_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    keepalive_interval_ms: Option<u64>,
    keepalive_timeout_ms: Option<u64>,
}

impl Patch {
    fn over(self, plane: Plane) -> Limits {
        let d = Limits::for_plane(plane);
        let ms = |v: Option<u64>, dflt| v.map(Duration::from_millis).unwrap_or(dflt);
        Limits {
            max_message: self.max_message.unwrap_or(d.max_message),
            max_concurrent_streams: self
                .max_concurrent_streams
                .unwrap_or(d.max_concurrent_streams),
            max_pending_resets: self.max_pending_resets.unwrap_or(d.max_pending_resets),
            max_connections: self.max_connections.unwrap_or(d.max_connections),
            max_handshakes: self.max_handshakes.unwrap_or(d.max_handshakes),
            max_handshakes_per_source: self
                .max_handshakes_per_source
                .unwrap_or(d.max_handshakes_per_source),
            max_unfinished_bytes: self.max_unfinished_bytes.unwrap_or(d.max_unfinished_bytes),
            idle_timeout: ms(self.idle_timeout_ms, d.idle_timeout),
            handshake_timeout: ms(self.handshake_timeout_ms, d.handshake_timeout),
            request_timeout: ms(self.request_timeout_ms, d.request_timeout),
            keepalive_interval: ms(self.keepalive_interval_ms, d.keepalive_interval),
            keepalive_timeout: ms(self.keepalive_timeout_ms, d.keepalive_timeout),
        }
    }
}

impl<'de> Deserialize<'de> for PlaneLimits {
    fn deserialize<D: Deserializer<'de>>(de: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Tables {
            #[serde(default)]
            client: Patch,
            #[serde(default)]
            peer: Patch,
            #[serde(default)]
            admin: Patch,
        }
        let t = Tables::deserialize(de)?;
        Ok(PlaneLimits {
            client: t.client.over(Plane::Client),
            peer: t.peer.over(Plane::Peer),
            admin: t.admin.over(Plane::Admin),
        })
    }
}

/// Durations as whole milliseconds, as the rest of seqsvr's configuration
/// writes them.
mod ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_as_documented() {
        let all = PlaneLimits::default();
        all.validate().unwrap();
        assert_eq!(all.client.max_message, 64 * 1024);
        assert_eq!(all.admin.max_message, 1024 * 1024);
        assert_eq!(all.peer.max_message, 8 * 1024 * 1024);
        // Raft snapshot chunks are at most 4 MiB and must fit with framing.
        assert!(all.peer.max_message > 4 * 1024 * 1024);
        // The client plane does not ping (see the module doc); the others do.
        assert_eq!(all.client.keepalive(), None);
        assert_eq!(all.peer.keepalive(), Some(Duration::from_secs(10)));
        assert_eq!(all.admin.keepalive(), Some(Duration::from_secs(30)));
    }

    #[test]
    fn keepalive_is_turned_on_and_off_by_its_interval() {
        let l: PlaneLimits = toml::from_str(
            "[client]\nkeepalive_interval_ms = 20000\n[admin]\nkeepalive_interval_ms = 0\n",
        )
        .unwrap();
        l.validate().unwrap();
        assert_eq!(l.client.keepalive(), Some(Duration::from_secs(20)));
        assert_eq!(l.admin.keepalive(), None);
        let e = Limits {
            keepalive_timeout: Duration::ZERO,
            ..Limits::for_plane(Plane::Peer)
        }
        .validate(Plane::Peer)
        .unwrap_err();
        assert!(e.to_string().contains("keepalive_timeout_ms"), "{e}");
    }

    #[test]
    fn partial_tables_take_their_planes_defaults() {
        let l: PlaneLimits =
            toml::from_str("[client]\nmax_connections = 7\n[peer]\nrequest_timeout_ms = 1500\n")
                .unwrap();
        assert_eq!(l.client.max_connections, 7);
        assert_eq!(l.client.max_message, 64 * 1024);
        assert_eq!(l.peer.request_timeout, Duration::from_millis(1500));
        assert_eq!(l.peer.max_message, 8 * 1024 * 1024);
        assert_eq!(l.admin, Limits::for_plane(Plane::Admin));
        assert_eq!(
            toml::from_str::<PlaneLimits>("").unwrap(),
            PlaneLimits::default()
        );
        assert!(toml::from_str::<PlaneLimits>("[client]\nmax_mesage = 1\n").is_err());
        assert!(toml::from_str::<PlaneLimits>("[other]\n").is_err());
    }

    #[test]
    fn a_full_table_round_trips() {
        let l = Limits::for_plane(Plane::Peer);
        let text = toml::to_string(&l).unwrap();
        assert!(text.contains("idle_timeout_ms = 300000"), "{text}");
        assert_eq!(toml::from_str::<Limits>(&text).unwrap(), l);
    }

    #[test]
    fn validation() {
        let ok = Limits::for_plane(Plane::Client);
        let cases: [(&str, Limits); 6] = [
            (
                "max_message",
                Limits {
                    max_message: 10,
                    ..ok.clone()
                },
            ),
            (
                "max_concurrent_streams",
                Limits {
                    max_concurrent_streams: 0,
                    ..ok.clone()
                },
            ),
            (
                "max_pending_resets",
                Limits {
                    max_pending_resets: 0,
                    ..ok.clone()
                },
            ),
            (
                "max_connections",
                Limits {
                    max_connections: 0,
                    ..ok.clone()
                },
            ),
            (
                "handshake_timeout_ms",
                Limits {
                    handshake_timeout: Duration::ZERO,
                    ..ok.clone()
                },
            ),
            (
                "shorter than idle",
                Limits {
                    request_timeout: ok.idle_timeout,
                    ..ok.clone()
                },
            ),
        ];
        for (what, l) in cases {
            let e = l.validate(Plane::Client).unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("client"), "{what}: {e}");
        }
    }
}
