//! Golden scripts for the mover (`src/mover/testdata/*.golden`): each line
//! is a command, each `> ` line below it what the mover did. The script
//! plays every store group and AllocSvr by hand; the home group's
//! directory is kept here, so `changed` applies the change the mover asked
//! for. Run with `UPDATE_GOLDEN=1` to rewrite the expected output.
//!
//! Commands:
//! - `home SPAN SECTION_SIZE` — set 0 serves its whole span;
//! - `add-set ID SPAN RANGE` — a set spanning SPAN serving RANGE;
//! - `move RANGE TO [stop-after STEP]` — a new run; its first effect;
//! - `at MS ANSWER…` — the answer to the last effect at MS ms: `directory`,
//!   `changed`, `copied`, `copy-failed WHY`, `frozen FINALS EPOCHS NEWLY
//!   LEASE_MS HOLDER…` (each `id@incarnation`, `!` after it for a fenced
//!   one; a lone `?` for a reply that names none, as an older store's),
//!   `leader ALLOC…` (`id` or `id!` for a fenced one), `no-leader`,
//!   `released` (confirmed by the AllocSvr and incarnation asked),
//!   `released-as ID INC` (confirmed by another), `release-failed WHY`,
//!   `counters DECL… [more]` (each `name:floor` or
//!   `name:floor:max:increment:offset`, `-` for no maximum),
//!   `counters-copied N`, `installed N`, `sections OWNER:INC…` (`-`
//!   unowned), `refreshed`,
//!   `woke`, `failed WHY`, `rejected WHY`.

use std::time::Duration;

use super::*;
use crate::directory::{DirSet, Directory, HOME_SET};
use crate::section::SetSpec;

/// The script's world: the home group's directory and the run.
#[derive(Default)]
struct World {
    dir: Option<Directory>,
    mover: Option<Mover>,
    last: Option<Effect>,
}

fn span(s: &str) -> (u64, u64) {
    let (b, e) = s.split_once("..").expect("BEGIN..END");
    (b.parse().unwrap(), e.parse().unwrap())
}

fn list<T: std::str::FromStr>(s: &str) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().unwrap())
        .collect()
}

fn dir_set(id: SetId, span: (u64, u64), size: u64) -> DirSet {
    let mut spec = SetSpec::new(id, span.0..span.1);
    spec.section_size = size;
    spec.step = 10;
    DirSet {
        spec,
        stores: vec![format!("s{id}:client")],
        admin: vec![format!("s{id}:admin")],
    }
}

/// `id@inc` or `id@inc!` each; `?` alone: none named.
fn holders_of(words: &[&str]) -> Option<Vec<Holder>> {
    if words == ["?"] {
        return None;
    }
    Some(
        (words.iter())
            .map(|w| {
                let fenced = w.ends_with('!');
                let (id, inc) = w.trim_end_matches('!').split_once('@').expect("id@inc");
                Holder {
                    id: id.into(),
                    incarnation: inc.parse().unwrap(),
                    admin_addr: format!("{id}:admin"),
                    fenced,
                }
            })
            .collect(),
    )
}

/// `name:floor` or `name:floor:max:increment:offset` (`-`: no maximum).
fn declared(w: &str) -> Declared {
    let p: Vec<&str> = w.split(':').collect();
    let floor = p[1].parse().unwrap();
    let rules = (p.len() == 5).then(|| crate::counter::CounterRules {
        max: p[2].parse().ok(),
        increment: p[3].parse().unwrap(),
        offset: p[4].parse().unwrap(),
    });
    (
        p[0].as_bytes().to_vec(),
        crate::counter::CounterDecl { floor, rules },
    )
}

fn step_named(s: &str) -> Step {
    [
        Step::Begin,
        Step::Freeze,
        Step::Release,
        Step::Install,
        Step::Claim,
        Step::Finish,
    ]
    .into_iter()
    .find(|x| x.name() == s)
    .unwrap_or_else(|| panic!("no step {s}"))
}

