//! Where a block's cells live: [`Cells`], from a [`CellArena`] or the heap.
//!
//! # Why an arena
//! Under load from many uids, nearly every call's cell misses the TLB as
//! well as the cache: a million uids are 8 MB of cells, some 2,000 small
//! pages, and on a virtual machine each miss is a two-level page walk. A
//! prefetch cannot hide that part (the CPU finishes the walk before the
//! prefetch retires). On huge pages (2 MB) the same cells are four TLB
//! entries. A section's block (800 KB for 100,000 uids) is smaller than a
//! huge page, so blocks get huge pages only side by side in one region:
//! the arena. It maps its memory in chunks of [`CHUNK`], aligned to 2 MB
//! and marked `MADV_HUGEPAGE` (which takes effect where the machine's
//! transparent huge pages are `madvise` or `always`), and cuts them into
//! slots of one section's cells, rounded up to whole 4 KiB pages.
//!
//! # Memory returned, and lazy cells
//! Fresh slots are fresh anonymous memory: zero, and not resident until a
//! cell is written. A slot given back (its block freed after the section
//! was lost, see `section.rs`) is `MADV_DONTNEED`ed, which drops its pages
//! (RSS goes down at once) and makes it read as zeros again. Pages of a
//! huge page that a given-back slot shared with a live neighbour are
//! unmapped at once but returned to the system when it splits such pages
//! (under memory pressure). Chunks are unmapped only with the arena (they
//! are address space, not memory, once their slots are given back).
//!
//! # Advice per chunk, never per slot
//! Huge-page advice is given once, to a whole chunk, when it is mapped.
//! Advice is a property of a mapping: the kernel keeps a range advised
//! differently from its neighbours as a mapping (VMA) of its own. Advising
//! slots one by one — `MADV_NOHUGEPAGE` on a slot given back, so that
//! `khugepaged` would not fill it in while free, and `MADV_HUGEPAGE` again
//! when it was taken — cut a chunk into one mapping per run of free
//! slots: losses interleaved with served sections reach the system's
//! limit on mappings per process (`vm.max_map_count`, 65,530 by default)
//! at about 10^5 losses, after which every `mmap` of the process fails
//! (thread stacks, the allocator's own, the next chunk). `MADV_DONTNEED`
//! changes no advice and splits nothing. The price: where the machine's
//! `khugepaged` collapses huge pages in the background, a free slot's
//! pages that share a 2 MB range with a live slot's may be filled in again
//! (as zeros: a slot still reads as zeros when it is taken), so part of
//! what interleaved losses gave back may become resident again, up to the
//! whole 2 MB ranges that live slots touch; free slots are taken first,
//! before any fresh one, so that memory is the next block's.
//!
//! # Falling back
//! Where the arena cannot help or cannot be had (not Linux, a block larger
//! than a slot, address space refused by the system's overcommit policy),
//! cells come zeroed from the global allocator as before. Correctness never
//! depends on which: either way a block's cells start at zero and belong to
//! that block alone until it is freed.

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// Address space mapped at a time (its slots are cut from it as needed).
pub(crate) const CHUNK: usize = 64 << 20;
/// A huge page.
const HUGE: usize = 2 << 20;
/// A small page: slots are whole pages, so giving one back never touches
/// a neighbour's cells.
const PAGE: usize = 4096;

/// One block's cells: `len` zero-initialised `AtomicU64`s owned by the
/// block, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Cells {
    ptr: NonNull<AtomicU64>,
    len: usize,
    from: Source,
}

#[derive(Debug)]
enum Source {
    /// Nothing to free (no cells).
    None,
    /// The global allocator, with this layout.
    Heap(Layout),
    /// A slot of this arena.
    Arena(Arc<CellArena>),
}

// SAFETY: `Cells` owns its memory (no one else frees or reuses it while it
// lives) and only hands out `&[AtomicU64]`, which is Send and Sync.
unsafe impl Send for Cells {}
// SAFETY: as above.
unsafe impl Sync for Cells {}

impl Cells {
    /// `len` cells, all 0: from `arena` if given and it can, else from the
    /// heap. No cell is written, so untouched pages stay out of RSS.
    pub(crate) fn zeroed(len: usize, arena: Option<&Arc<CellArena>>) -> Self {
        if len == 0 {
            return Self {
                ptr: NonNull::dangling(),
                len,
                from: Source::None,
            };
        }
        if let Some(arena) = arena {
            if let Some(ptr) = arena.take(len) {
                return Self {
                    ptr,
                    len,
                    from: Source::Arena(arena.clone()),
                };
            }
        }
        let layout = Layout::array::<AtomicU64>(len).expect("a section's cells fit in memory");
        // SAFETY: the layout is not zero-sized.
        let ptr = unsafe { alloc_zeroed(layout) }.cast::<AtomicU64>();
        let Some(ptr) = NonNull::new(ptr) else {
            handle_alloc_error(layout);
        };
        Self {
            ptr,
            len,
            from: Source::Heap(layout),
        }
    }

    /// Whether the cells are in an arena slot (tests and figures).
    #[cfg(test)]
    pub(crate) fn in_arena(&self) -> bool {
        matches!(self.from, Source::Arena(_))
    }
}

