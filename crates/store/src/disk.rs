//! One replica's sled database, with real durability.
//!
//! sled 0.34's `flush()` ends in `sync_file_range(2)` on Linux. That writes
//! the dirty pages but neither flushes the device's write cache nor the
//! file's metadata (its size grows as the log grows), so a power loss can
//! still lose "flushed" data. Raft is only safe if a vote or log entry it
//! acknowledges survives (promise 2), so [`Disk::sync`] follows every sled
//! flush with an `fsync(2)` of sled's data file. `tests/power_cut.rs`
//! checks it at the disk: a group on a disk that drops every write not yet
//! fsynced loses no acknowledged raise at a power cut.
//!
//! sled writes any *page* larger than a quarter of a segment to a separate
//! blob file that it never fsyncs. A page is a whole tree node: a leaf holds
//! up to 17 values before sled splits it, so a small per-value limit is not
//! enough — with sled's default 512 KiB segments, nine 16 KiB snapshot
//! chunks (or sixteen 8 KiB log entries) in one leaf already make a blob
//! that a power cut can lose or tear. So the database uses
//! [`SEGMENT_SIZE`] segments, and every value written through this module
//! stays below [`MAX_VALUE`], such that the largest leaf stays below the
//! blob threshold (checked at compile time). Larger data (snapshots) is
//! chunked by the caller.
//!
//! Trees: `raft` (vote, committed, purged, identity), `log` (index →
//! entry), `sm` (state-machine records), `snapshot` (the current snapshot).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Largest value ever written.
pub const MAX_VALUE: usize = 32 * 1024;

/// sled's segment size. sled logs a page larger than a quarter of a segment
/// as an unsynced blob file; a leaf holds at most 17 entries before it
/// splits.
pub const SEGMENT_SIZE: usize = 8 << 20;

/// Largest key written (fixed-width ids, short names).
const MAX_KEY: usize = 512;

// The largest leaf sled can build from our values stays inline (durable
// through the fsync of the data file), with room for sled's own headers.
const _: () = assert!(17 * (MAX_VALUE + MAX_KEY + 64) < SEGMENT_SIZE / 4);

/// An open replica database.
#[derive(Clone)]
pub struct Disk {
    inner: Arc<Inner>,
}

struct Inner {
    /// The sled database.
    db: sled::Db,
    /// sled's data file, opened separately so that we can fsync it.
    file: File,
    /// Serialises syncs; also where a sync's caller waits for a running one.
    sync_lock: Mutex<()>,
    /// fsyncs done since open (exported in status and metrics).
    fsyncs: AtomicU64,
    /// Time spent in sled's flush plus the fsync, in ns, since open: where
    /// a raise's latency goes (docs/benchmarks.md).
    sync_nanos: AtomicU64,
    /// Where the database lives.
    path: PathBuf,
}

impl Disk {
    /// Opens (or creates) the database in `dir`.
    pub fn open(dir: &Path) -> io::Result<Disk> {
        std::fs::create_dir_all(dir)?;
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::LowSpace)
            .segment_size(SEGMENT_SIZE)
            .open()
            .map_err(io::Error::other)?;
        let file = File::open(dir.join("db"))?;
        // Make the directory entries themselves durable once.
        File::open(dir)?.sync_all()?;
        Ok(Disk {
            inner: Arc::new(Inner {
                db,
                file,
                sync_lock: Mutex::new(()),
                fsyncs: AtomicU64::new(0),
                sync_nanos: AtomicU64::new(0),
                path: dir.to_path_buf(),
            }),
        })
    }

    /// Blob files sled wrote (must be none: they are never fsynced).
    pub fn blob_files(&self) -> io::Result<usize> {
        match std::fs::read_dir(self.inner.path.join("blobs")) {
            Ok(d) => Ok(d.count()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Opens a named tree.
    pub fn tree(&self, name: &str) -> io::Result<sled::Tree> {
        self.inner.db.open_tree(name).map_err(io::Error::other)
    }

    /// Makes everything written so far durable: sled flush, then fsync.
    ///
    /// Blocking; call from a blocking context (see [`Disk::sync_async`]).
    pub fn sync(&self) -> io::Result<()> {
        let _g = self
            .inner
            .sync_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let start = std::time::Instant::now();
        self.inner.db.flush().map_err(io::Error::other)?;
        self.inner.file.sync_all()?;
        self.inner
            .sync_nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.inner.fsyncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// [`Disk::sync`] on the blocking pool, so the async runtime keeps running.
    pub async fn sync_async(&self) -> io::Result<()> {
        let d = self.clone();
        tokio::task::spawn_blocking(move || d.sync())
            .await
            .map_err(io::Error::other)?
    }

    /// fsyncs done since open.
    pub fn fsyncs(&self) -> u64 {
        self.inner.fsyncs.load(Ordering::Relaxed)
    }

    /// Time spent making writes durable (flush + fsync) since open.
    pub fn sync_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.inner.sync_nanos.load(Ordering::Relaxed))
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

/// Refuses values that sled would store as an un-fsynced blob file.
pub fn check_value(len: usize) -> io::Result<()> {
    if len > MAX_VALUE {
        return Err(io::Error::other(format!(
            "value of {len} bytes exceeds the {MAX_VALUE}-byte limit"
        )));
    }
    Ok(())
}
