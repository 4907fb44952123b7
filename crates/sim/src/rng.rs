//! The simulation's only source of randomness, so a seed replays exactly:
//! the project's one seeded PRNG, [`seqsvr_core::rng::Rng`].

pub use seqsvr_core::rng::Rng;
