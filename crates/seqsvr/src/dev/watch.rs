//! A child that keeps dying, told in the terminal: `seqsvr dev` restarts a
//! dead child (as a supervisor would), so a child that cannot run (a taken
//! port, a bad data directory) would otherwise crash-loop with its reason
//! only in its log file. Once a child has died [`KEEPS_DYING`] times within
//! [`WINDOW`], its name, last exit status and the last lines of its log are
//! printed, once per streak.

use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

/// Deaths within [`WINDOW`] that make a child one that keeps dying.
pub const KEEPS_DYING: usize = 3;
/// How far back deaths count.
pub const WINDOW: Duration = Duration::from_secs(60);
/// How many lines of its log are shown.
pub const TAIL_LINES: usize = 12;

/// One child's recent deaths.
#[derive(Debug, Default)]
pub struct Deaths {
    /// When it died, within the window, oldest first.
    times: VecDeque<Instant>,
    /// Whether this streak was reported.
    reported: bool,
}

impl Deaths {
    /// Records a death at `now`; true when the child is now found to keep
    /// dying (once per streak: a streak ends when it stays up a whole
    /// window).
    pub fn died(&mut self, now: Instant) -> bool {
        while self
            .times
            .front()
            .is_some_and(|&t| now.duration_since(t) > WINDOW)
        {
            self.times.pop_front();
        }
        if self.times.is_empty() {
            self.reported = false;
        }
        self.times.push_back(now);
        if self.times.len() >= KEEPS_DYING && !self.reported {
            self.reported = true;
            return true;
        }
        false
    }

    /// Deaths within the window.
    pub fn recent(&self) -> usize {
        self.times.len()
    }
}

/// The last `n` non-empty lines of the log at `path`, terminal colours
/// removed (reads at most its last 64 KiB).
pub fn log_tail(path: &Path, n: usize) -> std::io::Result<Vec<String>> {
    const MAX: u64 = 64 * 1024;
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(MAX)))?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<String> = text
        .lines()
        .map(strip_ansi)
        .filter(|l| !l.trim().is_empty())
        .collect();
    Ok(lines[lines.len().saturating_sub(n)..].to_vec())
}

/// `line` without terminal escape sequences (`ESC [ … letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// What the terminal is told about `name`, which died `deaths` times
/// within the window (1 when it is not restarted), last with `status`.
pub fn report(name: &str, deaths: usize, status: &str, log: &Path, tail: &[String]) -> String {
    let head = if deaths > 1 {
        format!(
            "{name} keeps dying: {deaths} exits within {} s, the last {status}",
            WINDOW.as_secs()
        )
    } else {
        format!("{name} died ({status}) and is not restarted")
    };
    let mut s = format!("{head}; last lines of {}:", log.display());
    if tail.is_empty() {
        s.push_str("\n  (empty)");
    }
    for l in tail {
        s.push_str("\n  | ");
        s.push_str(l);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_keeps_dying_at_the_third_death_in_a_window_once_per_streak() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut d = Deaths::default();
        assert!(!d.died(t0));
        assert!(!d.died(t0 + s(3)));
        assert!(d.died(t0 + s(6)), "third death within the window");
        assert!(!d.died(t0 + s(9)), "reported once per streak");
        assert_eq!(d.recent(), 4);
        // Up for longer than a window: a new streak.
        let later = t0 + s(9) + WINDOW + s(1);
        assert!(!d.died(later));
        assert!(!d.died(later + s(1)));
        assert!(d.died(later + s(2)));
        // Deaths spread out never count as a loop.
        let mut slow = Deaths::default();
        for i in 0..10 {
            assert!(!slow.died(t0 + (WINDOW + s(1)) * i));
        }
    }

    #[test]
    fn the_report_names_the_child_its_status_and_its_last_log_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("store-1.log");
        let mut text = String::new();
        for i in 0..20 {
            text.push_str(&format!("\u{1b}[2mline {i}\u{1b}[0m\n\n"));
        }
        std::fs::write(&log, text).unwrap();
        let tail = log_tail(&log, 3).unwrap();
        assert_eq!(tail, ["line 17", "line 18", "line 19"]);
        let r = report("store-1", 3, "exit status: 1", &log, &tail);
        assert!(
            r.starts_with(
                "store-1 keeps dying: 3 exits within 60 s, the last exit status: 1; last lines of "
            ),
            "{r}"
        );
        assert!(
            r.ends_with("store-1.log:\n  | line 17\n  | line 18\n  | line 19"),
            "{r}"
        );
        let once = report("alloc-1", 1, "signal: 9 (SIGKILL)", &log, &[]);
        assert!(once.starts_with("alloc-1 died (signal: 9 (SIGKILL)) and is not restarted"));
        assert!(once.ends_with("(empty)"));
    }
}
