//! The cells of lost sections go back to the operating system every time,
//! not only the first time (`src/malloc.rs`): with glibc's dynamic mmap
//! threshold, blocks allocated after the first free come from malloc's
//! heap and their memory stays with the process when they are freed.
//!
//! One test in its own binary: it reads the process's RSS, which other
//! tests running beside it would move.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use seqsvr_alloc::{AllocConfig, Allocator, Grant};
use seqsvr_core::SetSpec;

/// 40 sections of 100,000 uids: 32 MB of cells when every page is touched.
const SECTIONS: u32 = 40;
const SECTION_SIZE: u64 = 100_000;
/// Uids per 4 KiB page of cells: serving one of them makes the page
/// resident.
const UIDS_PER_PAGE: u64 = 512;

use seqsvr_testkit::rss;

fn rss_bytes() -> u64 {
    rss::rss_bytes().expect("VmRSS in /proc/self/status")
}

/// Takes every section over at `epoch`, serves one uid per page of
/// cells, loses every section and waits until their cells are freed.
/// Returns (RSS growth while served, RSS drop after the loss).
fn serve_and_lose(a: &Allocator, epoch: u64) -> (u64, u64) {
    let before = rss_bytes();
    let base = (epoch - 1) * 1_000;
    let grants: Vec<Grant> = (0..SECTIONS)
        .map(|section| Grant {
            section,
            epoch,
            prev_ceiling: base,
            max_seq: base + 1_000,
        })
        .collect();
    assert_eq!(a.install(&grants).unwrap(), SECTIONS as usize);
    let uids = u64::from(SECTIONS) * SECTION_SIZE;
    for uid in (0..uids).step_by(UIDS_PER_PAGE as usize) {
        assert_eq!(a.next(uid), Ok(base + 1));
    }
    let served = rss_bytes();
    let freed_before = a.stats().sections_freed;
    for section in 0..SECTIONS {
        assert!(a.drop_section(section));
    }
    while a.stats().sections_freed < freed_before + u64::from(SECTIONS) {
        a.reclaim();
    }
    (
        served.saturating_sub(before),
        served.saturating_sub(rss_bytes()),
    )
}

#[test]
fn lost_sections_return_their_memory_every_time() {
    assert!(seqsvr_alloc::malloc::fix_mmap_threshold());
    let spec = SetSpec {
        section_size: SECTION_SIZE,
        step: 1_000,
        ..SetSpec::new(0, 0..u64::from(SECTIONS) * SECTION_SIZE)
    };
    let a = Allocator::new(spec, &AllocConfig::default()).unwrap();
    let cells = u64::from(SECTIONS) * SECTION_SIZE * 8;
    for epoch in 1..=3 {
        let (grew, returned) = serve_and_lose(&a, epoch);
        assert!(
            grew >= cells * 9 / 10,
            "round {epoch}: serving every page of {cells} bytes of cells grew RSS by {grew}"
        );
        assert!(
            returned >= cells * 9 / 10,
            "round {epoch}: losing every section gave back {returned} of {grew} bytes"
        );
    }
}
