//! Backups to files and restores from them (docs/operations.md, Backup and
//! disaster recovery): `seqctl store backup` writes what the leader
//! answers, `seqsvr store restore` reads it back into a
//! [`RestorePlan`], which no margin-less restore gets.

use std::io::Write;
use std::path::Path;

use seqsvr_store_core::backup::{Backup, MarginArgs, RestorePlan};

use crate::error::{Error, Result};

/// Writes `bytes` to `path` durably: a temporary file next to it, fsynced,
/// renamed over `path`, the directory fsynced. A backup that a crash cut
/// short never takes the place of a good one.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("partial");
    let what = |w: &str| format!("{w} {}", tmp.display());
    let mut f = std::fs::File::create(&tmp).map_err(|e| Error::io(what("creating"), e))?;
    f.write_all(bytes)
        .map_err(|e| Error::io(what("writing"), e))?;
    f.sync_all().map_err(|e| Error::io(what("syncing"), e))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| Error::io(format!("renaming to {}", path.display()), e))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("syncing {}", dir.display()), e))
}

/// Reads the backup at `path` and makes the plan that restores it with
/// the margin `args` state, at the wall-clock time `now_unix_ms` (a
/// raise rate is multiplied by the backup's age then). Refused, before
/// anything starts, without a margin or with one below a step.
pub fn plan(path: &Path, args: MarginArgs, now_unix_ms: u64) -> Result<RestorePlan> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let backup =
        Backup::decode(&bytes).map_err(|e| Error::Failed(format!("{}: {e}", path.display())))?;
    Ok(RestorePlan::new(backup, args, now_unix_ms)?)
}

/// The wall clock, in ms since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One line about a backup: what it holds and how old it is.
pub fn describe(b: &Backup, now_unix_ms: u64) -> String {
    let h = &b.header;
    let top = b
        .state
        .sections
        .iter()
        .map(|r| r.max_seq)
        .max()
        .unwrap_or(0);
    let count = |n: u32, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    format!(
        "backup of set {} at log index {} (term {}): {} sections, {}, {}, highest ceiling {}, \
         taken {:.1} s ago",
        h.set_id,
        h.log_index,
        h.log_term,
        h.sections,
        count(h.counters, "declared counter"),
        count(h.ids, "id namespace"),
        top,
        b.age_ms(now_unix_ms) as f64 / 1e3
    )
}
