//! A disk that loses, at a power cut, every write not yet made durable by an
//! `fsync` — the model of Jepsen's LazyFS — for the files under the
//! directories a test names.
//!
//! Killing a process proves nothing about the disk: the kernel's page cache
//! survives `kill -9`, so a write that was never fsynced is still there when
//! the process restarts. A power cut loses it. This layer keeps, per file,
//! what a power cut would restore — the bytes every write overwrote since
//! the file's last completed `fsync`/`fdatasync`, and its length then — and
//! [`power_cut`] puts those back: the files then hold exactly what reached
//! the disk.
//!
//! sled 0.34 opens and writes its files itself, so the store has no seam
//! above the file system to put this layer in. It sits at the C library
//! boundary instead: this module defines `write`, `pwrite64`, `pwrite`,
//! `writev`, `pwritev`, `ftruncate64`, `ftruncate`, `fsync` and `fdatasync`.
//! A program's own definitions come before the shared C library's when it
//! is linked, so every call the test binary makes — std's `File`, hence
//! sled's and the store's — lands here; calls on the tracked files are
//! recorded, and all of them reach the kernel through raw system calls.
//! (sled 0.34 changes its files with `pwrite`, `write` and `ftruncate`
//! only — no shared mappings, no `fallocate` — and syncs them with
//! `sync_file_range` and `fsync`; `sync_file_range` is deliberately not a
//! durability point here, as it is not one on a real disk.)
//!
//! What a completed fsync covers: the writes made *before* it was called.
//! A write that lands while an fsync runs stays undoable until a later
//! fsync returns, as on a real disk. [`slow_fsync`] makes every fsync of a
//! tracked file take longer (a slow disk), so that an acknowledgement sent
//! before its fsync returned is caught with a wide margin.
//!
//! Not modelled: directory entries (creations, renames and deletions are
//! taken as durable) and torn sectors within a write.
//!
//! After [`power_cut`] every thread that touches a tracked file blocks for
//! good (the machine is off); the process is expected to report and exit.

#![allow(unsafe_code, dead_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use libc::{c_int, c_long, c_void, iovec, off64_t, size_t, ssize_t};

/// Whether any directory is tracked (until then every call goes straight
/// to the kernel).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Extra time every fsync of a tracked file takes, in µs.
static FSYNC_DELAY_US: AtomicU64 = AtomicU64::new(0);
static STATE: Mutex<State> = Mutex::new(State {
    roots: Vec::new(),
    files: Vec::new(),
    seq: 0,
    cut: false,
    writes: 0,
    fsyncs: 0,
});

struct State {
    /// The tracked directories (canonical).
    roots: Vec<PathBuf>,
    /// Every tracked file seen so far.
    files: Vec<Tracked>,
    /// Orders writes and fsyncs.
    seq: u64,
    /// The power is off.
    cut: bool,
    /// Writes to tracked files.
    writes: u64,
    /// Completed fsyncs of tracked files.
    fsyncs: u64,
}

struct Tracked {
    dev: u64,
    ino: u64,
    path: PathBuf,
    /// A descriptor of our own: it reverts the file even after the store
    /// closed or renamed it, and keeps the inode from being reused.
    fd: c_int,
    /// What each write since the last completed fsync overwrote.
    undo: Vec<Undo>,
    /// The length at the last completed fsync.
    synced_len: u64,
    /// The `seq` that fsync was called at.
    synced_seq: u64,
}

struct Undo {
    seq: u64,
    off: u64,
    old: Vec<u8>,
}

/// What a power cut dropped.
#[derive(Debug, Default, Clone, Copy)]
pub struct Dropped {
    /// Tracked files.
    pub files: usize,
    /// Files that lost something.
    pub files_changed: usize,
    /// Writes undone.
    pub writes: usize,
    /// Bytes cut off the files' ends.
    pub truncated: u64,
    /// Writes to tracked files before the cut.
    pub writes_seen: u64,
    /// fsyncs completed on tracked files before the cut.
    pub fsyncs_seen: u64,
}

/// Tracks every regular file under `dir` (which must exist) from now on.
pub fn track(dir: &Path) {
    let dir = dir.canonicalize().expect("a tracked directory exists");
    lock().roots.push(dir);
    ACTIVE.store(true, Ordering::SeqCst);
}

