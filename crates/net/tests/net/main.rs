//! Listeners and channels end to end, over loopback.

mod common;
mod limits;
mod one;
mod pause;
mod server_role;
mod strangers;
mod tls;
mod unfinished;
