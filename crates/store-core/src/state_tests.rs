//! Golden-script tests of the state machine logic.
//!
//! Each file in `testdata/` is a script: one command per line, each followed
//! by its expected output on `> ` lines. The harness runs the commands and
//! compares the whole text; `UPDATE_GOLDEN=1 cargo test` rewrites the files,
//! so a behaviour change shows up as a readable diff.
//!
//! Commands (`<inc>` is an AllocSvr incarnation, `<epoch…>` one epoch per
//! section of the run):
//! `configure <set> <begin>..<end> <section_size> <step>` (and
//! `configure-added …`, a set added to a running cluster),
//! `lease <lease_ms> <margin_ms>`,
//! `register <alloc> <inc> [<addr> [<replaces>]]`, `fence <alloc> <inc>`,
//! `assign <alloc> <first> <expected epoch…>`,
//! `take-over <alloc> <inc> <first> <known epoch…>`,
//! `handoff <from> <inc> <to> <section> <epoch>`, `drain <alloc> [off]`,
//! `raise <alloc> <inc> <section> <epoch> <to>`,
//! `freeze <first> <count> <set> <b..e> <from> <to> <move id>` (a move's
//! freeze, checked against the directory),
//! `install <first> <set> <b..e> add|from=<set> <move id> <floor…>` (an
//! addition's or a move's install, checked likewise),
//! `legacy-freeze <first> <count> <to-set> [<move id>]` and
//! `legacy-install <first> <move id> <floor…>` (the unchecked commands
//! an older log may hold),
//! `dir-add <set> <span b..e> <range b..e> <store> [<section size>]`,
//! `dir-move <b..e> <from> <to>`, `dir-finish <b..e> <from> <to>`,
//! `copy-dir <version> <set…>` (a directory listing those sets),
//! `id-space <ns> <preset | time/worker/seq/unit_ms[/js]> <window_ms>`,
//! `claim-worker <ns> <alloc> <inc> <now tick> [<worker>:<epoch>…]` (the
//! last: holders the leader saw expire), `raise-worker <ns> <worker>
//! <alloc> <inc> <epoch> <to>`, `release-worker <ns> <worker> <alloc>
//! <inc> <epoch>`,
//! `copy-counters <set> <b..e> from=<set> <move id> <after> <through>
//! <decl…>` (a move's copy of declared counters; `-` for an open bound,
//! each decl `name:floor` or `name:floor:max:increment:offset`, `-` for
//! no maximum), `restore-counters <decl…>`,
//! `counters-of <first> <count> <after> <limit>` (a page of the
//! declarations of those sections, as a move reads it),
//! `dump` (sections, allocs, version, placement, directory) and `routes`.
//! A script may drive several store groups: `group <name>` makes the
//! commands after it go to that group (a fresh state the first time), and
//! `push-dir <name>` hands the current group a copy of group `<name>`'s
//! directory (`CopyDirectory`), as `seqctl` does; `save-dir <name>` keeps
//! the current group's directory under a name and `push-saved <name>
//! <version>` hands the current group that directory relabelled with
//! `<version>` (a forged or replayed copy). After every command the
//! harness also checks that a rejected command left the state unchanged.

use super::*;

