//! Floods: a hand-written HTTP/2 client that opens streams and never
//! finishes them ([`H2Flood`]), idle connections, and a process's RSS.
//! Part of `attack.rs`, which re-exports it.

use super::*;

/// Raises this process's open-file limit towards `want` (as far as the
/// hard limit allows), so a flood of connections is not cut short by the
/// test's own limit; processes started afterwards inherit it.
pub fn raise_fd_limit(want: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on this process with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        if r.rlim_cur < want {
            r.rlim_cur = want.min(r.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
    r.rlim_cur
}

/// A process's resident set size, in KiB (`VmRSS` in `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The largest RSS of `pid` sampled every 50 ms while `f` runs.
pub async fn peak_rss_during<T>(pid: u32, f: impl Future<Output = T>) -> (T, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(rss_kib(pid)));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let out = f.await;
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
    (out, peak.load(Ordering::Relaxed))
}

/// Opens up to `n` TCP connections to `addr` (within `limit`), writes
/// `first` on each (nothing if empty) and keeps them open; returns them
/// and how many could not be opened.
pub async fn idle_connections(
    addr: &str,
    n: usize,
    first: &[u8],
    limit: Duration,
) -> (Vec<tokio::net::TcpStream>, usize) {
    let until = Instant::now() + limit;
    let mut open = Vec::with_capacity(n);
    let mut failed = 0;
    for _ in 0..n {
        if Instant::now() > until {
            failed += 1;
            continue;
        }
        match tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr))
            .await
        {
            Ok(Ok(mut s)) => {
                if !first.is_empty() && s.write_all(first).await.is_err() {
                    failed += 1;
                    continue;
                }
                open.push(s);
            }
            _ => failed += 1,
        }
    }
    (open, failed)
}

/// How many of `conns` the server has closed (a read sees EOF or an
/// error; what the server sent before, such as SETTINGS or GOAWAY, is
/// read past). Does not wait.
pub fn closed_by_server(conns: &mut [tokio::net::TcpStream]) -> usize {
    let mut closed = 0;
    let mut buf = [0u8; 4096];
    for s in conns.iter_mut() {
        loop {
            match s.try_read(&mut buf) {
                Ok(0) => {
                    closed += 1;
                    break;
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    closed += 1;
                    break;
                }
            }
        }
    }
    closed
}

/// The first bytes of a TLS ClientHello: a handshake record announcing
/// 512 bytes, of which only the start is ever sent.
pub const PARTIAL_CLIENT_HELLO: &[u8] = &[
    0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
];

/// The HTTP/2 connection preface and an empty SETTINGS frame.
pub const H2_PREFACE: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// What an [`H2Flood`] did and what the server answered.
#[derive(Debug, Default, Clone)]
pub struct FloodReport {
    /// Streams opened (HEADERS sent).
    pub streams: u32,
    /// Request body bytes sent, over all streams.
    pub body_bytes: u64,
    /// Streams the server reset (e.g. REFUSED_STREAM beyond its limit).
    pub resets: u32,
    /// Streams the server answered and ended (e.g. a timeout status).
    pub answered: u32,
    /// Whether the server sent GOAWAY.
    pub goaway: bool,
    /// The server's advertised SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_streams: Option<u32>,
}

#[derive(Debug)]
struct H2State {
    conn_window: i64,
    init_window: i64,
    windows: HashMap<u32, i64>,
    reset: std::collections::HashSet<u32>,
    max_frame: usize,
    settings: bool,
    report: FloodReport,
    closed: bool,
}

type Writer = Arc<tokio::sync::Mutex<tokio::net::tcp::OwnedWriteHalf>>;

/// A hand-written plaintext HTTP/2 client (h2c, prior knowledge) that
/// opens gRPC calls and never finishes their bodies: what an attacker
/// with a TCP connection to a client plane can do. It honours the
/// server's flow control (or it would be cut off for breaking the
/// protocol, which tests nothing).
pub struct H2Flood {
    write: Writer,
    state: Arc<Mutex<H2State>>,
    wake: Arc<tokio::sync::Notify>,
    reader: tokio::task::JoinHandle<()>,
    next_id: u32,
    authority: String,
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&len.to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK string: no Huffman, 7-bit prefix length.
fn hpack_str(out: &mut Vec<u8>, s: &str) {
    let n = s.len();
    if n < 127 {
        out.push(n as u8);
    } else {
        out.push(127);
        let mut rest = n - 127;
        while rest >= 128 {
            out.push((rest % 128) as u8 | 0x80);
            rest /= 128;
        }
        out.push(rest as u8);
    }
    out.extend_from_slice(s.as_bytes());
}

/// A header as an HPACK literal without indexing, with a new name.
fn hpack_literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0x00);
    hpack_str(out, name);
    hpack_str(out, value);
}

