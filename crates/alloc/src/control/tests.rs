//! Golden scripts of the control loop (`testdata/*.golden`): one command a
//! line, each followed by the effects it returned on `> ` lines; times are
//! ms after an arbitrary start. `UPDATE_GOLDEN=1 cargo test` rewrites the
//! files, so a change of order shows up as a readable diff.
//!
//! Commands (`@<ms>`: when; lists are comma-separated, `-` for none):
//! `new <renew_ms>`; `tick @t`; `renew-now @t`;
//! `renewed @t lease=<ms> list=<version>:<sections>|unchanged
//! routes=<version> served=<sections> [draining]`;
//! `renew-failed @t [fenced]`; `taken-over [fenced]`;
//! `claims-done @t held=<version>`;
//! `routes @t before=<s:e,…> here=<sections> served=<sections>
//! version=<v> held=<v> [renewal]`; `routes-failed @t [renewal]`;
//! `release <section> <epoch> <ceiling>` (a releasing mark, as
//! `release_section` leaves it);
//! `handoff-ok <section> epoch=<e> addr=<a>`; `handoff-failed <section>`;
//! `checked <section> owner=<id> inc=<n> epoch=<e>` or
//! `checked <section> unread`;
//! `adopt-asked @t named=<s:e,…> installed=<e|-,…>` (per section named,
//! the newest epoch installed here, `-`: not in the set);
//! `adopt-read @t lapses-before=<n> section=<s> named=<e> installed=<e>
//! owner=<id> inc=<n> epoch=<e> start=<n> max=<n>`;
//! `start <alloc> <incarnation>`;
//! `registered @t ok|twin|unavailable|refused`; `start-routes @t [failed]`;
//! `due <register|start-routes|raises> @t [stale]` (the timer as set, or,
//! `stale`, a delivery for another time);
//! `raises-queued`; `raised <section> <epoch> to=<n> ok=<n>|err=<e>`
//! (`e`: `stale`, `fenced`, `unavailable`, `too-large`,
//! `not-above:<current>`); `round-done @t sent=<n>`;
//! `state @t` (lease, lapses, list, releasing, fence, cycle).

use std::time::{Duration, Instant};

use seqsvr_core::{Epoch, SectionId, SectionRecord};
use seqsvr_store_api::SectionInfo;

use crate::error::StoreErr;

use super::*;

fn timer(w: &str) -> Timer {
    match w {
        "register" => Timer::Register,
        "start-routes" => Timer::StartRoutes,
        "raises" => Timer::Raises,
        other => panic!("unknown timer {other:?}"),
    }
}

fn store_err(w: &str) -> StoreErr {
    match w.split_once(':') {
        Some(("not-above", c)) => StoreErr::NotAbove {
            current: c.parse().expect("a ceiling"),
        },
        _ => match w {
            "stale" => StoreErr::StaleEpoch,
            "fenced" => StoreErr::Fenced,
            "unavailable" => StoreErr::Unavailable("no answer".into()),
            "too-large" => StoreErr::TooLarge,
            other => panic!("unknown store error {other:?}"),
        },
    }
}

fn info(w: &Words<'_>, section: SectionId) -> SectionInfo {
    SectionInfo {
        section,
        record: SectionRecord {
            max_seq: w.num("max"),
            epoch: w.num("epoch"),
            owner: Some(w.key("owner").to_string()).filter(|o| o != "-"),
            incarnation: w.num("inc"),
            start: w.num("start"),
        },
    }
}

fn sections(w: &str) -> Vec<SectionId> {
    if w == "-" || w.is_empty() {
        return Vec::new();
    }
    w.split(',')
        .map(|s| s.parse().expect("a section"))
        .collect()
}

fn epochs(w: &str) -> Vec<(SectionId, Epoch)> {
    if w == "-" || w.is_empty() {
        return Vec::new();
    }
    w.split(',')
        .map(|p| {
            let (s, e) = p.split_once(':').expect("section:epoch");
            (s.parse().expect("a section"), e.parse().expect("an epoch"))
        })
        .collect()
}

/// A command's words: positional ones, `key=value` ones and `@time`.
struct Words<'a> {
    pos: Vec<&'a str>,
    keys: Vec<(&'a str, &'a str)>,
    at: u64,
}

