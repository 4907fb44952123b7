//! `--before PATH`: the owner's own gRPC path, this build against
//! another build of the AllocSvr (e.g. one from before a change), in the
//! same run. Two clusters of the bench's usual shape, stores of this
//! build in both; the second's AllocSvr is the binary at PATH. `next` at
//! 50 callers through a raw tonic stub (and through `SeqClient`) against
//! each, back to back, which goes first alternating by round.

use std::time::Duration;

use crate::load::{phase, Uids};
use crate::setup::{start_cluster_under, Target};
use crate::{lib_client, raw_stub, Args, STEP};

/// The AllocSvr of the second cluster runs `path` in place of this
/// build's binary (a shell that drops the binary's path it is given).
fn instead(path: &str) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("shift; exec '{path}' \"$@\""),
        "sh".into(),
    ]
}

/// Runs the comparison with `cluster` (this build) and a second cluster
/// whose AllocSvr is `path`.
pub async fn before_after(args: &Args, cluster: seqsvr_testkit::SetCluster, path: &str) {
    let (other, _) = start_cluster_under(args.threads, STEP, instead(path));
    other.store.wait_ready(Duration::from_secs(30)).await;
    let other_client = other.client().await;
    other.wait_serving(&other_client).await;
    let after = Target {
        name: "after",
        ..Target::seqsvr(&cluster)
    };
    let before = Target {
        name: "before",
        ..Target::seqsvr(&other)
    };
    let callers = [
        (
            "raw tonic",
            raw_stub(&cluster.alloc_addrs[0]).await,
            raw_stub(&other.alloc_addrs[0]).await,
        ),
        (
            "SeqClient",
            lib_client(&cluster.alloc_addrs[0]).await,
            lib_client(&other.alloc_addrs[0]).await,
        ),
    ];
    println!(
        "next, 50 callers: `after` is this build's AllocSvr, `before` is {path}; stores of this build in both\n\
         (two clusters of the usual shape); the sides back to back, which goes first alternating by round"
    );
    let u = args.hot.map_or(Uids::Uniform, Uids::Hot);
    for (client, ours, theirs) in &callers {
        let mut ratios = Vec::new();
        for round in 1..=args.rounds {
            println!("\n== {client}, round {round} of {}", args.rounds);
            let (a, b) = if round % 2 == 0 {
                let b = phase(&before, theirs, 0, u, 50, args.secs).await;
                (phase(&after, ours, 0, u, 50, args.secs).await, b)
            } else {
                let a = phase(&after, ours, 0, u, 50, args.secs).await;
                (a, phase(&before, theirs, 0, u, 50, args.secs).await)
            };
            ratios.push(a.seqs_per_s / b.seqs_per_s);
            println!(
                "  after / before: {:.3}× seqs/s; server CPU µs/call {:.1} vs {:.1}",
                a.seqs_per_s / b.seqs_per_s,
                a.server_us_per_call,
                b.server_us_per_call
            );
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "\n{client}: after / before, median of {} rounds {:.3}× (rounds {})",
            ratios.len(),
            ratios[ratios.len() / 2],
            ratios
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    drop(callers);
    drop(other_client);
}