impl H2Flood {
    /// Connects to `addr`, sends the preface and waits for the server's
    /// SETTINGS.
    pub async fn connect(addr: &str) -> std::io::Result<H2Flood> {
        let s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (mut r, w) = s.into_split();
        let write: Writer = Arc::new(tokio::sync::Mutex::new(w));
        write.lock().await.write_all(H2_PREFACE).await?;
        let state = Arc::new(Mutex::new(H2State {
            conn_window: 65_535,
            init_window: 65_535,
            windows: HashMap::new(),
            reset: Default::default(),
            max_frame: 16_384,
            settings: false,
            report: FloodReport::default(),
            closed: false,
        }));
        let wake = Arc::new(tokio::sync::Notify::new());
        let reader = {
            let (state, wake, write) = (state.clone(), wake.clone(), write.clone());
            tokio::spawn(async move {
                let mut head = [0u8; 9];
                loop {
                    if r.read_exact(&mut head).await.is_err() {
                        break;
                    }
                    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                    let (kind, flags) = (head[3], head[4]);
                    let stream =
                        u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                    let mut payload = vec![0u8; len];
                    if r.read_exact(&mut payload).await.is_err() {
                        break;
                    }
                    let mut reply = None;
                    {
                        let mut st = state.lock().unwrap();
                        match kind {
                            // HEADERS: an answer; with END_STREAM, the end of it.
                            0x1 if flags & 0x1 != 0 => st.report.answered += 1,
                            // DATA with END_STREAM.
                            0x0 if flags & 0x1 != 0 => st.report.answered += 1,
                            0x3 => {
                                st.report.resets += 1;
                                st.reset.insert(stream);
                            }
                            0x4 if flags & 0x1 == 0 => {
                                for p in payload.chunks_exact(6) {
                                    let id = u16::from_be_bytes([p[0], p[1]]);
                                    let v = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
                                    match id {
                                        0x3 => st.report.max_streams = Some(v),
                                        0x4 => {
                                            let delta = v as i64 - st.init_window;
                                            st.init_window = v as i64;
                                            for w in st.windows.values_mut() {
                                                *w += delta;
                                            }
                                        }
                                        0x5 => st.max_frame = v as usize,
                                        _ => {}
                                    }
                                }
                                st.settings = true;
                                reply = Some(frame(0x4, 0x1, 0, &[]));
                            }
                            0x6 if flags & 0x1 == 0 => reply = Some(frame(0x6, 0x1, 0, &payload)),
                            0x7 => st.report.goaway = true,
                            0x8 if payload.len() == 4 => {
                                let inc = (u32::from_be_bytes([
                                    payload[0], payload[1], payload[2], payload[3],
                                ]) & 0x7fff_ffff) as i64;
                                if stream == 0 {
                                    st.conn_window += inc;
                                } else if let Some(w) = st.windows.get_mut(&stream) {
                                    *w += inc;
                                }
                            }
                            _ => {}
                        }
                    }
                    if let Some(f) = reply {
                        if write.lock().await.write_all(&f).await.is_err() {
                            break;
                        }
                    }
                    wake.notify_waiters();
                }
                state.lock().unwrap().closed = true;
                wake.notify_waiters();
            })
        };
        let f = H2Flood {
            write,
            state,
            wake,
            reader,
            next_id: 1,
            authority: addr.to_string(),
        };
        let start = Instant::now();
        while !f.state.lock().unwrap().settings {
            if start.elapsed() > Duration::from_secs(5) || f.state.lock().unwrap().closed {
                return Err(std::io::Error::other("no SETTINGS from the server"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(f)
    }

    /// Opens `streams` gRPC calls to `path`, each announcing a message of
    /// `declared` bytes and sending `sent` of it, never ending the body.
    /// Stops at `until` (flow control may hold the bodies back).
    pub async fn flood(
        &mut self,
        path: &str,
        streams: u32,
        declared: u32,
        sent: usize,
        until: Instant,
    ) -> FloodReport {
        let mut headers = Vec::new();
        hpack_literal(&mut headers, ":method", "POST");
        hpack_literal(&mut headers, ":scheme", "http");
        hpack_literal(&mut headers, ":path", path);
        hpack_literal(&mut headers, ":authority", &self.authority);
        hpack_literal(&mut headers, "content-type", "application/grpc");
        hpack_literal(&mut headers, "te", "trailers");
        let mut ids = Vec::new();
        for _ in 0..streams {
            if Instant::now() > until || self.state.lock().unwrap().closed {
                break;
            }
            let id = self.next_id;
            self.next_id += 2;
            {
                let mut st = self.state.lock().unwrap();
                let w = st.init_window;
                st.windows.insert(id, w);
                st.report.streams += 1;
            }
            // END_HEADERS only: the body follows and never ends.
            let f = frame(0x1, 0x4, id, &headers);
            if self.write.lock().await.write_all(&f).await.is_err() {
                break;
            }
            ids.push(id);
        }
        // The bodies: a gRPC prefix announcing `declared` bytes, then `sent`
        // bytes of it, in frames the windows allow.
        let mut body = vec![0u8, 0, 0, 0, 0];
        body[1..5].copy_from_slice(&declared.to_be_bytes());
        body.resize(5 + sent, 0x5a);
        for id in ids {
            let mut off = 0;
            while off < body.len() {
                if Instant::now() > until {
                    return self.report();
                }
                let n = {
                    let mut st = self.state.lock().unwrap();
                    if st.closed {
                        drop(st);
                        return self.report();
                    }
                    if st.reset.contains(&id) {
                        break; // refused or reset: nothing more to send on it
                    }
                    let w = st.windows.get(&id).copied().unwrap_or(0);
                    let n = (body.len() - off)
                        .min(st.max_frame)
                        .min(st.conn_window.max(0) as usize)
                        .min(w.max(0) as usize);
                    if n > 0 {
                        st.conn_window -= n as i64;
                        *st.windows.get_mut(&id).unwrap() -= n as i64;
                        st.report.body_bytes += n as u64;
                    }
                    n
                };
                if n == 0 {
                    let _ =
                        tokio::time::timeout(Duration::from_millis(50), self.wake.notified()).await;
                    continue;
                }
                let f = frame(0x0, 0x0, id, &body[off..off + n]);
                if self.write.lock().await.write_all(&f).await.is_err() {
                    return self.report();
                }
                off += n;
            }
        }
        self.report()
    }

    /// What happened so far.
    pub fn report(&self) -> FloodReport {
        self.state.lock().unwrap().report.clone()
    }
}

impl Drop for H2Flood {
    fn drop(&mut self) {
        self.reader.abort();
    }
}