impl<'a> Words<'a> {
    fn new(line: &'a str) -> Self {
        let mut w = Words {
            pos: Vec::new(),
            keys: Vec::new(),
            at: 0,
        };
        for word in line.split_whitespace() {
            if let Some(t) = word.strip_prefix('@') {
                w.at = t.parse().expect("a time in ms");
            } else if let Some((k, v)) = word.split_once('=') {
                w.keys.push((k, v));
            } else {
                w.pos.push(word);
            }
        }
        w
    }

    fn key(&self, k: &str) -> &'a str {
        (self.keys.iter())
            .find(|(key, _)| *key == k)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("missing {k}="))
    }

    fn num(&self, k: &str) -> u64 {
        self.key(k).parse().expect("a number")
    }

    fn flag(&self, f: &str) -> bool {
        self.pos.contains(&f)
    }
}

fn event(w: &Words<'_>, c: &Control, now: Instant) -> Event {
    let n = |i: usize| -> u64 { w.pos[i].parse().expect("a number") };
    match w.pos[0] {
        "start" => Event::Start {
            alloc: w.pos[1].to_string(),
            incarnation: n(2),
        },
        "registered" => Event::Registered(match w.pos[1] {
            "ok" => RegisterAnswer::Ok,
            "twin" => RegisterAnswer::Twin,
            "unavailable" => RegisterAnswer::Unavailable,
            "refused" => RegisterAnswer::Refused,
            other => panic!("unknown answer {other:?}"),
        }),
        "start-routes" => Event::StartRoutesRead {
            ok: !w.flag("failed"),
        },
        "due" => {
            let t = timer(w.pos[1]);
            let at = match c.timer(t) {
                Some(at) if !w.flag("stale") => at,
                _ => now,
            };
            Event::Due { timer: t, at }
        }
        "raises-queued" => Event::RaisesQueued,
        "raised" => Event::RaiseAnswered {
            section: n(1) as SectionId,
            epoch: n(2),
            to: w.num("to"),
            answer: match w.keys.iter().find(|(k, _)| *k == "ok") {
                Some((_, v)) => Ok(v.parse().expect("a ceiling")),
                None => Err(store_err(w.key("err"))),
            },
        },
        "round-done" => Event::RaiseRoundDone {
            sent: w.num("sent") as usize,
        },
        "handoff-ok" => Event::HandoffAnswered {
            section: n(1) as SectionId,
            answer: Ok((w.num("epoch"), w.key("addr").to_string())),
        },
        "handoff-failed" => Event::HandoffAnswered {
            section: n(1) as SectionId,
            answer: Err("no answer".into()),
        },
        "checked" => {
            let section = n(1) as SectionId;
            Event::HandoffChecked {
                section,
                read: (!w.flag("unread")).then(|| info(w, section)),
            }
        }
        "adopt-asked" => {
            let installed = w
                .key("installed")
                .split(',')
                .map(|e| (e != "-").then(|| e.parse().expect("an epoch")));
            let named = epochs(w.key("named")).into_iter().zip(installed);
            Event::AdoptAsked {
                named: named
                    .map(|((section, epoch), installed)| AdoptNamed {
                        section,
                        epoch,
                        installed,
                    })
                    .collect(),
            }
        }
        "adopt-read" => {
            let section = w.num("section") as SectionId;
            Event::AdoptRead {
                checks: vec![AdoptCheck {
                    info: info(w, section),
                    named: w.num("named"),
                    installed: w.num("installed"),
                }],
                lapses_before: w.num("lapses-before"),
            }
        }
        "tick" => Event::Tick,
        "renew-now" => Event::RenewNow,
        "renewed" => {
            let l = w.key("list");
            let list = (l != "unchanged").then(|| {
                let (v, s) = l.split_once(':').expect("version:sections");
                (v.parse().expect("a version"), sections(s))
            });
            Event::Renewed {
                grant: Renewal {
                    lease: Duration::from_millis(w.num("lease")),
                    list,
                    route_version: w.num("routes"),
                    draining: w.flag("draining"),
                },
                served: sections(w.key("served")),
            }
        }
        "renew-failed" => Event::RenewFailed {
            fenced: w.flag("fenced"),
        },
        "taken-over" => Event::TakenOver {
            fenced: w.flag("fenced"),
        },
        "claims-done" => Event::ClaimsDone {
            held_routes: w.num("held"),
        },
        "routes" => Event::RoutesRead {
            read: Some(RouteFacts {
                before: epochs(w.key("before")),
                routed_here: sections(w.key("here")),
                served: sections(w.key("served")),
                version: w.num("version"),
                held: w.num("held"),
            }),
            renewal: w.flag("renewal"),
        },
        "routes-failed" => Event::RoutesRead {
            read: None,
            renewal: w.flag("renewal"),
        },
        other => panic!("unknown command {other:?}"),
    }
}

