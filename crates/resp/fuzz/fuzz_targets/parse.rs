//! Any bytes, split into reads anywhere: the parser never panics, never
//! takes more than the buffer holds, and after an error it is not called
//! again (the server closes the connection). Each request it returns has
//! a command name and only arguments within the bulk cap.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use seqsvr_resp::{Limits, Parsed, Parser};

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let limits = Limits {
        max_inline: 256,
        max_args: 64,
        max_bulk: 128,
    };
    let authenticated = cut & 1 == 0;
    let cut = (cut as usize).min(rest.len());
    let mut p = Parser::new();
    let mut buf = BytesMut::new();
    for piece in [&rest[..cut], &rest[cut..]] {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.len();
            match p.next(&mut buf, &limits, authenticated) {
                Ok(Parsed::Request(r)) => {
                    assert!(!r.args.is_empty());
                    assert!(r.inline || r.args.iter().all(|a| a.len() <= limits.max_bulk));
                    assert!(buf.len() < before);
                }
                Ok(Parsed::Nothing) => assert!(buf.len() < before),
                Ok(Parsed::Incomplete) => break,
                Err(_) => return,
            }
        }
    }
});
