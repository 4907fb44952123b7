//! Endpoints and shape of the local cluster that `seqsvr dev` starts, so
//! that `seqctl` needs no flags to talk to it.

/// The dev cluster's store replicas (`id`, `host:port`).
pub const DEV_STORES: [(u64, &str); 3] = [
    (1, "127.0.0.1:7101"),
    (2, "127.0.0.1:7102"),
    (3, "127.0.0.1:7103"),
];

/// The dev cluster's AllocSvrs (`id`, `host:port`).
pub const DEV_ALLOCS: [(&str, &str); 2] =
    [("alloc-1", "127.0.0.1:7201"), ("alloc-2", "127.0.0.1:7202")];

/// The dev cluster's set: uids `[0, 10_000_000)`, 100 sections.
pub const DEV_UID_END: u64 = 10_000_000;

/// Default data directory of `seqsvr dev`.
pub const DEV_DIR: &str = ".seqsvr-dev";

/// The store addresses `seqctl` uses when given none.
pub fn dev_store_addrs() -> Vec<String> {
    DEV_STORES.iter().map(|(_, a)| a.to_string()).collect()
}

/// The AllocSvr addresses `seqctl` uses when given none.
pub fn dev_alloc_addrs() -> Vec<String> {
    DEV_ALLOCS.iter().map(|(_, a)| a.to_string()).collect()
}