impl Deref for Cells {
    type Target = [AtomicU64];

    #[inline(always)]
    fn deref(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` is `len` initialised cells (all-zero bytes are a
        // valid `AtomicU64`) owned by `self` for its whole life, or
        // dangling with `len` 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Cells {
    fn drop(&mut self) {
        match &self.from {
            Source::None => {}
            // SAFETY: allocated by `alloc_zeroed` with this layout.
            Source::Heap(layout) => unsafe { dealloc(self.ptr.as_ptr().cast(), *layout) },
            Source::Arena(arena) => arena.give_back(self.ptr),
        }
    }
}

/// Slots for one allocator's cells, on huge pages where the system allows
/// (module docs). Shared with the deferred frees, which give slots back
/// from any thread.
#[derive(Debug)]
pub(crate) struct CellArena {
    /// Bytes a slot: one section's cells, rounded up to whole pages.
    slot: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Slots given back, zeroed, ready to reuse.
    free: Vec<usize>,
    /// The next never-used slot of the newest chunk, and that chunk's end.
    next: usize,
    end: usize,
    /// Every mapping made: (address, length), unmapped with the arena.
    maps: Vec<(usize, usize)>,
}

impl CellArena {
    /// An arena for blocks of up to `max_len` cells; `None` where there is
    /// no arena (not Linux, or no cells).
    pub(crate) fn new(max_len: usize) -> Option<Arc<Self>> {
        if !cfg!(target_os = "linux") || max_len == 0 {
            return None;
        }
        let bytes = max_len.checked_mul(std::mem::size_of::<AtomicU64>())?;
        let slot = bytes.checked_next_multiple_of(PAGE)?;
        if slot > CHUNK {
            return None;
        }
        Some(Arc::new(Self {
            slot,
            state: Mutex::new(State::default()),
        }))
    }

    /// A zeroed slot for `len` cells, or `None` (too large, or the system
    /// refused the address space): the caller falls back to the heap.
    fn take(&self, len: usize) -> Option<NonNull<AtomicU64>> {
        if len.checked_mul(std::mem::size_of::<AtomicU64>())? > self.slot {
            return None;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // A reused slot keeps its chunk's advice: no call to the system
        // here (module docs, Advice per chunk).
        let addr = match st.free.pop() {
            Some(addr) => addr,
            None => {
                if st.end - st.next < self.slot {
                    let (map, len) = map_chunk()?;
                    st.maps.push((map, len));
                    st.next = map.next_multiple_of(HUGE);
                    st.end = st.next + CHUNK;
                }
                let addr = st.next;
                st.next += self.slot;
                addr
            }
        };
        NonNull::new(addr as *mut AtomicU64)
    }

    /// Takes a slot back: its pages dropped (zero when read again) and kept
    /// for the next block. A slot whose pages could not be dropped is never
    /// reused, since its cells would not start at zero. Its huge-page
    /// advice is left as the chunk's (module docs, Advice per chunk).
    fn give_back(&self, ptr: NonNull<AtomicU64>) {
        let addr = ptr.as_ptr() as usize;
        if !advise(addr, self.slot, Advice::Drop) {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.free.push(addr);
    }
}

impl Drop for CellArena {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for &(addr, len) in &st.maps {
            // SAFETY: a mapping this arena made; every `Cells` of it holds
            // the arena, so none is alive now.
            #[cfg(target_os = "linux")]
            unsafe {
                libc::munmap(addr as *mut libc::c_void, len);
            }
            let _ = (addr, len);
        }
    }
}

/// Maps a chunk of address space, 2 MB-aligned inside, marked for huge
/// pages — the only huge-page advice the arena gives, once per chunk:
/// (mapping, length). `None` if the system refuses it.
#[cfg(target_os = "linux")]
fn map_chunk() -> Option<(usize, usize)> {
    let len = CHUNK + HUGE;
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return None;
    }
    let map = map as usize;
    advise(map.next_multiple_of(HUGE), CHUNK, Advice::HugePages);
    Some((map, len))
}

#[cfg(not(target_os = "linux"))]
fn map_chunk() -> Option<(usize, usize)> {
    None
}

#[derive(Clone, Copy)]
enum Advice {
    /// Drop the pages: RSS returned, zeros when read again. Changes no
    /// advice, so it never splits a mapping.
    Drop,
    /// A whole chunk, when it is mapped.
    HugePages,
}

/// `madvise` over `[addr, addr + len)`, inside a chunk of this arena;
/// whether it was done. Huge-page advice is best effort (a system without
/// transparent huge pages, or out of mappings, refuses it; nothing is lost).
#[cfg(target_os = "linux")]
fn advise(addr: usize, len: usize, advice: Advice) -> bool {
    let advice = match advice {
        Advice::Drop => libc::MADV_DONTNEED,
        Advice::HugePages => libc::MADV_HUGEPAGE,
    };
    // SAFETY: the range lies in a mapping this arena made and owns; the
    // only advice that changes contents (DONTNEED) is given for a slot no
    // block owns any more.
    unsafe { libc::madvise(addr as *mut libc::c_void, len, advice) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn advise(_: usize, _: usize, _: Advice) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    fn fill(c: &Cells, v: u64) {
        for x in c.iter() {
            x.store(v, Relaxed);
        }
    }

    #[test]
    fn slots_start_at_zero_every_time_they_are_taken() {
        let arena = CellArena::new(100_000).expect("an arena on Linux");
        let a = Cells::zeroed(100_000, Some(&arena));
        assert!(a.in_arena());
        assert!(a.iter().all(|x| x.load(Relaxed) == 0));
        fill(&a, 7);
        let first = a.as_ptr();
        drop(a);
        // The slot given back is reused, and reads as zeros.
        let b = Cells::zeroed(100_000, Some(&arena));
        assert_eq!(b.as_ptr(), first, "the free slot is reused");
        assert!(b.iter().all(|x| x.load(Relaxed) == 0));
    }

    #[test]
    fn live_blocks_never_share_memory_and_chunks_are_added() {
        // 1,000,000 cells a slot: 8 slots to a 64 MB chunk, so 20 blocks
        // need three chunks.
        let arena = CellArena::new(1_000_000).expect("an arena on Linux");
        let blocks: Vec<Cells> = (0..20)
            .map(|i| {
                let c = Cells::zeroed(1_000_000 - i, Some(&arena));
                assert!(c.in_arena());
                c.first().unwrap().store(i as u64 + 1, Relaxed);
                c.last().unwrap().store(i as u64 + 1, Relaxed);
                c
            })
            .collect();
        for (i, c) in blocks.iter().enumerate() {
            assert_eq!(c.first().unwrap().load(Relaxed), i as u64 + 1);
            assert_eq!(c.last().unwrap().load(Relaxed), i as u64 + 1);
        }
        let mut starts: Vec<usize> = blocks.iter().map(|c| c.as_ptr() as usize).collect();
        starts.sort_unstable();
        assert!(starts.windows(2).all(|w| w[1] - w[0] >= 8_000_000));
        assert_eq!(arena.state.lock().unwrap().maps.len(), 3);
    }

    /// How many of the process's mappings (`/proc/self/maps` lines) lie
    /// over the arena's chunks.
    fn mappings_over(arena: &CellArena) -> usize {
        let maps = arena.state.lock().unwrap().maps.clone();
        let text = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
        text.lines()
            .filter_map(|line| {
                let range = line.split_whitespace().next()?;
                let (a, b) = range.split_once('-')?;
                let a = usize::from_str_radix(a, 16).ok()?;
                let b = usize::from_str_radix(b, 16).ok()?;
                Some((a, b))
            })
            .filter(|&(a, b)| maps.iter().any(|&(m, len)| a < m + len && m < b))
            .count()
    }

    #[test]
    fn interleaved_losses_do_not_split_the_chunks_into_mappings() {
        // One page a slot: 16,384 slots to a chunk, so 4,000 blocks share
        // one chunk, and every other one lost leaves 2,000 free runs.
        const BLOCKS: usize = 4_000;
        let arena = CellArena::new(512).expect("an arena on Linux");
        let mut blocks: Vec<Option<Cells>> = (0..BLOCKS)
            .map(|_| Some(Cells::zeroed(512, Some(&arena))))
            .collect();
        assert!(blocks.iter().flatten().all(Cells::in_arena));
        let chunks = arena.state.lock().unwrap().maps.len();
        let at_start = mappings_over(&arena);
        let mut most = at_start;
        for round in 0..4 {
            // Lose every other block (odd ones, then even ones), then take
            // as many again: they reuse the free slots.
            for b in blocks.iter_mut().skip(round % 2).step_by(2) {
                b.take();
            }
            most = most.max(mappings_over(&arena));
            for b in blocks.iter_mut().filter(|b| b.is_none()) {
                let c = Cells::zeroed(512, Some(&arena));
                assert!(c.iter().all(|x| x.load(Relaxed) == 0));
                fill(&c, 9);
                *b = Some(c);
            }
            most = most.max(mappings_over(&arena));
        }
        assert_eq!(arena.state.lock().unwrap().maps.len(), chunks);
        println!("mappings over {chunks} chunk(s): {at_start} at the start, at most {most}");
        // Per chunk: the advised, aligned part and the unaligned ends
        // around it. One mapping per free run would be thousands.
        assert!(
            most <= 3 * chunks,
            "{most} mappings over {chunks} chunk(s) (at the start: {at_start})"
        );
    }

    #[test]
    fn what_the_arena_cannot_hold_comes_from_the_heap() {
        let arena = CellArena::new(1_000).expect("an arena on Linux");
        let big = Cells::zeroed(2_000, Some(&arena));
        assert!(!big.in_arena());
        assert!(big.iter().all(|x| x.load(Relaxed) == 0));
        let none = Cells::zeroed(1_000, None);
        assert!(!none.in_arena());
        assert_eq!(Cells::zeroed(0, Some(&arena)).len(), 0);
        assert!(CellArena::new(0).is_none());
        assert!(CellArena::new(usize::MAX / 4).is_none());
    }
}
