//! Knobs: deliberate changes to the protocol, to show that the checks
//! fail when a rule is broken, and old behaviours kept so that each bug the
//! simulation found has a test showing it (`docs/architecture/simulation.md`).
//! All off: the protocol as built.

/// Protocol variants. `Knobs::default()` is the protocol as built.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Knobs {
    /// A store leader grants lease renewals without first confirming its
    /// leadership with a quorum (`docs/architecture/failover.md` forbids
    /// this): a deposed leader that has not noticed keeps an old owner's
    /// lease alive.
    pub unsafe_renewals: bool,
    /// AllocSvrs serve without checking their lease.
    pub skip_lease_check: bool,
    /// AllocSvrs answer `Current` without checking their lease (`next` and
    /// batches still check it): the fencing work's bug 5, an owner resumed
    /// after its lease ran out and its sections moved answers reads from
    /// its old memory, below numbers the new owner handed out. The shipped
    /// admission (`ownership::admit`) is told the lease is valid for
    /// `Current` calls.
    pub current_without_lease: bool,
    /// If set, every AllocSvr's clock runs slow by this multiple of the
    /// documented drift bound (`margin / lease`); above 1.0 is unsafe.
    pub drift_times_bound: Option<f64>,
    /// Adds `Fault::PauseInRenewal` to the faults drawn: a pause right
    /// after a renewal extended the lease, before its take-overs (and, with
    /// `lease_before_drop`, before its drops).
    pub pause_in_renewal: bool,
    /// The order the renewal had before bug 1 was fixed: extend the lease
    /// first, drop the sections the renewal no longer lists a moment later
    /// (a window with a valid lease and moved sections).
    pub lease_before_drop: bool,
    /// The renewal before bug 2 was fixed: a renewal that comes back after
    /// the lease lapsed keeps the installed sections it lists (the lapse is
    /// not passed to `ownership::reconcile`), so a section that moved away
    /// and back meanwhile is served from stale memory under its old epoch.
    pub keep_sections_after_lapse: bool,
    /// The store before bug 3 was fixed: a renewal may record its grant and
    /// read its sections between the arbiter's `plan` and the commit of its
    /// `Assign`, leasing the owner the sections being moved away (no
    /// `Arbiter::moves` lock around renewals).
    pub renew_during_moves: bool,
    /// An adopt installs the grant it is sent, without reading the section
    /// back from the store (`ownership::decide_adopt` is not consulted): a
    /// forged, late or replayed adopt is served.
    pub adopt_unchecked: bool,
    /// The store's `Handoff` checks owner and incarnation but not the
    /// epoch the releasing owner names: a late or repeated handoff moves a
    /// section its owner took back under a newer epoch.
    pub handoff_unconditional: bool,
    /// The store admits twins: a registration replaces whatever incarnation
    /// is registered without waiting for its lease to expire, and renewals
    /// are granted to any incarnation (no `SetState::check_incarnation`).
    pub admit_twins: bool,
    /// The arbiter judges every grant by the lease terms in force *now*
    /// (not those it was granted under), and a new office waits only the
    /// current terms' `lease + margin` (not the longer replaced ones).
    pub lease_by_current_terms: bool,
    /// A range move installs the destination below what the protocol
    /// asks (the final ceiling plus a step): `Some(Zero)` as if the range
    /// were new (floor 0), `Some(StepsBelow(k))` at `k` steps below the
    /// final ceiling (`k = 0`: at the final ceiling, without the step).
    pub install_below_final: Option<InstallAt>,
    /// A range move installs the destination right after the freeze,
    /// without the source's release or its lease + margin.
    pub install_before_release: bool,
    /// The store before bug 6 was fixed: a group applies a `Freeze` or
    /// `Install` of a move older than one it applied (every replica
    /// rewrites its move id to the newest one applied, so
    /// `SetState::check_move_id` passes): a stale mover undoes later moves.
    pub skip_move_id_check: bool,
    /// The AllocSvr before bug 7 was fixed: a move's `Release` drops the
    /// frozen sections (`Allocator::drop_section`) instead of calling
    /// `ownership::release_moved`, so no floor is kept and a take-over
    /// granted before the freeze, answered after the release, installs
    /// the section again.
    pub release_without_floor: bool,
    /// An `Assign` is applied whatever epochs it expected (every replica
    /// rewrites them to the sections' current epochs before applying): an
    /// assignment decided on a state a handoff or take-over changed since
    /// still lands.
    pub assign_unconditional: bool,
    /// A take-over or handoff begins its epoch at the previous epoch's
    /// start instead of the current ceiling (every replica rewrites the
    /// new record's `start` and the grant's `prev_ceiling` after
    /// `SectionRecord::begin`): the new owner does not skip ahead.
    pub takeover_from_old_start: bool,
    /// A take-over always begins a new epoch, even for a grant the store
    /// prepared for that very incarnation (every replica rewrites the
    /// epochs it names to the current ones before applying): a lost reply
    /// or a lost adopt costs a step more.
    pub claim_always_fresh: bool,
    /// AllocSvrs ask each raise two steps above the highest number handed
    /// out, and the store applies a raise of any size (every replica
    /// applies the raise one step up, as the shipped check allows, then
    /// sets the ceiling asked for).
    pub raise_unbounded: bool,
    /// Route and section reads are answered at once by whichever replica
    /// they reach, from its applied state: no quorum check, no wait for
    /// the log to be applied (the renewal still passes its barrier).
    pub reads_without_barrier: bool,
    /// The leader acknowledges a raise as soon as it appends it, with the
    /// outcome its applied state gives, before a majority holds it.
    pub ack_before_commit: bool,
    /// The mover before releases waited for everyone who may still serve:
    /// a fenced AllocSvr is left out of the release (the freeze's reply is
    /// taken to name only the holders that are not fenced), so "fence,
    /// then move" installs at once while the fenced process, paused or cut
    /// off, still serves from memory on its lease.
    pub release_skips_fenced: bool,
    /// A release that no holder confirmed (no answer in time, an error)
    /// counts as confirmed: the mover installs at once instead of waiting
    /// the source's lease + margin for the silent holder.
    pub release_unanswered_confirms: bool,
    /// The store before set commands were checked against the directory:
    /// an addition's `Install` is applied as the legacy command naming the
    /// newest move (no directory check, no `Absent`-only rule), so a
    /// repeated `seqctl set add` turns frozen and moved sections back to
    /// `Serving` at their final ceilings.
    pub addition_unchecked: bool,
    /// A store leader takes a call marked forwarded from any replica, of
    /// any group (the store before forwarded calls were checked against
    /// the membership): a replica of another set can act in an AllocSvr's
    /// name.
    pub forward_from_anyone: bool,
    /// Time-ordered ids: an AllocSvr starts a claimed worker id's
    /// generator at its own clock's tick instead of the claim's floor
    /// (`max(now, ceiling + 1)`): a restart with the clock set back, or a
    /// successor whose clock is behind, issues below its predecessor.
    pub id_floor_at_clock: bool,
    /// Time-ordered ids: a claim names every held worker id as reclaimable,
    /// whether or not its holder's lease has certainly expired.
    pub id_reclaim_early: bool,
    /// Time-ordered ids: an AllocSvr uses the ceiling it asks for as soon
    /// as it sends the raise, before the store acknowledged it.
    pub id_above_ceiling: bool,
    /// Time-ordered ids: the store releases a worker id whoever holds it
    /// (every replica rewrites a `ReleaseWorker` to name the current
    /// holder and epoch): a late copy of an old holder's release frees a
    /// new holder's worker id.
    pub id_release_unfenced: bool,
    /// Time-ordered ids, the AllocSvr before the simulation's first id
    /// finding was fixed: a holding keeps issuing after a lease lapse
    /// (a pause past the lease, then a renewal) without a raise
    /// confirming it is still ours, while the store gave it to another.
    pub id_issue_after_lapse: bool,
}

