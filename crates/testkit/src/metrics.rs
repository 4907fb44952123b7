//! What a process's metrics listener says: a scrape, and the sum of a
//! metric's samples.

use std::time::Duration;

/// The Prometheus text a metrics listener at `addr` serves (empty if it
/// does not answer).
pub fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The sum of every sample of metric `name` (exact name, any labels) whose
/// labels contain every `key="value"` of `labels`.
pub fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (head, value) = l.rsplit_once(' ')?;
            let (n, rest) = match head.split_once('{') {
                Some((n, rest)) => (n, rest),
                None => (head, ""),
            };
            (n == name && labels.iter().all(|kv| rest.contains(kv)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}
