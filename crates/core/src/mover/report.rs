//! What a move did, as `seqctl set move` prints it.

use std::time::Duration;

use crate::directory::SetId;

/// What a move did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoveReport {
    /// The move.
    pub begin: u64,
    /// See `begin`.
    pub end: u64,
    /// Source set.
    pub from: SetId,
    /// Destination set.
    pub to: SetId,
    /// Sections moved.
    pub sections: u32,
    /// Sections this run froze (0: a resumed move).
    pub newly_frozen: u32,
    /// Sections this run installed.
    pub newly_installed: u32,
    /// Declared counters of the moved sections read from the source and
    /// copied to the destination.
    pub counters: u32,
    /// Declarations the copies of this run changed at the destination
    /// (0: a repeat, or none declared).
    pub newly_copied: u32,
    /// Highest final ceiling in the source.
    pub max_final: u64,
    /// AllocSvrs that confirmed the release.
    pub released_by: Vec<String>,
    /// Every AllocSvr the source's leader listed confirmed the release
    /// (so the destination was installed without a lease wait).
    pub release_confirmed: bool,
    /// Why the release was not confirmed (the first AllocSvr that did not
    /// confirm as the incarnation the freeze named, and what it said).
    pub release_unconfirmed: Option<String>,
    /// Waited for the source's leases instead (some AllocSvr did not
    /// confirm).
    pub waited_for_leases: Option<Duration>,
    /// From the end of the freeze until every section was claimed in the
    /// destination: the longest any moved section had no server.
    pub unavailable: Option<Duration>,
    /// The directory version after the flip.
    pub directory_version: u64,
    /// Whether the move had already finished before this run.
    pub already_done: bool,
    /// Sets the new directory could not be copied to (retried by running
    /// the command again).
    pub copy_failed: Vec<(SetId, String)>,
}

impl std::fmt::Display for MoveReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (b, e) = (self.begin, self.end);
        if self.already_done {
            writeln!(f, "[{b}, {e}) already moved to set {}", self.to)?;
        } else {
            writeln!(
                f,
                "moved [{b}, {e}) from set {} to set {}: {} sections ({} frozen and {} installed by this run), highest final ceiling {}",
                self.from, self.to, self.sections, self.newly_frozen, self.newly_installed, self.max_final
            )?;
            writeln!(
                f,
                "  declared counters: {} copied ({} written by this run)",
                self.counters, self.newly_copied
            )?;
            match self.waited_for_leases {
                Some(w) => writeln!(
                    f,
                    "  release: not every AllocSvr confirmed ({}); waited {} ms for the source's leases",
                    self.release_unconfirmed.as_deref().unwrap_or("?"),
                    w.as_millis()
                )?,
                None => writeln!(f, "  release: confirmed by {:?}", self.released_by)?,
            }
            if let Some(u) = self.unavailable {
                writeln!(
                    f,
                    "  unavailable: {} ms (freeze → every section claimed in set {})",
                    u.as_millis(),
                    self.to
                )?;
            }
        }
        writeln!(f, "  directory version {}", self.directory_version)?;
        for (id, e) in &self.copy_failed {
            writeln!(
                f,
                "  warning: set {id} did not take the new directory copy: {e} (run again to retry)"
            )?;
        }
        Ok(())
    }
}
