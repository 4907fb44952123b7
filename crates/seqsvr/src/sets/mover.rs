//! `seqctl set move`: moves a uid range (whole sections) from the set that
//! serves it to another set, online.
//!
//! Steps (each idempotent in the stores; `docs/architecture/sets.md` says
//! why this order never repeats a number):
//! 1. **begin** — the home group records the move (one at a time).
//! 2. **freeze** — the source group freezes the sections: no owner, a new
//!    epoch, ceilings final (returned).
//! 3. **release** — every AllocSvr registered in the source is told to stop
//!    serving them; if one cannot confirm, wait the source's lease + margin
//!    from the freeze, after which none serves them anyway.
//! 4. **install** — the destination group installs each section at its
//!    final ceiling plus a step; its arbiter routes them to its AllocSvrs.
//! 5. **claim** — wait until the destination's AllocSvrs claimed every
//!    section (nudging them to renew at once): the moved sections serve
//!    again; the time since the freeze is what clients waited at most.
//! 6. **finish** — the home group flips the range to the destination; the
//!    new directory is copied to every set.
//!
//! Only after step 3 may the destination serve (step 4): at no time do two
//! sets serve a section, and the destination starts above every number the
//! source handed out (promise 1).

use std::time::{Duration, Instant};

use seqsvr_core::directory::sections_of;
use seqsvr_core::directory::MovePlan;
use seqsvr_core::{DirChange, SectionId, SetCall, SetId, SetKind, MAX_SECTIONS_PER_CALL};
use seqsvr_proto::{self as pb};

use super::{Error, Result, Sets};

/// A step of the move, for `--stop-after` (tests and drills stop the
/// mover there, then crash nodes and run it again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Step {
    /// The home group recorded the move.
    Begin,
    /// The source froze the sections.
    Freeze,
    /// The source's AllocSvrs released them.
    Release,
    /// The destination installed them.
    Install,
    /// The destination's AllocSvrs claimed them.
    Claim,
    /// The directory flipped.
    Finish,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Begin => "begin",
            Step::Freeze => "freeze",
            Step::Release => "release",
            Step::Install => "install",
            Step::Claim => "claim",
            Step::Finish => "finish",
        }
    }
}

