use seqsvr_sim::{run_seed, Knobs};
#[test]
fn scratch() {
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let which: u32 = std::env::var("K")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let knobs = match which {
        0 => Knobs::default(),
        1 => Knobs {
            unsafe_renewals: true,
            ..Default::default()
        },
        2 => Knobs {
            skip_lease_check: true,
            ..Default::default()
        },
        3 => Knobs {
            drift_times_bound: Some(2.0),
            ..Default::default()
        },
        4 => Knobs {
            drift_times_bound: Some(0.99),
            ..Default::default()
        },
        _ => Knobs {
            drift_times_bound: Some(std::env::var("D").unwrap().parse().unwrap()),
            ..Default::default()
        },
    };
    if let Ok(seed) = std::env::var("S") {
        let r = run_seed(seed.parse().unwrap(), knobs.clone(), true);
        println!("{}", r.describe);
        for v in &r.violations {
            println!("{v}");
        }
        return;
    }
    let t0 = std::time::Instant::now();
    let mut bad = 0;
    let mut by = [0; 5];
    for seed in 0..n {
        let r = run_seed(seed, knobs.clone(), false);
        if !r.ok() {
            bad += 1;
            for v in &r.violations {
                by[v.promise as usize] += 1;
            }
            if bad <= 5 {
                println!(
                    "seed {seed}: {} violations, first: {}",
                    r.violations.len(),
                    r.violations[0]
                );
            }
        }
    }
    println!("{bad} bad of {n} in {:?}; by promise {by:?}", t0.elapsed());
}
