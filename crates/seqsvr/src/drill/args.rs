//! `seqctl drill` flags, and the parsers clap runs on them: each flag
//! becomes a typed value (a duration, a fault, a uid range) or clap refuses
//! it with the parser's message before anything runs.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::builder::RangedU64ValueParser;
use clap::ValueEnum;
use seqsvr_client::ClientTls;

use super::faults::{Action, ActionKind, Fault};
use super::judge::Bounds;

/// `seqctl drill` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct DrillArgs {
    /// Uids to drive, `first..end` (default: 10,000 uids spread evenly over
    /// the whole set, so every section sees traffic).
    #[arg(long, value_name = "FIRST..END", value_parser = parse_uids)]
    pub uids: Option<Range<u64>>,
    /// Calls per second over all callers (0: closed loop, as fast as possible).
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    /// Concurrent callers.
    #[arg(
        long,
        default_value_t = 16,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=10_000)
    )]
    pub concurrency: usize,
    /// How long to drive the workload (e.g. `30s`, `1500ms`).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// A fault: `AT:ACTION:TARGET`, e.g. `5s:kill:alloc-1`, `5s:stop:alloc-2`,
    /// `12s:cont:alloc-2`, `5s:kill:store-leader`, `5s:isolate:store-leader`,
    /// `9s:heal:store-1`, `5s:exec:docker kill alloc-2`. kill/stop/cont act on
    /// `seqsvr dev` processes (pid files in seqctl's --dev-dir); isolate/heal
    /// cut a dev store replica off from its peers and back (builds with
    /// fault hooks only: see docs/operations.md).
    #[arg(long = "fault", value_name = "AT:ACTION:TARGET", value_parser = parse_fault)]
    pub faults: Vec<Fault>,
    /// Per-call deadline of the drill's client, in ms.
    #[arg(long, default_value_t = 1000)]
    pub deadline_ms: u64,
    /// Fewest calls the drill must make to pass (it also fails if no call
    /// returned a number).
    #[arg(long, default_value_t = 1)]
    pub min_calls: u64,
    /// Longest outage any fault may cost a section to pass (e.g. `6500ms`;
    /// default: not bounded, only reported).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_outage: Option<Duration>,
    /// Largest jump of a section's numbers any fault may cost to pass
    /// (default: one step, plus 8 numbers per caller for calls in flight
    /// at the fault — promise 4; a set move as the fault skips up to two
    /// steps).
    #[arg(long, value_name = "NUMBERS")]
    pub max_section_jump: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Everything a drill needs.
#[derive(Debug, Clone)]
pub struct DrillConfig {
    /// AllocSvr seeds (client plane).
    pub allocs: Vec<String>,
    /// Store replicas' client planes (for the set spec and `store-leader`).
    pub store: Vec<String>,
    /// TLS for both (the CA; no certificate is needed on client planes).
    pub tls: Option<ClientTls>,
    /// Uids driven (`None`: 10,000 uids spread evenly over the set).
    pub uids: Option<Range<u64>>,
    /// Calls per second overall (0: closed loop).
    pub rate: u64,
    /// Concurrent callers.
    pub concurrency: usize,
    /// Workload duration.
    pub duration: Duration,
    /// Faults, in any order.
    pub faults: Vec<Fault>,
    /// Where dev pid files are.
    pub dev_dir: PathBuf,
    /// Client per-call deadline.
    pub deadline: Duration,
}

impl DrillArgs {
    /// What the drill must show to pass (see `judge`).
    pub fn bounds(&self) -> Bounds {
        Bounds {
            min_calls: self.min_calls,
            max_outage: self.max_outage,
            max_section_jump: self.max_section_jump,
            concurrency: self.concurrency as u64,
        }
    }

    /// The config for these flags (clap has already checked each of them),
    /// against the cluster at `store` (client planes) and `allocs` (seeds),
    /// dialed with `tls`; dev pid files in `dev_dir`.
    pub fn into_config(
        &self,
        store: &[String],
        allocs: &[String],
        dev_dir: &Path,
        tls: Option<ClientTls>,
    ) -> DrillConfig {
        DrillConfig {
            allocs: allocs.to_vec(),
            store: store.to_vec(),
            tls,
            uids: self.uids.clone(),
            rate: self.rate,
            concurrency: self.concurrency,
            duration: self.duration,
            faults: self.faults.clone(),
            dev_dir: dev_dir.to_path_buf(),
            deadline: Duration::from_millis(self.deadline_ms.max(1)),
        }
    }
}