fn parse(line: &str) -> Option<Command> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let n = |i: usize| -> u64 { w[i].parse().expect("number") };
    let rest =
        |i: usize| -> Vec<u64> { w[i..].iter().map(|x| x.parse().expect("number")).collect() };
    Some(match w[0] {
        "configure" | "configure-added" => {
            let (b, e) = w[2].split_once("..").expect("range");
            let spec = SetSpec {
                set_id: n(1) as u32,
                uid_begin: b.parse().unwrap(),
                uid_end: e.parse().unwrap(),
                section_size: n(3),
                step: n(4),
            };
            if w[0] == "configure" {
                Command::ConfigureSet(spec)
            } else {
                Command::ConfigureAddedSet(spec)
            }
        }
        "lease" => Command::SetLease(LeaseTerms {
            lease_ms: n(1),
            margin_ms: n(2),
        }),
        "register" => {
            let addr = w.get(3).copied().unwrap_or("").to_string();
            Command::RegisterAlloc {
                alloc: w[1].into(),
                incarnation: n(2),
                peer_addr: addr.clone(),
                admin_addr: addr.clone(),
                addr,
                replaces: w.get(4).map(|x| x.parse().unwrap()).unwrap_or(0),
            }
        }
        "retire" => Command::RetireAlloc {
            alloc: w[1].into(),
            incarnation: n(2),
        },
        "stop" => Command::StopAlloc {
            alloc: w[1].into(),
            incarnation: n(2),
        },
        "fence" => Command::FenceAlloc {
            alloc: w[1].into(),
            incarnation: n(2),
        },
        "assign" => Command::Assign {
            alloc: w[1].into(),
            first: n(2) as u32,
            expected: rest(3),
        },
        "handoff" => Command::Handoff {
            from: w[1].into(),
            incarnation: n(2),
            to: w[3].into(),
            section: n(4) as u32,
            epoch: n(5),
        },
        "drain" => Command::SetDraining {
            alloc: w[1].into(),
            draining: w.get(2) != Some(&"off"),
        },
        "take-over" => Command::TakeOver {
            alloc: w[1].into(),
            incarnation: n(2),
            first: n(3) as u32,
            known: rest(4),
        },
        "raise" => Command::Raise {
            alloc: w[1].into(),
            incarnation: n(2),
            section: n(3) as u32,
            epoch: n(4),
            to: n(5),
        },
        "freeze" => {
            let (begin, end) = range(w[4]);
            Command::Freeze {
                first: n(1) as u32,
                count: n(2) as u32,
                call: seqsvr_core::SetCall {
                    set: n(3) as u32,
                    move_id: n(7),
                    begin,
                    end,
                    kind: seqsvr_core::SetKind::Move {
                        from: n(5) as u32,
                        to: n(6) as u32,
                    },
                },
            }
        }
        "install" => {
            let (begin, end) = range(w[3]);
            let set = n(2) as u32;
            let kind = match w[4].strip_prefix("from=") {
                Some(from) => seqsvr_core::SetKind::Move {
                    from: from.parse().expect("number"),
                    to: set,
                },
                None => {
                    assert_eq!(w[4], "add", "add or from=<set>");
                    seqsvr_core::SetKind::Addition
                }
            };
            Command::Install {
                first: n(1) as u32,
                floors: rest(6),
                call: seqsvr_core::SetCall {
                    set,
                    move_id: n(5),
                    begin,
                    end,
                    kind,
                },
            }
        }
        "legacy-freeze" => Command::LegacyFreeze {
            first: n(1) as u32,
            count: n(2) as u32,
            to: n(3) as u32,
            move_id: w.get(4).map_or(0, |x| x.parse().expect("number")),
        },
        "legacy-install" => Command::LegacyInstall {
            first: n(1) as u32,
            move_id: n(2),
            floors: rest(3),
        },
        "dir-add" => {
            let (b, e) = range(w[2]);
            let (rb, re) = range(w[3]);
            Command::Directory(seqsvr_core::DirChange::AddSet {
                set: DirSet {
                    spec: SetSpec {
                        set_id: n(1) as u32,
                        uid_begin: b,
                        uid_end: e,
                        section_size: w.get(5).map_or(10, |x| x.parse().expect("number")),
                        step: 10,
                    },
                    stores: vec![w[4].into()],
                    admin: vec![w[4].into()],
                },
                begin: rb,
                end: re,
            })
        }
        "dir-move" | "dir-finish" => {
            let (b, e) = range(w[1]);
            let m = seqsvr_core::PendingMove {
                begin: b,
                end: e,
                from: n(2) as u32,
                to: n(3) as u32,
            };
            Command::Directory(if w[0] == "dir-move" {
                seqsvr_core::DirChange::BeginMove(m)
            } else {
                seqsvr_core::DirChange::FinishMove(m)
            })
        }
        "copy-dir" => {
            let mut d = Directory {
                version: n(1),
                ..Directory::default()
            };
            for id in rest(2) {
                d.sets.insert(
                    id as u32,
                    DirSet {
                        spec: SetSpec::new(id as u32, 0..10),
                        stores: vec!["s".into()],
                        admin: vec!["s".into()],
                    },
                );
            }
            Command::CopyDirectory(d)
        }
        "id-space" => Command::CreateIdSpace {
            name: w[1].into(),
            layout: id_layout(w[2]),
            window_ms: n(3),
        },
        "claim-worker" => Command::ClaimWorker {
            ns: w[1].into(),
            alloc: w[2].into(),
            incarnation: n(3),
            now: n(4),
            reclaim: w[5..]
                .iter()
                .map(|x| {
                    let (w, e) = x.split_once(':').expect("worker:epoch");
                    (w.parse().unwrap(), e.parse().unwrap())
                })
                .collect(),
        },
        "raise-worker" => Command::RaiseWorker {
            ns: w[1].into(),
            worker: n(2),
            alloc: w[3].into(),
            incarnation: n(4),
            epoch: n(5),
            to: n(6),
        },
        "release-worker" => Command::ReleaseWorker {
            ns: w[1].into(),
            worker: n(2),
            alloc: w[3].into(),
            incarnation: n(4),
            epoch: n(5),
        },
        "counter" => Command::Counter {
            alloc: w[1].into(),
            incarnation: n(2),
            section: n(3) as u32,
            epoch: n(4),
            name: w[5].as_bytes().to_vec(),
            handed_out: n(6),
            op: match w[7] {
                "create" => crate::command::CounterOp::Create {
                    floor: n(8),
                    rules: seqsvr_core::CounterRules {
                        max: w[9].parse().ok(),
                        increment: n(10),
                        offset: n(11),
                    },
                },
                "set-floor" => crate::command::CounterOp::SetFloor { floor: n(8) },
                "delete" => crate::command::CounterOp::Delete,
                other => panic!("unknown counter op {other}"),
            },
        },
        "copy-counters" => {
            let (begin, end) = range(w[2]);
            let set = n(1) as u32;
            let from = w[3].strip_prefix("from=").expect("from=<set>");
            let bound = |x: &str| (x != "-").then(|| x.as_bytes().to_vec());
            Command::CopyCounters {
                call: seqsvr_core::SetCall {
                    set,
                    move_id: n(4),
                    begin,
                    end,
                    kind: seqsvr_core::SetKind::Move {
                        from: from.parse().expect("number"),
                        to: set,
                    },
                },
                after: bound(w[5]).unwrap_or_default(),
                through: bound(w[6]),
                counters: w[7..].iter().map(|d| declared(d)).collect(),
            }
        }
        "restore-counters" => Command::RestoreCounters {
            counters: w[1..].iter().map(|d| declared(d)).collect(),
        },
        _ => return None,
    })
}