impl World {
    fn command(&mut self, words: &[&str]) -> Vec<String> {
        match words {
            ["home", s, size] => {
                self.dir = Some(Directory::new(dir_set(
                    HOME_SET,
                    span(s),
                    size.parse().unwrap(),
                )));
                vec![]
            }
            ["add-set", id, s, r] => {
                let d = self.dir.as_mut().expect("home first");
                let (begin, end) = span(r);
                let size = d.sets[&HOME_SET].spec.section_size;
                let set = dir_set(id.parse().unwrap(), span(s), size);
                let c = DirChange::AddSet { set, begin, end };
                vec![format!("{:?}", d.apply(&c))]
            }
            ["move", r, to, rest @ ..] => {
                let (begin, end) = span(r);
                let stop_after = match rest {
                    ["stop-after", s] => Some(step_named(s)),
                    _ => None,
                };
                let to = to.parse().unwrap();
                let mut m = Mover::new(MoveCmd {
                    begin,
                    end,
                    to,
                    stop_after,
                });
                let e = m.start();
                self.mover = Some(m);
                self.effect(e)
            }
            ["at", ms, answer @ ..] => {
                let now = Duration::from_millis(ms.parse().unwrap());
                let a = self.answer(answer);
                let e = self.mover.as_mut().expect("a run").on(now, a);
                self.effect(e)
            }
            _ => panic!("unknown command {words:?}"),
        }
    }

    fn answer(&mut self, words: &[&str]) -> Answer {
        let dir = || self.dir.clone().expect("home first");
        let failed = |rejected, w: &[&str]| {
            Answer::Failed(CallError {
                rejected,
                message: w.join(" "),
            })
        };
        match words {
            ["directory"] => Answer::Directory(dir()),
            ["changed"] => {
                let Some(Effect::Call(Call::ChangeDirectory(c))) = &self.last else {
                    panic!("no directory change was asked");
                };
                let d = self.dir.as_mut().expect("home first");
                d.apply(c).expect("the change applies");
                Answer::Changed(d.clone())
            }
            ["copied"] => Answer::Copied(Ok(())),
            ["copy-failed", why @ ..] => Answer::Copied(Err(why.join(" "))),
            ["frozen", finals, epochs, newly, lease, holders @ ..] => Answer::Frozen {
                finals: list(finals),
                epochs: list(epochs),
                newly: newly.parse().unwrap(),
                lease_expiry: Duration::from_millis(lease.parse().unwrap()),
                holders: holders_of(holders),
            },
            ["leader", allocs @ ..] => Answer::Leader(Some(
                (allocs.iter())
                    .map(|a| AllocRef {
                        id: a.trim_end_matches('!').into(),
                        admin_addr: format!("{}:admin", a.trim_end_matches('!')),
                        fenced: a.ends_with('!'),
                    })
                    .collect(),
            )),
            ["no-leader"] => Answer::Leader(None),
            ["released"] => {
                let Some(Effect::Call(Call::Release {
                    alloc, incarnation, ..
                })) = &self.last
                else {
                    panic!("no release was asked");
                };
                Answer::Released(Ok(Confirmed {
                    alloc: alloc.clone(),
                    incarnation: *incarnation,
                }))
            }
            ["released-as", id, inc] => Answer::Released(Ok(Confirmed {
                alloc: id.to_string(),
                incarnation: inc.parse().unwrap(),
            })),
            ["release-failed", why @ ..] => Answer::Released(Err(why.join(" "))),
            ["counters", rest @ ..] => {
                let more = rest.last() == Some(&"more");
                let decls = &rest[..rest.len() - usize::from(more)];
                Answer::Counters {
                    counters: decls.iter().map(|d| declared(d)).collect(),
                    more,
                }
            }
            ["counters-copied", n] => Answer::CountersCopied(n.parse().unwrap()),
            ["installed", n] => Answer::Installed(n.parse().unwrap()),
            ["sections", s @ ..] => Answer::Sections(
                (s.iter())
                    .map(|x| match x.split_once(':') {
                        Some((o, i)) => Claimed {
                            owner: Some(o.into()),
                            incarnation: i.parse().unwrap(),
                        },
                        None => Claimed {
                            owner: None,
                            incarnation: 0,
                        },
                    })
                    .collect(),
            ),
            ["refreshed"] => Answer::Refreshed,
            ["woke"] => Answer::Woke,
            ["failed", w @ ..] => failed(false, w),
            ["rejected", w @ ..] => failed(true, w),
            _ => panic!("unknown answer {words:?}"),
        }
    }

