//! Standard output for what the commands print: every line goes through
//! [`line`] (the [`outln!`](crate::outln) macro), which returns a write
//! failure as an error instead of panicking as `println!` does. A closed
//! pipe (`seqctl status | head -1`) then ends the command quietly with
//! success (see [`Error::is_closed_output`]).

use std::io::Write;

use crate::error::{Error, Result};

/// Writes `args` and a newline to standard output.
pub fn line(args: std::fmt::Arguments<'_>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    // Standard output is line-buffered: the newline flushes, so a closed
    // pipe is reported here, not lost at exit.
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .map_err(Error::Output)
}

/// `println!` that returns a [`Result`](crate::Result): `outln!("{x}")?`.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}