/// `name:floor` or `name:floor:max:increment:offset` (`-`: no maximum).
fn declared(w: &str) -> (Vec<u8>, seqsvr_core::CounterDecl) {
    let p: Vec<&str> = w.split(':').collect();
    let rules = (p.len() == 5).then(|| seqsvr_core::CounterRules {
        max: p[2].parse().ok(),
        increment: p[3].parse().expect("number"),
        offset: p[4].parse().expect("number"),
    });
    let floor = p[1].parse().expect("number");
    (
        p[0].as_bytes().to_vec(),
        seqsvr_core::CounterDecl { floor, rules },
    )
}

/// `counters-of <first> <count> <after> <limit>`: a page of declarations.
fn counters_of(state: &SetState, w: &[&str]) -> String {
    let n = |i: usize| -> u64 { w[i].parse().expect("number") };
    let after = if w[3] == "-" {
        &b""[..]
    } else {
        w[3].as_bytes()
    };
    let (page, more) =
        (state.counters).of_sections_after(n(1) as u32, n(2) as u32, after, n(4) as usize);
    let names: Vec<_> = (page.iter())
        .map(|(name, r)| format!("{}@{}", String::from_utf8_lossy(name), r.section))
        .collect();
    format!("{names:?} more={more}\n")
}

/// A preset's name, or `<time>/<worker>/<seq>/<unit ms>[/js]` (epoch 0).
fn id_layout(w: &str) -> seqsvr_core::ids::Layout {
    if let Some(l) = seqsvr_core::ids::Layout::preset(w) {
        return l;
    }
    let p: Vec<&str> = w.split('/').collect();
    let n = |i: usize| p[i].parse::<u64>().expect("number");
    seqsvr_core::ids::Layout {
        time_bits: n(0) as u32,
        worker_bits: n(1) as u32,
        seq_bits: n(2) as u32,
        epoch_ms: 0,
        unit_ms: n(3),
        js_safe: p.get(4) == Some(&"js"),
        order: seqsvr_core::ids::Order::TimeWorkerSeq,
    }
}