/// Makes every fsync of a tracked file take `d` longer.
pub fn slow_fsync(d: Duration) {
    FSYNC_DELAY_US.store(d.as_micros() as u64, Ordering::SeqCst);
}

/// Cuts the power: every tracked file gets back the content it had at its
/// last completed fsync. From now on any thread that writes or syncs a
/// tracked file blocks for good.
pub fn power_cut() -> Dropped {
    let mut st = lock();
    st.cut = true;
    let mut d = Dropped {
        files: st.files.len(),
        writes_seen: st.writes,
        fsyncs_seen: st.fsyncs,
        ..Dropped::default()
    };
    for f in &mut st.files {
        let len = size_of(f.fd).unwrap_or_else(|e| panic!("{}: {e}", f.path.display()));
        if f.undo.is_empty() && len <= f.synced_len {
            continue;
        }
        d.files_changed += 1;
        d.writes += f.undo.len();
        for u in f.undo.iter().rev() {
            let n =
                unsafe { sys_pwrite(f.fd, u.old.as_ptr().cast(), u.old.len(), u.off as off64_t) };
            assert_eq!(
                n,
                u.old.len() as ssize_t,
                "{}: cannot revert a write: {}",
                f.path.display(),
                std::io::Error::last_os_error()
            );
        }
        let now = size_of(f.fd).unwrap();
        d.truncated += now.saturating_sub(f.synced_len);
        let r = unsafe { libc::syscall(libc::SYS_ftruncate, f.fd as c_long, f.synced_len) };
        assert_eq!(r, 0, "{}: cannot truncate", f.path.display());
        f.undo.clear();
    }
    d
}

fn lock() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The machine is off: never return.
fn powered_off() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn stat(fd: c_int) -> Option<libc::stat64> {
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat64(fd, &mut st) } != 0 {
        return None;
    }
    Some(st)
}

fn size_of(fd: c_int) -> std::io::Result<u64> {
    stat(fd)
        .map(|s| s.st_size as u64)
        .ok_or_else(std::io::Error::last_os_error)
}

/// The index of `fd`'s file in `st.files` if it is (or, under a tracked
/// directory, becomes) tracked. Called with the lock held; `path` is `fd`'s
/// path, read before the lock was taken (see [`path_of`]).
fn find(st: &mut State, fd: c_int, s: &libc::stat64, path: Option<&Path>) -> Option<usize> {
    let (dev, ino) = (s.st_dev, s.st_ino);
    if let Some(i) = st.files.iter().position(|f| f.dev == dev && f.ino == ino) {
        return Some(i);
    }
    let path = path?;
    if !st.roots.iter().any(|r| path.starts_with(r)) {
        return None;
    }
    let own = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    assert!(own >= 0, "cannot duplicate a tracked file's descriptor");
    // What the file held before we first saw it counts as on disk.
    st.files.push(Tracked {
        dev,
        ino,
        path: path.to_path_buf(),
        fd: own,
        undo: Vec::new(),
        synced_len: s.st_size as u64,
        synced_seq: 0,
    });
    Some(st.files.len() - 1)
}

