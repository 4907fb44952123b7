//! Why the store refused a command.

use seqsvr_core::{AllocId, Epoch, Incarnation, SectionId, SetId};
use serde::{Deserialize, Serialize};

/// Why a command was refused. Deterministic: every replica refuses the same
/// command the same way, and a refused command changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum Rejection {
    /// The store has no set yet.
    #[error("the store has not been configured with a set yet")]
    NotConfigured,
    /// A `ConfigureSet` whose spec differs from the stored one.
    #[error("set spec differs from the configured one: {0}")]
    SetMismatch(String),
    /// A spec, name or address that is not acceptable.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The section is not in the set.
    #[error("section {section} is not in the set ({count} sections)")]
    UnknownSection {
        /// The section asked for.
        section: SectionId,
        /// How many sections the set has.
        count: u32,
    },
    /// The section is routed to another AllocSvr.
    #[error("section {section} is routed to {}", owner_name(owner))]
    OwnedElsewhere {
        /// The section.
        section: SectionId,
        /// Its owner (empty: none).
        owner: AllocId,
    },
    /// The epoch given is not the section's current one: its ownership
    /// changed since the caller looked (promise 3).
    #[error("stale epoch {given} for section {section}: current is {current}")]
    StaleEpoch {
        /// The section.
        section: SectionId,
        /// The epoch the caller gave.
        given: Epoch,
        /// The section's epoch.
        current: Epoch,
    },
    /// The new ceiling is not above the current one (ceilings never decrease).
    #[error("ceiling {to} for section {section} is not above the current {current}")]
    NotAbove {
        /// The section.
        section: SectionId,
        /// The ceiling asked for.
        to: u64,
        /// The current ceiling.
        current: u64,
    },
    /// The new ceiling is more than one step above the current one
    /// (promise 4: a raise never skips more than a step).
    #[error("ceiling {to} for section {section} is too far above the current {current}")]
    TooLarge {
        /// The section.
        section: SectionId,
        /// The ceiling asked for.
        to: u64,
        /// The current ceiling.
        current: u64,
    },
    /// Another incarnation of this AllocSvr id is registered and its lease
    /// may still run: a second process with the same id must not serve.
    #[error(
        "alloc {alloc} is already running as incarnation {live:x} at {addr}; \
         refusing a second process with the same id"
    )]
    Twin {
        /// The AllocSvr id.
        alloc: AllocId,
        /// The live incarnation.
        live: Incarnation,
        /// Its client-facing address.
        addr: String,
    },
    /// The caller's incarnation is not the registered one (it was replaced
    /// or fenced): it must stop serving.
    #[error("alloc {alloc} incarnation {given:x} is not the registered one ({current:x})")]
    StaleIncarnation {
        /// The AllocSvr id.
        alloc: AllocId,
        /// The incarnation the caller gave.
        given: Incarnation,
        /// The registered one (0: fenced).
        current: Incarnation,
    },
    /// The AllocSvr named is not registered.
    #[error("alloc {alloc} is not registered")]
    NotRegistered {
        /// The AllocSvr id.
        alloc: AllocId,
    },
    /// The section is not served by this set: it was never installed
    /// here (`moved_to: None`) or it was moved to another set.
    #[error("{}", not_serving(*section, *moved_to))]
    NotServing {
        /// The section.
        section: SectionId,
        /// The set it was moved to, if it was.
        moved_to: Option<SetId>,
    },
    /// The AllocSvr cannot be retired: it may still serve (see the
    /// reason: sections it owns, a lease that may still run).
    #[error("alloc {alloc} cannot be retired: {reason}")]
    AllocInUse {
        /// The AllocSvr.
        alloc: AllocId,
        /// What is in the way.
        reason: String,
    },
    /// A directory change or copy was refused (see the reason).
    #[error("directory change refused: {0}")]
    Directory(String),
    /// A freeze or install that the directory this group holds does not
    /// show under way (another move is, none is, another move id, the set
    /// does not serve the range), or whose sections stand where it may not
    /// touch them. `reason` names what is in the way.
    #[error("set command refused (directory version {directory_version}): {reason}")]
    SetCommand {
        /// What is in the way.
        reason: String,
        /// The version of the directory (or copy) the group judged by (0:
        /// none held).
        directory_version: u64,
    },
    /// An id-namespace command was refused (docs/ids.md). Appended last:
    /// rejections travel encoded by position.
    #[error("id namespace {namespace:?}: {kind:?}: {reason}")]
    Ids {
        /// The namespace.
        namespace: String,
        /// Why, for a caller to act on.
        kind: IdRefusal,
        /// The facts.
        reason: String,
    },
    /// A counter declaration was refused (docs/counters.md). Appended
    /// last: rejections travel encoded by position.
    #[error("counter {}: {reason}", String::from_utf8_lossy(name))]
    Counter {
        /// The name.
        name: Vec<u8>,
        /// Why, for a caller to act on.
        kind: CounterRefusal,
        /// The floor in force (for `FloorBackwards`: at or above which a
        /// floor may be set).
        floor: u64,
        /// The facts.
        reason: String,
    },
}

/// Why a counter command was refused (inside [`Rejection::Counter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CounterRefusal {
    /// Another declaration is in force.
    Conflict,
    /// The floor asked is below the floor in force or below a number
    /// handed out: a floor only moves forward.
    FloorBackwards,
    /// No counter by that name was ever declared.
    Unknown,
}

/// Why an id command was refused (inside [`Rejection::Ids`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdRefusal {
    /// No namespace by that name.
    UnknownNamespace,
    /// A namespace by that name exists with another layout or window.
    Mismatch,
    /// Every worker id the layout holds is held.
    WorkersExhausted,
    /// The layout's time bits ran out.
    TimeExhausted,
    /// The caller does not hold that worker id (any more) at that epoch.
    NotHolder,
}

fn owner_name(owner: &str) -> &str {
    if owner.is_empty() {
        "no AllocSvr"
    } else {
        owner
    }
}

fn not_serving(section: SectionId, moved_to: Option<SetId>) -> String {
    match moved_to {
        Some(to) => format!("section {section} moved to set {to}"),
        None => format!("section {section} is not served by this set"),
    }
}

/// An [`IdRefusal`] on the wire.
pub(crate) fn id_refusal_to_wire(k: IdRefusal) -> seqsvr_proto::IdRefusal {
    use seqsvr_proto::IdRefusal as W;
    match k {
        IdRefusal::UnknownNamespace => W::UnknownNamespace,
        IdRefusal::Mismatch => W::NamespaceMismatch,
        IdRefusal::WorkersExhausted => W::WorkersExhausted,
        IdRefusal::TimeExhausted => W::TimeExhausted,
        IdRefusal::NotHolder => W::NotHolder,
    }
}

/// An [`IdRefusal`] from the wire (an unknown value reads as not holding,
/// the refusal that makes a caller claim again).
pub(crate) fn id_refusal_of_wire(v: i32) -> IdRefusal {
    use seqsvr_proto::IdRefusal as W;
    match W::try_from(v) {
        Ok(W::UnknownNamespace) => IdRefusal::UnknownNamespace,
        Ok(W::NamespaceMismatch) => IdRefusal::Mismatch,
        Ok(W::WorkersExhausted) => IdRefusal::WorkersExhausted,
        Ok(W::TimeExhausted) => IdRefusal::TimeExhausted,
        _ => IdRefusal::NotHolder,
    }
}