fn range(w: &str) -> (u64, u64) {
    let (b, e) = w.split_once("..").expect("range");
    (b.parse().expect("number"), e.parse().expect("number"))
}

fn dump(s: &SetState) -> String {
    let mut out = format!(
        "version {} lease={}+{} set={} replaced={}\n",
        s.route_version,
        s.lease.terms.lease_ms,
        s.lease.terms.margin_ms,
        s.lease.set,
        s.lease.replaced_expiry_ms
    );
    for (id, a) in &s.allocs {
        let drain = if a.draining { " draining" } else { "" };
        let fenced = if a.fenced { " fenced" } else { "" };
        out += &format!(
            "alloc {id} {} inc={} sections@{}{drain}{fenced}\n",
            a.addr, a.incarnation, a.sections_version
        );
    }
    for (i, r) in s.sections.iter().enumerate() {
        let owner = r.owner.as_deref().unwrap_or("-");
        out += &format!(
            "section {i} max_seq={} epoch={} owner={owner} inc={} start={}\n",
            r.max_seq, r.epoch, r.incarnation, r.start
        );
    }
    for r in &s.placement.runs {
        out += &format!("placement {}..{} {:?}\n", r.first, r.end, r.place);
    }
    if s.placement.last_move != 0 {
        out += &format!("last move applied {}\n", s.placement.last_move);
    }
    if let Some(d) = &s.directory {
        let ranges: Vec<_> = d.ranges.iter().map(|r| (r.begin, r.end, r.set)).collect();
        let sets: Vec<_> = d.sets.keys().collect();
        out += &format!(
            "directory v{} sets={sets:?} ranges={ranges:?} moving={:?}\n",
            d.version, d.moving
        );
    }
    for (name, sp) in &s.ids.spaces {
        let l = &sp.layout;
        out += &format!(
            "ids {name} {}/{}/{}/{}ms window={}ms\n",
            l.time_bits, l.worker_bits, l.seq_bits, l.unit_ms, sp.window_ms
        );
        for (w, r) in &sp.workers {
            let holder = match &r.holder {
                Some((a, i)) => format!("{a}/{i}"),
                None => "-".into(),
            };
            out += &format!(
                "  worker {w} holder={holder} epoch={} floor={} ceiling={}\n",
                r.epoch, r.floor, r.ceiling
            );
        }
    }
    for (name, r) in &s.counters.by_name {
        let rules = match r.decl.rules {
            Some(r) => {
                let max = r.max.map_or("-".into(), |m| m.to_string());
                format!("max={max} increment={} offset={}", r.increment, r.offset)
            }
            None => "tombstone".into(),
        };
        out += &format!(
            "counter {} section={} floor={} {rules}\n",
            String::from_utf8_lossy(name),
            r.section,
            r.decl.floor
        );
    }
    out
}