/// `fd`'s path, if it is a regular file and some directory is tracked.
fn path_of(fd: c_int) -> Option<(libc::stat64, Option<PathBuf>)> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return None;
    }
    let s = stat(fd)?;
    if s.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let link = CString::new(format!("/proc/self/fd/{fd}")).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = unsafe { libc::readlink(link.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let path = (n > 0).then(|| {
        buf.truncate(n as usize);
        PathBuf::from(std::ffi::OsStr::from_bytes(&buf))
    });
    Some((s, path))
}

/// Runs a write of `len` bytes at `off` (`None`: the file position) to
/// `fd`, recording what it overwrites if the file is tracked.
fn recorded(fd: c_int, off: Option<u64>, len: u64, op: impl FnOnce() -> ssize_t) -> ssize_t {
    let Some((_, path)) = path_of(fd) else {
        return op();
    };
    let mut st = lock();
    // Stat again under the lock: the length may have changed meanwhile.
    let Some(s) = stat(fd) else {
        drop(st);
        return op();
    };
    let Some(i) = find(&mut st, fd, &s, path.as_deref()) else {
        drop(st);
        return op();
    };
    if st.cut {
        drop(st);
        powered_off();
    }
    let size = s.st_size as u64;
    let at = off.unwrap_or_else(|| {
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags >= 0 && flags & libc::O_APPEND != 0 {
            size
        } else {
            (unsafe { libc::lseek64(fd, 0, libc::SEEK_CUR) }).max(0) as u64
        }
    });
    let keep = len.min(size.saturating_sub(at)) as usize;
    let mut old = vec![0u8; keep];
    if keep > 0 {
        let f = &st.files[i];
        let n = unsafe { libc::pread64(f.fd, old.as_mut_ptr().cast(), keep, at as off64_t) };
        assert_eq!(n, keep as ssize_t, "{}: cannot read", f.path.display());
    }
    st.seq += 1;
    st.writes += 1;
    let seq = st.seq;
    st.files[i].undo.push(Undo { seq, off: at, old });
    // The write itself under the lock, so a power cut sees it whole or not
    // at all.
    op()
}

/// An fsync (or fdatasync) of `fd`.
fn synced(fd: c_int, op: impl FnOnce() -> c_int) -> c_int {
    let Some((_, path)) = path_of(fd) else {
        return op();
    };
    let (i, called_at, len) = {
        let mut st = lock();
        let Some(s) = stat(fd) else {
            drop(st);
            return op();
        };
        let Some(i) = find(&mut st, fd, &s, path.as_deref()) else {
            drop(st);
            return op();
        };
        if st.cut {
            drop(st);
            powered_off();
        }
        (i, st.seq, s.st_size as u64)
    };
    let delay = FSYNC_DELAY_US.load(Ordering::Relaxed);
    if delay > 0 {
        std::thread::sleep(Duration::from_micros(delay));
    }
    let r = op();
    if r != 0 {
        return r;
    }
    let mut st = lock();
    if st.cut {
        // The power went off before this fsync returned.
        drop(st);
        powered_off();
    }
    st.fsyncs += 1;
    let f = &mut st.files[i];
    f.undo.retain(|u| u.seq > called_at);
    if called_at >= f.synced_seq {
        f.synced_seq = called_at;
        f.synced_len = len;
    }
    r
}

unsafe fn sys_pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t {
    libc::syscall(libc::SYS_pwrite64, fd as c_long, buf, n, off) as ssize_t
}

/// `ftruncate` that records what a shrink cuts off.
fn truncated(fd: c_int, len: off64_t) -> c_int {
    let raw = || unsafe { libc::syscall(libc::SYS_ftruncate, fd as c_long, len) as c_int };
    let size = match stat(fd) {
        Some(s) => s.st_size as u64,
        None => return raw(),
    };
    let len_u = len.max(0) as u64;
    if len_u >= size {
        // Growing: the power cut truncates to the synced length anyway.
        return raw();
    }
    // A shrink is a write of what it removes, in reverse.
    let mut r = 0;
    recorded(fd, Some(len_u), size - len_u, || {
        r = raw();
        0
    });
    r
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    recorded(fd, None, n as u64, || {
        libc::syscall(libc::SYS_write, fd as c_long, buf, n) as ssize_t
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, o: off64_t) -> ssize_t {
    recorded(fd, Some(o.max(0) as u64), n as u64, || {
        sys_pwrite(fd, buf, n, o)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, o: off64_t) -> ssize_t {
    pwrite64(fd, buf, n, o)
}

fn iov_len(iov: *const iovec, cnt: c_int) -> u64 {
    (0..cnt.max(0) as usize)
        .map(|i| unsafe { (*iov.add(i)).iov_len as u64 })
        .sum()
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    recorded(fd, None, iov_len(iov, cnt), || {
        libc::syscall(libc::SYS_writev, fd as c_long, iov, cnt as c_long) as ssize_t
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, o: off64_t) -> ssize_t {
    recorded(fd, Some(o.max(0) as u64), iov_len(iov, cnt), || {
        // The kernel takes the offset as two longs (low, high).
        libc::syscall(
            libc::SYS_pwritev,
            fd as c_long,
            iov,
            cnt as c_long,
            o as c_long,
            0 as c_long,
        ) as ssize_t
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    o: off64_t,
) -> ssize_t {
    pwritev(fd, iov, cnt, o)
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
    truncated(fd, len)
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off64_t) -> c_int {
    truncated(fd, len)
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    synced(fd, || libc::syscall(libc::SYS_fsync, fd as c_long) as c_int)
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    synced(fd, || {
        libc::syscall(libc::SYS_fdatasync, fd as c_long) as c_int
    })
}