/// What a move did.
#[derive(Debug, Clone, Default)]
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
    /// Highest final ceiling in the source.
    pub max_final: u64,
    /// AllocSvrs that confirmed the release.
    pub released_by: Vec<String>,
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
            match self.waited_for_leases {
                Some(w) => writeln!(
                    f,
                    "  release: not every AllocSvr confirmed; waited {} ms for the source's leases",
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

/// How long the destination may take to claim the installed sections.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);

/// Moves `[begin, end)` to set `to`; see the module docs.
pub async fn move_range(
    sets: &Sets,
    begin: u64,
    end: u64,
    to: SetId,
    stop_after: Option<Step>,
) -> Result<MoveReport> {
    let stop = |s: Step| -> Result<()> {
        match stop_after {
            Some(x) if x == s => Err(Error::Stopped(s.name())),
            _ => Ok(()),
        }
    };
    let dir = sets.directory().await?;
    let mut report = MoveReport {
        begin,
        end,
        to,
        ..Default::default()
    };
    let m = match dir.plan_move(begin, end, to).map_err(Error::Refused)? {
        MovePlan::Done => {
            report.already_done = true;
            report.directory_version = dir.version;
            report.copy_failed = sets.copy_everywhere(&dir).await;
            return Ok(report);
        }
        MovePlan::Move(m) => m,
    };
    report.from = m.from;
    let home = sets.home(&dir)?;
    let (_, dir) = home.change_directory(&DirChange::BeginMove(m)).await?;
    let move_id = dir.move_id;
    report.copy_failed = sets.copy_everywhere(&dir).await;
    // The source and the destination judge the freeze and the install by
    // their own copy of the directory: each must show this move.
    sets.require_copies(&report.copy_failed, &[m.from, m.to], "the move")?;
    stop(Step::Begin)?;
    let call = |set: SetId| SetCall {
        set,
        move_id,
        begin,
        end,
        kind: SetKind::Move {
            from: m.from,
            to: m.to,
        },
    };

    let src = sets.set(&dir, m.from)?.clone();
    let dst = sets.set(&dir, m.to)?.clone();
    let src_sections =
        sections_of(&src.spec, begin, end).map_err(|e| Error::Refused(e.to_string()))?;
    let dst_sections =
        sections_of(&dst.spec, begin, end).map_err(|e| Error::Refused(e.to_string()))?;
    report.sections = src_sections.len() as u32;

    // 2. Freeze.
    let src_client = sets.sets_client(&src)?;
    let mut finals = Vec::with_capacity(src_sections.len());
    let mut epochs = Vec::with_capacity(src_sections.len());
    let mut expiry = Duration::ZERO;
    for (first, count) in pieces(src_sections.clone()) {
        let f = src_client.freeze(first, count, &call(m.from)).await?;
        report.newly_frozen += f.newly;
        expiry = expiry.max(f.lease_expiry);
        finals.extend(f.finals);
        epochs.extend(f.epochs);
    }
    let frozen_at = Instant::now();
    report.max_final = finals.iter().copied().max().unwrap_or(0);
    stop(Step::Freeze)?;

    // 3. Release.
    match release(sets, &src.admin, src_sections.start, &epochs).await {
        Ok(by) => report.released_by = by,
        Err(why) => {
            tracing::warn!(
                "not every AllocSvr of set {} confirmed: {why}; waiting for its leases",
                m.from
            );
            let until = frozen_at + expiry;
            tokio::time::sleep_until(until.into()).await;
            report.waited_for_leases = Some(expiry);
        }
    }
    stop(Step::Release)?;

    // 4. Install, at the final ceilings plus a step.
    let dst_client = sets.sets_client(&dst)?;
    let mut at = 0usize;
    for (first, count) in pieces(dst_sections.clone()) {
        let floors = finals[at..at + count as usize].to_vec();
        at += count as usize;
        report.newly_installed += dst_client.install(first, floors, &call(m.to)).await?;
    }
    stop(Step::Install)?;

    // 5. Claim.
    claim(sets, &dst.stores, &dst.admin, dst_sections).await?;
    report.unavailable = Some(frozen_at.elapsed());
    stop(Step::Claim)?;

    // 6. Flip.
    let (_, dir) = home.change_directory(&DirChange::FinishMove(m)).await?;
    report.directory_version = dir.version;
    report.copy_failed = sets.copy_everywhere(&dir).await;
    Ok(report)
}

/// `range` in pieces one store command accepts.
fn pieces(range: std::ops::Range<SectionId>) -> Vec<(SectionId, u32)> {
    (range.start..range.end)
        .step_by(MAX_SECTIONS_PER_CALL as usize)
        .map(|f| (f, (range.end - f).min(MAX_SECTIONS_PER_CALL)))
        .collect()
}

/// Tells every AllocSvr registered in the source to stop serving the
/// sections `first..` (frozen at `epochs`) and never to install an older
/// grant for them; `Ok` with their ids if every one confirmed.
async fn release(
    sets: &Sets,
    admin: &[String],
    first: SectionId,
    epochs: &[u64],
) -> std::result::Result<Vec<String>, String> {
    let leader = sets
        .leader_status(admin)
        .await
        .ok_or("no leader of the source group answered")?;
    let sections: Vec<pb::SectionEpoch> = epochs
        .iter()
        .enumerate()
        .map(|(i, &epoch)| pb::SectionEpoch {
            section: first + i as SectionId,
            epoch,
        })
        .collect();
    let mut by = Vec::new();
    for a in leader.allocs.iter().filter(|a| !a.fenced) {
        let mut c = sets.alloc_admin(&a.admin_addr).map_err(|e| e.to_string())?;
        for chunk in sections.chunks(MAX_SECTIONS_PER_CALL as usize) {
            let call = c.release(pb::ReleaseRequest {
                sections: chunk.to_vec(),
            });
            match tokio::time::timeout(super::CALL_TIMEOUT, call).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(format!("{}: {}", a.alloc_id, e.message())),
                Err(_) => return Err(format!("{}: no answer", a.alloc_id)),
            }
        }
        by.push(a.alloc_id.clone());
    }
    Ok(by)
}

/// Waits until every section of `range` has an owner in the destination
/// and that owner claimed it, nudging owners to renew at once.
async fn claim(
    sets: &Sets,
    stores: &[String],
    admin: &[String],
    range: std::ops::Range<SectionId>,
) -> Result<()> {
    let deadline = Instant::now() + CLAIM_TIMEOUT;
    let read = seqsvr_store_api::ReadClient::new(stores, &sets.connect)?;
    let mut admin_of: std::collections::HashMap<String, String> = Default::default();
    let mut last_nudge: Option<Instant> = None;
    loop {
        let mut unowned = 0;
        let mut waiting: std::collections::BTreeSet<String> = Default::default();
        for (first, count) in pieces(range.clone()) {
            for s in read.read_sections(first, count).await? {
                match (&s.owner, s.incarnation) {
                    (None, _) => unowned += 1,
                    (Some(o), 0) => {
                        waiting.insert(o.clone());
                    }
                    _ => {}
                }
            }
        }
        if unowned == 0 && waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Refused(format!(
                "{} sections still unclaimed in the destination after {CLAIM_TIMEOUT:?}: \
                 does it have live AllocSvrs? (run the command again once it does)",
                unowned + waiting.len()
            )));
        }
        // Routed but not claimed yet: ask the owners to renew now rather
        // than at their next renewal.
        let due = last_nudge.is_none_or(|t| t.elapsed() >= Duration::from_millis(100));
        if !waiting.is_empty() && due {
            if waiting.iter().any(|o| !admin_of.contains_key(o)) {
                if let Some(l) = sets.leader_status(admin).await {
                    admin_of = l
                        .allocs
                        .into_iter()
                        .map(|a| (a.alloc_id, a.admin_addr))
                        .collect();
                }
            }
            for o in &waiting {
                if let Some(Ok(mut c)) = admin_of.get(o).map(|a| sets.alloc_admin(a)) {
                    let _ =
                        tokio::time::timeout(super::CALL_TIMEOUT, c.refresh(pb::RefreshRequest {}))
                            .await;
                }
            }
            last_nudge = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
