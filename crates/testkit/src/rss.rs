//! This process's resident set size, for the memory test and the
//! `hot_path` bench (both include this file).

/// `VmRSS` of this process in bytes, from `/proc/self/status` (Linux);
/// `None` where there is no such file.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}