    fn effect(&mut self, e: Effect) -> Vec<String> {
        let out = match &e {
            Effect::Call(c) => vec![call(c)],
            Effect::WaitUntil(t) => vec![format!("wait until {} ms", t.as_millis())],
            Effect::Done(r) => {
                let mut v = vec![format!(
                    "done: released by {:?}, confirmed {}",
                    r.released_by, r.release_confirmed
                )];
                v.extend(r.to_string().lines().map(|l| format!("done: {l}")));
                v
            }
            Effect::Failed(err) => vec![format!("failed: {err}")],
        };
        self.last = Some(e);
        out
    }
}

fn call(c: &Call) -> String {
    match c {
        Call::ReadDirectory => "read-directory".into(),
        Call::ChangeDirectory(c) => format!("change-directory {c:?}"),
        Call::CopyDirectory { set, dir } => {
            format!(
                "copy-directory to set {set} (version {}, moving {:?})",
                dir.version, dir.moving
            )
        }
        Call::Freeze { first, count, call } => {
            format!(
                "freeze sections {first}+{count} in set {} (move {})",
                call.set, call.move_id
            )
        }
        Call::LeaderStatus { set, purpose } => {
            format!("leader-status of set {set} for {purpose:?}")
        }
        Call::Release {
            alloc,
            incarnation,
            admin_addr,
            first,
            epochs,
        } => {
            format!(
                "release {alloc}@{incarnation} at {admin_addr}: sections {first}.. at epochs {epochs:?}"
            )
        }
        Call::ReadCounters {
            set,
            first,
            count,
            after,
        } => format!(
            "read-counters {first}+{count} of set {set} after {:?}",
            String::from_utf8_lossy(after)
        ),
        Call::CopyCounters {
            call,
            after,
            through,
            counters,
        } => {
            let names: Vec<_> = (counters.iter())
                .map(|(n, d)| format!("{}@{}", String::from_utf8_lossy(n), d.floor))
                .collect();
            format!(
                "copy-counters to set {} (move {}) after {:?} through {:?}: {names:?}",
                call.set,
                call.move_id,
                String::from_utf8_lossy(after),
                through.as_deref().map(String::from_utf8_lossy)
            )
        }
        Call::Install {
            first,
            floors,
            call,
        } => format!(
            "install sections {first}.. in set {} at floors {floors:?} (move {})",
            call.set, call.move_id
        ),
        Call::ReadSections { set, first, count } => {
            format!("read-sections {first}+{count} of set {set}")
        }
        Call::Refresh { alloc, admin_addr } => format!("refresh {alloc} at {admin_addr}"),
    }
}

fn run_script(input: &str) -> String {
    let mut w = World::default();
    let mut out = String::new();
    for line in input.lines() {
        if line.starts_with("> ") || line == ">" {
            continue;
        }
        out.push_str(line);
        out.push('\n');
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = t.split_whitespace().collect();
        for l in w.command(&words) {
            out.push_str(&format!("> {l}\n"));
        }
    }
    out
}

#[test]
fn golden_scripts() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/mover/testdata");
    crate::golden::assert_dir(&dir, run_script);
}
