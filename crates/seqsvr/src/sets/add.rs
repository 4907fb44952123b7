//! `seqctl set add`: a fresh store group (its replicas started with set id
//! N and a span, serving nothing yet) starts serving a free uid range.
//!
//! 1. Its replicas are asked for their status: they must all answer, form
//!    one group with a leader, carry set id N, and be fresh (every section
//!    absent, no directory copy) — unless the directory already lists
//!    exactly this set (a resumed command).
//! 2. The home group adds the set and the range (refused if the range
//!    overlaps a served one, is not whole sections, or the id is taken).
//! 3. The new directory is copied to every set.
//! 4. The new group installs the range's sections. The range was served
//!    by no set before, so no number was ever handed out for it: the
//!    sections start at one step.

use seqsvr_core::directory::{sections_of, Directory};
use seqsvr_core::{
    DirChange, DirSet, SectionId, SetCall, SetId, SetKind, SetSpec, MAX_SECTIONS_PER_CALL,
};
use seqsvr_proto::store_read_client::StoreReadClient;
use seqsvr_proto::{self as pb};

use super::{Error, Result, Sets, CALL_TIMEOUT};

/// What `set add` did.
#[derive(Debug, Clone)]
pub struct AddReport {
    /// The set.
    pub id: SetId,
    /// Its range.
    pub begin: u64,
    /// See `begin`.
    pub end: u64,
    /// Sections installed by this run (0: a repeat).
    pub installed: u32,
    /// Whether the directory changed (false: a repeat).
    pub added: bool,
    /// Directory version afterwards.
    pub directory_version: u64,
    /// Sets the new directory could not be copied to.
    pub copy_failed: Vec<(SetId, String)>,
}

impl std::fmt::Display for AddReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verb = if self.added { "added" } else { "already had" };
        writeln!(
            f,
            "{verb} set {} serving [{}, {}); {} sections installed by this run; directory version {}",
            self.id, self.begin, self.end, self.installed, self.directory_version
        )?;
        for (id, e) in &self.copy_failed {
            writeln!(
                f,
                "  warning: set {id} did not take the new directory copy: {e} (run again to retry)"
            )?;
        }
        Ok(())
    }
}

/// The status of the store at client-plane `a`.
pub(super) async fn status_of(sets: &Sets, a: &str) -> Result<pb::StoreStatus> {
    let ch = (sets.connect)(a).map_err(|e| Error::Refused(format!("store {a}: {e}")))?;
    let mut c = StoreReadClient::new(ch);
    match tokio::time::timeout(CALL_TIMEOUT, c.status(pb::StatusRequest {})).await {
        Ok(Ok(s)) => Ok(s.into_inner()),
        Ok(Err(e)) => Err(Error::Refused(format!(
            "store {a} is unreachable: {}",
            e.message()
        ))),
        Err(_) => Err(Error::Refused(format!(
            "store {a} is unreachable: no answer"
        ))),
    }
}

/// Asks every store at client-plane `stores` for its status.
async fn statuses(sets: &Sets, stores: &[String]) -> Result<Vec<pb::StoreStatus>> {
    let mut out = Vec::with_capacity(stores.len());
    for a in stores {
        out.push(status_of(sets, a).await?);
    }
    Ok(out)
}

/// Adds set `id` serving `[begin, end)`, its replicas at client-plane
/// `stores`; see the module docs.
pub async fn add_set(
    sets: &Sets,
    id: SetId,
    begin: u64,
    end: u64,
    stores: &[String],
) -> Result<AddReport> {
    if stores.is_empty() {
        return Err(Error::Refused("name the new set's stores (--store)".into()));
    }
    let dir = sets.directory().await?;
    no_move_under_way(&dir, id)?;
    let st = statuses(sets, stores).await?;
    let spec = one_group(id, stores, &st)?;
    let entry = DirSet {
        spec: spec.clone(),
        stores: stores.to_vec(),
        admin: st.iter().map(|s| s.admin_addr.clone()).collect(),
    };
    new_or_same(&dir, &entry, &st)?;
    let sections = sections_of(&spec, begin, end).map_err(|e| Error::Refused(e.to_string()))?;
    let home = sets.home(&dir)?;
    let (added, dir) = home
        .change_directory(&DirChange::AddSet {
            set: entry.clone(),
            begin,
            end,
        })
        .await?;
    let copy_failed = sets.copy_everywhere(&dir).await;
    // The new group judges the install by its copy: it must show the set.
    sets.require_copies(&copy_failed, &[id], &format!("set {id}"))?;
    let installed = install_added(sets, &entry, begin, end, sections).await?;
    Ok(AddReport {
        id,
        begin,
        end,
        installed,
        added,
        directory_version: dir.version,
        copy_failed,
    })
}

