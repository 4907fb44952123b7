//! Getting the memory of lost sections back to the operating system.
//!
//! On Linux a section's cells come from the AllocSvr's own arena
//! (`section/cells.rs`), which returns them itself. Elsewhere, or when the
//! arena cannot map its chunks, they are one zeroed block per take-over
//! from the global allocator, 800 KB for the default 100,000 uids. glibc's malloc serves a block of
//! at least its *mmap threshold* with pages of its own: fresh pages, so
//! cells never written stay out of RSS (lazy cells), and `free` unmaps
//! them, so a lost section's memory goes back at once. But the threshold
//! is dynamic by default: freeing such a block raises it to that block's
//! size. From the first lost section on, blocks of the same size then come
//! from malloc's heap, where `calloc` may have to clear them (resident at
//! once) and `free` keeps them for reuse: the AllocSvr's RSS would follow
//! the most cells it ever held instead of what it serves now.
//!
//! [`fix_mmap_threshold`] sets the threshold explicitly, which turns the
//! dynamic adjustment off for the process. The AllocSvr binary calls it
//! at startup, before any cells are allocated; a library never should (it
//! changes every allocation of the process), hence a function and not a
//! side effect of [`Allocator::new`](crate::Allocator::new).

/// The threshold set: glibc's own default, 128 KiB (cells of 16,384
/// uids). Blocks this large or larger get pages of their own.
pub const MMAP_THRESHOLD: usize = 128 * 1024;

/// Fixes malloc's mmap threshold at [`MMAP_THRESHOLD`] for this process.
/// Returns whether it was set: always with glibc; elsewhere there is no
/// such knob and nothing is done.
pub fn fix_mmap_threshold() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes malloc's parameters; glibc
        // serialises it against concurrent allocations.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
