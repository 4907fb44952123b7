//! Splitting an inline request into arguments, as Redis's `sdssplitargs`
//! does: blanks separate arguments; `"…"` takes the escapes `\n \r \t \b
//! \a \\ \"` and `\xHH`; `'…'` takes only `\'`; a closing quote must be
//! followed by a blank or the end of the line.

use bytes::Bytes;

/// The arguments of `line`, or `None` for unbalanced quotes.
pub fn split_args(line: &Bytes) -> Option<Vec<Bytes>> {
    let s = &line[..];
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < s.len() && is_blank(s[i]) {
            i += 1;
        }
        if i == s.len() {
            return Some(out);
        }
        let (arg, next) = match s[i] {
            b'"' => double_quoted(s, i + 1)?,
            b'\'' => single_quoted(s, i + 1)?,
            _ => {
                let start = i;
                while i < s.len() && !is_blank(s[i]) {
                    i += 1;
                }
                out.push(line.slice(start..i));
                continue;
            }
        };
        out.push(Bytes::from(arg));
        i = next;
    }
}

fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t' | b'\0')
}

/// After a closing quote: the end, or a blank.
fn closed(s: &[u8], after: usize) -> Option<usize> {
    match s.get(after) {
        None => Some(after),
        Some(&b) if is_blank(b) => Some(after),
        Some(_) => None,
    }
}

fn double_quoted(s: &[u8], mut i: usize) -> Option<(Vec<u8>, usize)> {
    let mut arg = Vec::new();
    loop {
        match *s.get(i)? {
            b'\\' if s.get(i + 1) == Some(&b'x') && hex(s, i + 2).is_some() => {
                arg.push(hex(s, i + 2)?);
                i += 4;
            }
            b'\\' if i + 1 < s.len() => {
                arg.push(match s[i + 1] {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 8,
                    b'a' => 7,
                    other => other,
                });
                i += 2;
            }
            b'"' => return Some((arg, closed(s, i + 1)?)),
            b => {
                arg.push(b);
                i += 1;
            }
        }
    }
}

fn hex(s: &[u8], i: usize) -> Option<u8> {
    let d = |b: u8| (b as char).to_digit(16);
    let (h, l) = (d(*s.get(i)?)?, d(*s.get(i + 1)?)?);
    Some((h * 16 + l) as u8)
}

fn single_quoted(s: &[u8], mut i: usize) -> Option<(Vec<u8>, usize)> {
    let mut arg = Vec::new();
    loop {
        match *s.get(i)? {
            b'\\' if s.get(i + 1) == Some(&b'\'') => {
                arg.push(b'\'');
                i += 2;
            }
            b'\'' => return Some((arg, closed(s, i + 1)?)),
            b => {
                arg.push(b);
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> Option<Vec<String>> {
        split_args(&Bytes::copy_from_slice(s.as_bytes())).map(|v| {
            v.iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
    }

    #[test]
    fn like_sdssplitargs() {
        assert_eq!(split("  INCR  seq:1 ").unwrap(), ["INCR", "seq:1"]);
        assert_eq!(
            split(r#"ECHO "a\x41\n" 'it\'s'"#).unwrap(),
            ["ECHO", "aA\n", "it's"]
        );
        assert_eq!(split("").unwrap(), Vec::<String>::new());
        for bad in [r#"ECHO "a"b"#, r#"ECHO "open"#, "ECHO 'x", "ECHO 'a'b"] {
            assert_eq!(split(bad), None, "{bad}");
        }
    }
}