fn run_script(input: &str) -> String {
    let mut groups: std::collections::BTreeMap<String, SetState> = Default::default();
    let mut current = String::new();
    let mut saved: std::collections::BTreeMap<String, Directory> = Default::default();
    let mut out = String::new();
    for line in input.lines() {
        if line.starts_with("> ") || line == ">" {
            continue;
        }
        out += line;
        out.push('\n');
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix("group ") {
            current = name.trim().to_string();
            continue;
        }
        if let Some(name) = line.strip_prefix("save-dir ") {
            let d = groups.get(&current).and_then(|g| g.directory.clone());
            saved.insert(name.trim().to_string(), d.expect("a directory to save"));
            continue;
        }
        let pushed = line.strip_prefix("push-dir ").map(|from| {
            let d = groups.get(from.trim()).and_then(|g| g.directory.clone());
            Command::CopyDirectory(d.unwrap_or_else(|| panic!("group {from} holds no directory")))
        });
        let pushed = pushed.or_else(|| {
            let w: Vec<&str> = line
                .strip_prefix("push-saved ")?
                .split_whitespace()
                .collect();
            let mut d = saved.get(w[0]).expect("a saved directory").clone();
            d.version = w[1].parse().expect("number");
            Some(Command::CopyDirectory(d))
        });
        let state = groups.entry(current.clone()).or_default();
        let result = match line {
            "dump" => dump(state),
            _ if line.starts_with("counters-of ") => {
                counters_of(state, &line.split_whitespace().collect::<Vec<_>>())
            }
            "routes" => format!(
                "{:?}\n",
                state.route_table().map(|t| (t.version, t.entries))
            ),
            _ => {
                let cmd = pushed
                    .or_else(|| parse(line))
                    .unwrap_or_else(|| panic!("unknown command {line:?}"));
                let before = state.clone();
                let mut dirty = Vec::new();
                let outcome = state.apply(&cmd, &mut dirty);
                if outcome.is_err() {
                    assert_eq!(*state, before, "rejected command changed state: {line}");
                    assert!(dirty.is_empty(), "rejected command marked dirty: {line}");
                }
                format!("{outcome:?}\n")
            }
        };
        for l in result.lines() {
            out += &format!("> {l}\n");
        }
    }
    out
}

#[test]
fn golden_scripts() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata");
    seqsvr_core::golden::assert_dir(&dir, run_script);
}