/// Where the `install_below_final` knob installs a moved section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallAt {
    /// Floor 0: the ceiling becomes one step (or what the destination
    /// held), as for a range nobody served.
    Zero,
    /// This many steps below the source's final ceiling.
    StepsBelow(u64),
}

impl InstallAt {
    /// The floor the mover sends for a final ceiling `fin` (the install
    /// adds a step to it).
    pub fn floor(self, fin: u64, step: u64) -> u64 {
        match self {
            InstallAt::Zero => 0,
            InstallAt::StepsBelow(k) => fin.saturating_sub((k + 1).saturating_mul(step)),
        }
    }
}

/// The knob names of [`Knobs::parse`], with their flags.
const FLAGS: [&str; 29] = [
    "unsafe_renewals",
    "skip_lease_check",
    "current_without_lease",
    "pause_in_renewal",
    "lease_before_drop",
    "keep_sections_after_lapse",
    "renew_during_moves",
    "adopt_unchecked",
    "handoff_unconditional",
    "admit_twins",
    "lease_by_current_terms",
    "install_before_release",
    "skip_move_id_check",
    "release_without_floor",
    "assign_unconditional",
    "takeover_from_old_start",
    "claim_always_fresh",
    "raise_unbounded",
    "reads_without_barrier",
    "ack_before_commit",
    "release_skips_fenced",
    "release_unanswered_confirms",
    "addition_unchecked",
    "forward_from_anyone",
    "id_floor_at_clock",
    "id_reclaim_early",
    "id_above_ceiling",
    "id_release_unfenced",
    "id_issue_after_lapse",
];