/// Refuses while a move into or out of set `id` is pending: its sections
/// are frozen or half installed, and only that move may touch them. Finish
/// it first (docs/architecture/sets.md, Set commands are checked against
/// the directory).
fn no_move_under_way(dir: &Directory, id: SetId) -> Result<()> {
    match dir.moving.filter(|p| p.from == id || p.to == id) {
        Some(p) => Err(Error::Refused(format!(
            "move {} of [{}, {}) from set {} to set {} is under way (directory version {}): \
             finish it first (seqctl set move --range {}..{} --to {}), then add set {id} again",
            dir.move_id, p.begin, p.end, p.from, p.to, dir.version, p.begin, p.end, p.to
        ))),
        None => Ok(()),
    }
}

/// The set's spec, if the `stores` (answering `st`) are one group with a
/// leader, configured for set `id`, and all its members.
fn one_group(id: SetId, stores: &[String], st: &[pb::StoreStatus]) -> Result<SetSpec> {
    let spec = st[0]
        .set
        .as_ref()
        .ok_or_else(|| Error::Refused(format!("store {} has no set configured yet", stores[0])))?;
    let spec = SetSpec::try_from(spec).map_err(Error::Refused)?;
    if spec.set_id != id {
        return Err(Error::Refused(format!(
            "the stores serve set {}, not set {id} (check their config)",
            spec.set_id
        )));
    }
    let leader = st[0].leader_id;
    for (a, s) in stores.iter().zip(st) {
        if s.set.as_ref() != st[0].set.as_ref() || s.leader_id != leader || !s.has_leader {
            return Err(Error::Refused(format!(
                "store {a} is not in one group with a leader alongside {} (set, leader differ)",
                stores[0]
            )));
        }
    }
    if st[0].members.len() != stores.len() {
        return Err(Error::Refused(format!(
            "the group has {} members but {} stores were named",
            st[0].members.len(),
            stores.len()
        )));
    }
    Ok(spec)
}

/// Refuses a set the directory lists otherwise, and a group that is not
/// fresh for a set it does not list yet (a re-run of the same addition
/// passes: it is listed as `entry`).
fn new_or_same(dir: &Directory, entry: &DirSet, st: &[pb::StoreStatus]) -> Result<()> {
    let id = entry.spec.set_id;
    let listed = dir.sets.get(&id);
    if listed == Some(entry) {
        return Ok(());
    }
    if listed.is_some() {
        return Err(Error::Refused(format!(
            "set {id} already exists with other stores or spec"
        )));
    }
    let fresh = st.iter().all(|s| {
        s.directory_version == 0
            && s.placement.len() == 1
            && s.placement[0].first_section == 0
            && s.placement[0].end_section == entry.spec.section_count()
            && s.placement[0].kind == pb::PlaceKind::PlaceAbsent as i32
    });
    if !fresh {
        return Err(Error::Refused(format!(
            "the stores are not a fresh group for set {id}: they already serve sections or hold a directory"
        )));
    }
    Ok(())
}

/// Installs the added set's `sections` (of `[begin, end)`) at its group,
/// a page at a time: the number of sections installed now.
async fn install_added(
    sets: &Sets,
    entry: &DirSet,
    begin: u64,
    end: u64,
    sections: std::ops::Range<SectionId>,
) -> Result<u32> {
    let client = sets.sets_client(entry)?;
    // An addition is no move: it carries no move id (borrowing the
    // directory version would let it pass for a move and block later
    // ones), and installs only sections never served here.
    let call = SetCall {
        set: entry.spec.set_id,
        move_id: 0,
        begin,
        end,
        kind: SetKind::Addition,
    };
    let mut installed = 0;
    let mut first = sections.start;
    while first < sections.end {
        let n = (sections.end - first).min(MAX_SECTIONS_PER_CALL);
        installed += client.install(first, vec![0; n as usize], &call).await?;
        first += n;
    }
    Ok(installed)
}