/// Parses `1500ms`, `5s`, `2m`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|e| format!("bad duration {s:?}: {e}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("bad duration unit in {s:?} (use ms, s or m)")),
    };
    if !(0.0..1e7).contains(&secs) {
        return Err(format!("duration {s:?} out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses `AT:ACTION:TARGET`; ACTION is one of [`ActionKind`]'s names.
pub fn parse_fault(s: &str) -> Result<Fault, String> {
    let mut it = s.splitn(3, ':');
    let (Some(at), Some(action), Some(target)) = (it.next(), it.next(), it.next()) else {
        return Err(format!("fault {s:?} is not AT:ACTION:TARGET"));
    };
    let target = target.trim().to_string();
    if target.is_empty() {
        return Err(format!("fault {s:?} has no target"));
    }
    let kind = ActionKind::from_str(action, false).map_err(|_| {
        let names: Vec<_> = ActionKind::value_variants()
            .iter()
            .filter_map(|k| k.to_possible_value())
            .map(|v| v.get_name().to_string())
            .collect();
        format!("unknown fault action {action:?} ({})", names.join(", "))
    })?;
    Ok(Fault {
        at: parse_duration(at)?,
        action: Action::new(kind, target),
    })
}

/// Parses a uid range `first..end` (end exclusive, not empty).
pub fn parse_uids(s: &str) -> Result<Range<u64>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("uid range {s:?} is not FIRST..END"))?;
    let uid = |v: &str| {
        v.trim()
            .parse::<u64>()
            .map_err(|e| format!("bad uid {v:?} in {s:?}: {e}"))
    };
    let (a, b) = (uid(a)?, uid(b)?);
    if b <= a {
        return Err(format!("uid range {s:?} is empty"));
    }
    Ok(a..b)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn parses_faults_and_durations() {
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        for bad in ["", "s", "5h", "-1s", "x"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let f = parse_fault("5s:exec:docker kill alloc-2").unwrap();
        assert_eq!(f.at, Duration::from_secs(5));
        assert_eq!(f.action, Action::Exec("docker kill alloc-2".into()));
        assert_eq!(
            parse_fault("200ms:stop:alloc-1").unwrap().action,
            Action::Stop("alloc-1".into())
        );
        for bad in ["5s:kill", "5s:explode:x", "soon:kill:x", "5s:kill: "] {
            assert!(parse_fault(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_table() {
        let ms = Duration::from_millis;
        let good = [
            ("1500ms", ms(1500)),
            ("0ms", ms(0)),
            ("5s", ms(5000)),
            (" 5 s ", ms(5000)),
            ("0.5s", ms(500)),
            ("2", ms(2000)),
            ("1m", ms(60_000)),
            ("1.5m", ms(90_000)),
        ];
        for (s, want) in good {
            assert_eq!(parse_duration(s), Ok(want), "{s:?}");
        }
        let bad = [
            (
                "",
                "bad duration \"\": cannot parse float from empty string",
            ),
            (
                "s",
                "bad duration \"s\": cannot parse float from empty string",
            ),
            (
                "x",
                "bad duration \"x\": cannot parse float from empty string",
            ),
            ("5h", "bad duration unit in \"5h\" (use ms, s or m)"),
            ("5sec", "bad duration unit in \"5sec\" (use ms, s or m)"),
            ("-1s", "duration \"-1s\" out of range"),
            ("1e9", "bad duration unit in \"1e9\" (use ms, s or m)"),
            ("200000m", "duration \"200000m\" out of range"),
        ];
        for (s, want) in bad {
            assert_eq!(parse_duration(s), Err(want.to_string()), "{s:?}");
        }
    }

    #[test]
    fn faults_table() {
        let fault = |secs, action| Fault {
            at: Duration::from_secs(secs),
            action,
        };
        let good = [
            ("5s:kill:alloc-1", fault(5, Action::Kill("alloc-1".into()))),
            ("5s:stop:alloc-2", fault(5, Action::Stop("alloc-2".into()))),
            (
                "15s:cont:alloc-2",
                fault(15, Action::Cont("alloc-2".into())),
            ),
            (
                "5s:isolate:store-2",
                fault(5, Action::Isolate("store-2".into())),
            ),
            (
                "9s:heal:store-leader",
                fault(9, Action::Heal("store-leader".into())),
            ),
            (
                "5s:exec:kill -9 $(cat a:b.pid)",
                fault(5, Action::Exec("kill -9 $(cat a:b.pid)".into())),
            ),
            ("0:kill: alloc-1 ", fault(0, Action::Kill("alloc-1".into()))),
        ];
        for (s, want) in good {
            assert_eq!(parse_fault(s), Ok(want), "{s:?}");
        }
        let bad = [
            ("5s:kill", "fault \"5s:kill\" is not AT:ACTION:TARGET"),
            ("kill", "fault \"kill\" is not AT:ACTION:TARGET"),
            ("5s:kill: ", "fault \"5s:kill: \" has no target"),
            (
                "5s:explode:x",
                "unknown fault action \"explode\" (kill, stop, cont, isolate, heal, exec)",
            ),
            (
                "5s:KILL:x",
                "unknown fault action \"KILL\" (kill, stop, cont, isolate, heal, exec)",
            ),
            (
                "soon:kill:x",
                "bad duration \"soon\": cannot parse float from empty string",
            ),
            ("-5s:kill:x", "duration \"-5s\" out of range"),
        ];
        for (s, want) in bad {
            assert_eq!(parse_fault(s), Err(want.to_string()), "{s:?}");
        }
    }

    #[test]
    fn uid_ranges_table() {
        for (s, want) in [
            ("0..10", 0..10),
            (" 5 .. 6 ", 5..6),
            ("100..200000", 100..200_000),
        ] {
            assert_eq!(parse_uids(s), Ok(want), "{s:?}");
        }
        let bad = [
            ("10", "uid range \"10\" is not FIRST..END"),
            ("10-20", "uid range \"10-20\" is not FIRST..END"),
            ("5..5", "uid range \"5..5\" is empty"),
            ("9..2", "uid range \"9..2\" is empty"),
            (
                "..5",
                "bad uid \"\" in \"..5\": cannot parse integer from empty string",
            ),
            (
                "a..5",
                "bad uid \"a\" in \"a..5\": invalid digit found in string",
            ),
            (
                "1..-5",
                "bad uid \"-5\" in \"1..-5\": invalid digit found in string",
            ),
        ];
        for (s, want) in bad {
            assert_eq!(parse_uids(s), Err(want.to_string()), "{s:?}");
        }
    }

    /// The flags as `seqctl drill` parses them.
    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        drill: DrillArgs,
    }

    fn parse(flags: &[&str]) -> Result<DrillArgs, String> {
        Cli::try_parse_from(std::iter::once("drill").chain(flags.iter().copied()))
            .map(|c| c.drill)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn clap_builds_typed_values() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.duration, Duration::from_secs(30));
        assert_eq!((a.uids.clone(), a.concurrency, a.rate), (None, 16, 2000));
        assert!(a.faults.is_empty());
        let a = parse(&[
            "--uids",
            "10..20",
            "--duration",
            "1500ms",
            "--concurrency",
            "4",
            "--fault",
            "5s:kill:alloc-1",
            "--fault",
            "5s:exec:docker kill alloc-2",
        ])
        .unwrap();
        assert_eq!(a.uids, Some(10..20));
        assert_eq!(a.duration, Duration::from_millis(1500));
        assert_eq!(a.concurrency, 4);
        assert_eq!(
            a.faults.iter().map(|f| &f.action).collect::<Vec<_>>(),
            [
                &Action::Kill("alloc-1".into()),
                &Action::Exec("docker kill alloc-2".into())
            ]
        );
        let cfg = a.into_config(&["s".into()], &["a".into()], Path::new("d"), None);
        assert_eq!((cfg.uids, cfg.faults.len()), (Some(10..20), 2));
        assert_eq!(
            a.bounds(),
            Bounds {
                min_calls: 1,
                max_outage: None,
                max_section_jump: None,
                concurrency: 4
            }
        );
        let a = parse(&[
            "--min-calls",
            "5000",
            "--max-outage",
            "6500ms",
            "--max-section-jump",
            "20001",
        ])
        .unwrap();
        assert_eq!(
            a.bounds(),
            Bounds {
                min_calls: 5000,
                max_outage: Some(Duration::from_millis(6500)),
                max_section_jump: Some(20_001),
                concurrency: 16
            }
        );
    }

    #[test]
    fn clap_refuses_bad_flags_with_the_parsers_message() {
        let bad = [
            (
                &["--duration", "5h"][..],
                "invalid value '5h' for '--duration <DURATION>': bad duration unit in \"5h\" (use ms, s or m)",
            ),
            (
                &["--fault", "5s:explode:x"],
                "invalid value '5s:explode:x' for '--fault <AT:ACTION:TARGET>': unknown fault action \"explode\"",
            ),
            (
                &["--uids", "9..2"],
                "invalid value '9..2' for '--uids <FIRST..END>': uid range \"9..2\" is empty",
            ),
            (
                &["--concurrency", "0"],
                "invalid value '0' for '--concurrency <CONCURRENCY>': 0 is not in 1..=10000",
            ),
            (
                &["--concurrency", "10001"],
                "invalid value '10001' for '--concurrency <CONCURRENCY>': 10001 is not in 1..=10000",
            ),
        ];
        for (flags, want) in bad {
            let err = parse(flags).unwrap_err();
            assert!(err.contains(want), "{flags:?}: {err}");
        }
    }
}