impl Knobs {
    fn flag(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "unsafe_renewals" => &mut self.unsafe_renewals,
            "skip_lease_check" => &mut self.skip_lease_check,
            "current_without_lease" => &mut self.current_without_lease,
            "pause_in_renewal" => &mut self.pause_in_renewal,
            "lease_before_drop" => &mut self.lease_before_drop,
            "keep_sections_after_lapse" => &mut self.keep_sections_after_lapse,
            "renew_during_moves" => &mut self.renew_during_moves,
            "adopt_unchecked" => &mut self.adopt_unchecked,
            "handoff_unconditional" => &mut self.handoff_unconditional,
            "admit_twins" => &mut self.admit_twins,
            "lease_by_current_terms" => &mut self.lease_by_current_terms,
            "install_before_release" => &mut self.install_before_release,
            "skip_move_id_check" => &mut self.skip_move_id_check,
            "release_without_floor" => &mut self.release_without_floor,
            "assign_unconditional" => &mut self.assign_unconditional,
            "takeover_from_old_start" => &mut self.takeover_from_old_start,
            "claim_always_fresh" => &mut self.claim_always_fresh,
            "raise_unbounded" => &mut self.raise_unbounded,
            "reads_without_barrier" => &mut self.reads_without_barrier,
            "ack_before_commit" => &mut self.ack_before_commit,
            "release_skips_fenced" => &mut self.release_skips_fenced,
            "release_unanswered_confirms" => &mut self.release_unanswered_confirms,
            "addition_unchecked" => &mut self.addition_unchecked,
            "forward_from_anyone" => &mut self.forward_from_anyone,
            "id_floor_at_clock" => &mut self.id_floor_at_clock,
            "id_reclaim_early" => &mut self.id_reclaim_early,
            "id_above_ceiling" => &mut self.id_above_ceiling,
            "id_release_unfenced" => &mut self.id_release_unfenced,
            "id_issue_after_lapse" => &mut self.id_issue_after_lapse,
            _ => return None,
        })
    }

    /// Parses a comma-separated list of knob names (the format of
    /// `SEQSVR_SIM_KNOBS`): the flags of this struct by name,
    /// `drift=<multiple of the bound>`, and `install_below_final` (floor
    /// 0) or `install_below_final=<steps below the final ceiling>`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut k = Knobs::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.split_once('=') {
                Some(("drift", x)) => {
                    let x = x.parse().map_err(|e| format!("drift={x}: {e}"))?;
                    k.drift_times_bound = Some(x);
                }
                Some(("install_below_final", x)) => {
                    let x = x
                        .parse()
                        .map_err(|e| format!("install_below_final={x}: {e}"))?;
                    k.install_below_final = Some(InstallAt::StepsBelow(x));
                }
                None if item == "install_below_final" => {
                    k.install_below_final = Some(InstallAt::Zero);
                }
                None => *k.flag(item).ok_or(format!("unknown knob {item:?}"))? = true,
                Some(_) => return Err(format!("unknown knob {item:?}")),
            }
        }
        Ok(k)
    }

    /// The knobs in [`parse`](Self::parse)'s format (empty when none).
    pub fn to_arg(&self) -> String {
        let mut me = self.clone();
        let mut out: Vec<String> = FLAGS
            .iter()
            .filter(|n| *me.flag(n).expect("a flag"))
            .map(|n| n.to_string())
            .collect();
        if let Some(x) = self.drift_times_bound {
            out.push(format!("drift={x}"));
        }
        match self.install_below_final {
            Some(InstallAt::Zero) => out.push("install_below_final".into()),
            Some(InstallAt::StepsBelow(k)) => out.push(format!("install_below_final={k}")),
            None => {}
        }
        out.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_round_trip() {
        let k = Knobs::parse("unsafe_renewals, drift=1.5,keep_sections_after_lapse").unwrap();
        assert!(k.unsafe_renewals && k.keep_sections_after_lapse && !k.skip_lease_check);
        assert_eq!(k.drift_times_bound, Some(1.5));
        assert_eq!(Knobs::parse(&k.to_arg()).unwrap(), k);
        assert_eq!(Knobs::parse("").unwrap(), Knobs::default());
        assert!(Knobs::parse("nope").is_err());
        assert!(Knobs::parse("nope=1").is_err());
        for arg in [
            "install_below_final",
            "install_below_final=0",
            "install_below_final=2",
        ] {
            let k = Knobs::parse(arg).unwrap();
            assert_eq!(k.to_arg(), arg);
        }
        assert_eq!(InstallAt::Zero.floor(80, 8), 0);
        assert_eq!(
            InstallAt::StepsBelow(0).floor(80, 8),
            72,
            "at the final ceiling"
        );
        assert_eq!(InstallAt::StepsBelow(20).floor(80, 8), 0);
        for name in FLAGS {
            let k = Knobs::parse(name).unwrap();
            assert_ne!(k, Knobs::default(), "{name}");
            assert_eq!(k.to_arg(), name);
        }
    }
}