/// The freeze and install an older log holds decode as the legacy commands
/// (same place in the enum, same fields), so that log replays as it was
/// applied; the checked commands are new variants after them
/// (docs/architecture/encoding.md).
#[test]
fn an_older_logs_freeze_and_install_still_decode() {
    use seqsvr_core::codec;
    // `Freeze { first: 1, count: 2, to: 1, move_id: 3 }` and `Install {
    // first: 1, floors: [15, 10], move_id: 3 }` as the version before the
    // checked commands wrote them: variant 10 and 11.
    let freeze: Command = codec::decode("log", &[1, 10, 1, 2, 1, 3]).unwrap();
    assert_eq!(
        freeze,
        Command::LegacyFreeze {
            first: 1,
            count: 2,
            to: 1,
            move_id: 3
        }
    );
    let install: Command = codec::decode("log", &[1, 11, 1, 2, 15, 10, 3]).unwrap();
    assert_eq!(
        install,
        Command::LegacyInstall {
            first: 1,
            floors: vec![15, 10],
            move_id: 3
        }
    );
    let checked = Command::Freeze {
        first: 1,
        count: 2,
        call: seqsvr_core::SetCall {
            set: 0,
            move_id: 3,
            begin: 10,
            end: 30,
            kind: seqsvr_core::SetKind::Move { from: 0, to: 1 },
        },
    };
    let bytes = codec::encode(&checked).unwrap();
    assert_eq!(bytes[..2], [1, 14]);
    assert_eq!(codec::decode::<Command>("log", &bytes).unwrap(), checked);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn command() -> impl Strategy<Value = Command> {
        prop_oneof![
            (0u32..3, 0u32..6, 0u64..4, 0u64..400).prop_map(|(a, section, epoch, to)| {
                Command::Raise {
                    alloc: format!("a{a}"),
                    incarnation: u64::from(a) + 1,
                    section,
                    epoch,
                    to,
                }
            }),
            (0u32..3, 0u32..6, proptest::collection::vec(0u64..4, 0..4)).prop_map(
                |(a, first, known)| Command::TakeOver {
                    alloc: format!("a{a}"),
                    incarnation: u64::from(a) + 1,
                    first,
                    known,
                }
            ),
            (0u32..3, 0u32..6, proptest::collection::vec(0u64..4, 0..4)).prop_map(
                |(a, first, expected)| Command::Assign {
                    alloc: format!("a{a}"),
                    first,
                    expected,
                }
            ),
            (0u32..3, 0u32..3, 0u32..6, 0u64..4).prop_map(|(a, b, section, epoch)| {
                Command::Handoff {
                    from: format!("a{a}"),
                    incarnation: u64::from(a) + 1,
                    to: format!("a{b}"),
                    section,
                    epoch,
                }
            }),
        ]
    }

    proptest! {
        /// Whatever commands arrive, no ceiling ever decreases, epochs never
        /// decrease, and a take-over's previous ceiling is exactly the
        /// ceiling before it (promises 1-4 at the store).
        #[test]
        fn ceilings_and_epochs_never_decrease(cmds in proptest::collection::vec(command(), 0..60)) {
            let mut d = Vec::new();
            let mut s = three_allocs(60, &mut d);
            for cmd in cmds {
                let before = s.clone();
                let out = s.apply(&cmd, &mut d);
                for (b, a) in before.sections.iter().zip(&s.sections) {
                    prop_assert!(a.max_seq >= b.max_seq);
                    prop_assert!(a.epoch >= b.epoch);
                }
                if let Command::Assign { alloc, first, expected } = &cmd {
                    if out.is_ok() {
                        for s2 in *first..first + expected.len() as u32 {
                            let (b, a) = (&before.sections[s2 as usize], &s.sections[s2 as usize]);
                            prop_assert_eq!(a.owner.as_ref(), Some(alloc));
                            prop_assert_eq!(a.max_seq, b.max_seq);
                            // A section changing hands always fences its old owner.
                            prop_assert_eq!(a.epoch, b.epoch + u64::from(b.owner.as_ref() != Some(alloc)));
                        }
                    }
                }
                if let (Ok(Reply::TakenOver { grants, .. }), Command::TakeOver { known, .. }) = (&out, &cmd) {
                    for (g, k) in grants.iter().zip(known) {
                        let b = &before.sections[g.section as usize];
                        if g.epoch == b.epoch {
                            // A prepared grant handed back unchanged: only
                            // at an epoch the claimant never installed.
                            prop_assert!(g.epoch > *k);
                            prop_assert_eq!(g.prev_ceiling, b.start);
                            prop_assert_eq!(g.max_seq, b.max_seq);
                        } else {
                            prop_assert_eq!(g.prev_ceiling, b.max_seq);
                            prop_assert_eq!(g.epoch, b.epoch + 1);
                            prop_assert_eq!(g.max_seq, b.max_seq + 10);
                        }
                    }
                }
                if let Ok(Reply::HandedOff { grant, .. }) = &out {
                    let b = &before.sections[grant.section as usize];
                    prop_assert_eq!(grant.prev_ceiling, b.max_seq);
                    prop_assert_eq!(grant.epoch, b.epoch + 1);
                }
                // Every epoch's start is at or above every ceiling before it.
                for (b, a) in before.sections.iter().zip(&s.sections) {
                    if a.epoch != b.epoch {
                        prop_assert!(a.start >= b.max_seq || a.incarnation == 0);
                    }
                }
                if out.is_err() {
                    prop_assert_eq!(&s, &before);
                }
            }
        }
    }
}

/// A state configured with sections of 10 uids up to `uid_end` (step 10)
/// and AllocSvrs a0, a1, a2 registered with incarnations 1, 2, 3: where
/// the property tests start.
pub(crate) fn three_allocs(uid_end: u64, dirty: &mut Vec<Dirty>) -> SetState {
    let mut s = SetState::default();
    let spec = SetSpec {
        set_id: 0,
        uid_begin: 0,
        uid_end,
        section_size: 10,
        step: 10,
    };
    s.apply(&Command::ConfigureSet(spec), dirty).unwrap();
    for a in 0..3 {
        let reg = Command::RegisterAlloc {
            alloc: format!("a{a}"),
            addr: "x:1".into(),
            peer_addr: "x:2".into(),
            admin_addr: "x:3".into(),
            incarnation: a + 1,
            replaces: 0,
        };
        s.apply(&reg, dirty).unwrap();
    }
    s
}