fn ms(t0: Instant, t: Instant) -> u128 {
    t.duration_since(t0).as_millis()
}

fn effect(t0: Instant, e: &Effect) -> String {
    match e {
        Effect::ExtendLease {
            sent,
            lease,
            lapsed,
        } => format!(
            "ExtendLease {{ sent: @{}, lease: {}ms, lapsed: {lapsed} }}",
            ms(t0, *sent),
            lease.as_millis()
        ),
        Effect::SetTimer { timer, at } => {
            format!("SetTimer {{ timer: {timer:?}, at: @{} }}", ms(t0, *at))
        }
        Effect::CycleEnded { next, first } => format!(
            "CycleEnded {{ next: {}, first: {first} }}",
            next.map_or("never".to_string(), |n| format!("@{}", ms(t0, n)))
        ),
        e => format!("{e:?}"),
    }
}

fn state(t0: Instant, c: &Control, now: Instant) -> String {
    format!(
        "lease={} lapses={} listed={:?} releasing={:?} fenced={} cycle={}\n",
        match c.lease_until {
            Some(u) if c.lease_valid(now) => format!("valid until @{}", ms(t0, u)),
            Some(u) => format!("lapsed at @{}", ms(t0, u)),
            None => "none".into(),
        },
        c.lapses,
        c.listed,
        c.releasing.keys().collect::<Vec<_>>(),
        c.fenced,
        match &c.cycle {
            None => "idle".into(),
            Some(Cycle::Renewing { sent, .. }) => format!("renewing (sent @{})", ms(t0, *sent)),
            Some(Cycle::Claiming { .. }) => "claiming".into(),
            Some(Cycle::ReadingRoutes) => "reading routes".into(),
        }
    )
}

fn run_script(input: &str) -> String {
    let t0 = Instant::now();
    let mut control = Control::new(Duration::from_millis(1000));
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
        let w = Words::new(line);
        let now = t0 + Duration::from_millis(w.at);
        let result = match w.pos[0] {
            "new" => {
                let every = w.pos[1].parse().expect("renew ms");
                control = Control::new(Duration::from_millis(every));
                String::new()
            }
            "state" => state(t0, &control, now),
            "release" => {
                let n = |i: usize| w.pos[i].parse::<u64>().expect("a number");
                let released = Released {
                    epoch: n(2),
                    ceiling: n(3),
                };
                control.releasing_mut().insert(n(1) as SectionId, released);
                String::new()
            }
            _ => {
                let event = event(&w, &control, now);
                let effects = control.on(now, event);
                let mut s: String = effects.iter().map(|e| effect(t0, e) + "\n").collect();
                if s.is_empty() {
                    s = "(nothing)\n".into();
                }
                s
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
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/control/testdata");
    seqsvr_core::golden::assert_dir(&dir, run_script);
}

/// `seqsvr_alloc_lease_lapses_total` counts the effects' `lapsed`: a
/// process's first grant finds no lease, which is no lapse (a fresh
/// AllocSvr read 1 lapse before); a lease that ran out is one.
#[test]
fn first_grant_is_no_lapse_and_a_lease_that_ran_out_is() {
    let out = run_script(
        "new 1000\nrenew-now @0\nrenewed @2 lease=3000 list=1:0 routes=1 served=-\n\
         claims-done @2 held=1\ntick @5000\nrenewed @5002 lease=3000 list=unchanged routes=1 served=0\n",
    );
    let lapses: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("> ExtendLease"))
        .collect();
    assert_eq!(lapses.len(), 2, "{out}");
    assert!(lapses[0].ends_with("lapsed: false }"), "first grant: {out}");
    assert!(
        lapses[1].ends_with("lapsed: true }"),
        "after the lease ran out: {out}"
    );
}
