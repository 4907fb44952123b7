//! Table dumps read as rows of named cells, whatever tool wrote them:
//!
//! - **SQL**: `mysqldump` output (or a hand-written script): `INSERT
//!   [IGNORE] INTO t [(cols)] VALUES (…),(…);` and `REPLACE INTO`, with
//!   MySQL's string escapes, comments (`--`, `#`, `/* */`, `/*!…*/`) and
//!   backquoted names. An `INSERT` without a column list takes the columns
//!   of the dump's `CREATE TABLE` for that table, else the columns the
//!   caller says the table has by default.
//! - **TSV** as `mysql -B -e 'SELECT …'` prints it: a header line naming
//!   the columns, tab-separated, `\t \n \\ \0` escaped, `NULL` for null.
//! - **CSV** with a header line, RFC 4180 quoting (`"a ""b"""`).
//!
//! Pure: text in, rows out; nothing here reads a file.

use std::collections::HashMap;

/// One cell of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    /// A string (bytes: a dump need not be UTF-8).
    Text(Vec<u8>),
    /// A number as written (`-12`, `3.5`, `1e3`).
    Number(String),
    /// SQL `NULL` (or `NULL` in a TSV).
    Null,
}

impl Cell {
    /// The cell as written, for messages.
    pub fn shown(&self) -> String {
        match self {
            Cell::Text(t) => format!("{:?}", String::from_utf8_lossy(t)),
            Cell::Number(n) => n.clone(),
            Cell::Null => "NULL".into(),
        }
    }

    /// The bytes of a text cell, or a number's digits.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Cell::Text(t) => Some(t),
            Cell::Number(n) => Some(n.as_bytes()),
            Cell::Null => None,
        }
    }
}

/// A row: its cells by column name (lower case), and where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Column (lower case) → cell.
    pub cells: HashMap<String, Cell>,
    /// Where the row is: `line 12` (of its statement or line).
    pub at: String,
}

/// The format of a dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// SQL `INSERT` statements if the text has any, else TSV if the header
    /// has a tab, else CSV.
    Auto,
    /// `mysqldump` output or any script of `INSERT`s.
    Sql,
    /// Tab-separated with a header line (`mysql -B`).
    Tsv,
    /// Comma-separated with a header line.
    Csv,
}

/// The rows of `table` in `text`. `default_columns`: the table's columns
/// in order, for an `INSERT` without a column list in a dump without the
/// `CREATE TABLE`. A text that cannot be read as the format says is an
/// error naming the line.
pub fn rows(
    text: &[u8],
    format: Format,
    table: &str,
    default_columns: &[&str],
) -> Result<Vec<Row>, String> {
    let format = match format {
        Format::Auto if has_insert(text) => Format::Sql,
        Format::Auto => match text.split(|&b| b == b'\n').next() {
            Some(h) if h.contains(&b'\t') => Format::Tsv,
            _ => Format::Csv,
        },
        f => f,
    };
    match format {
        Format::Sql => sql_rows(text, table, default_columns),
        Format::Tsv => delimited(text, b'\t'),
        Format::Csv | Format::Auto => delimited(text, b','),
    }
}

/// Whether some statement of `text` is an `INSERT` or `REPLACE`.
fn has_insert(text: &[u8]) -> bool {
    let Ok(tokens) = tokenize(text) else {
        return false;
    };
    tokens
        .iter()
        .any(|t| t.tok.is_word("insert") || t.tok.is_word("replace"))
}

/// A token of SQL text.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// A keyword or a bare name (as written).
    Word(String),
    /// A backquoted name.
    Ident(String),
    /// A quoted string, escapes applied.
    Str(Vec<u8>),
    /// A number, with its sign.
    Num(String),
    /// One punctuation character.
    Punct(u8),
}

impl Tok {
    fn is_word(&self, w: &str) -> bool {
        matches!(self, Tok::Word(x) if x.eq_ignore_ascii_case(w))
    }

    /// A table or column name: a bare or backquoted word, lower case.
    fn name(&self) -> Option<String> {
        match self {
            Tok::Word(w) | Tok::Ident(w) => Some(w.to_ascii_lowercase()),
            _ => None,
        }
    }
}

/// A token and the line it starts on.
#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

/// SQL text as tokens: comments dropped, strings unescaped.
fn tokenize(text: &[u8]) -> Result<Vec<Token>, String> {
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    while i < text.len() {
        let c = text[i];
        let start = line;
        let rest = &text[i..];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if rest.starts_with(b"--") || c == b'#' {
            i += rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        } else if rest.starts_with(b"/*") {
            let end = find(rest, b"*/").ok_or(format!("line {start}: a comment is not closed"))?;
            line += rest[..end].iter().filter(|&&b| b == b'\n').count();
            i += end + 2;
        } else if c == b'\'' || c == b'"' {
            let (s, used) =
                string(rest, c).ok_or(format!("line {start}: a string is not closed"))?;
            line += rest[..used].iter().filter(|&&b| b == b'\n').count();
            out.push(Token {
                tok: Tok::Str(s),
                line: start,
            });
            i += used;
        } else if c == b'`' {
            let end = rest[1..].iter().position(|&b| b == b'`');
            let end = end.ok_or(format!("line {start}: a `name` is not closed"))?;
            let name = String::from_utf8_lossy(&rest[1..1 + end]).into_owned();
            out.push(Token {
                tok: Tok::Ident(name),
                line: start,
            });
            i += end + 2;
        } else if c.is_ascii_digit()
            || (c == b'-' || c == b'+') && rest.get(1).is_some_and(u8::is_ascii_digit)
        {
            let len = 1 + rest[1..]
                .iter()
                .position(|&b| !(b.is_ascii_alphanumeric() || b == b'.' || b == b'+' || b == b'-'))
                .unwrap_or(rest.len() - 1);
            let n = String::from_utf8_lossy(&rest[..len]).into_owned();
            out.push(Token {
                tok: Tok::Num(n.trim_start_matches('+').to_string()),
                line: start,
            });
            i += len;
        } else if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            let len = rest
                .iter()
                .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80))
                .unwrap_or(rest.len());
            let w = String::from_utf8_lossy(&rest[..len]).into_owned();
            out.push(Token {
                tok: Tok::Word(w),
                line: start,
            });
            i += len;
        } else {
            out.push(Token {
                tok: Tok::Punct(c),
                line: start,
            });
            i += 1;
        }
    }
    Ok(out)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A string opened by `q` at `s[0]`: its bytes (MySQL's backslash escapes
/// and doubled quotes applied) and the bytes used, closing quote included.
fn string(s: &[u8], q: u8) -> Option<(Vec<u8>, usize)> {
    let (mut out, mut i) = (Vec::new(), 1);
    while i < s.len() {
        match s[i] {
            b'\\' => {
                let e = *s.get(i + 1)?;
                out.push(match e {
                    b'0' => 0,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 8,
                    b'Z' => 26,
                    other => other,
                });
                i += 2;
            }
            c if c == q && s.get(i + 1) == Some(&q) => {
                out.push(q);
                i += 2;
            }
            c if c == q => return Some((out, i + 1)),
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    None
}

/// The rows `INSERT`ed into `table`.
fn sql_rows(text: &[u8], table: &str, default_columns: &[&str]) -> Result<Vec<Row>, String> {
    let toks = tokenize(text)?;
    let table = table.to_ascii_lowercase();
    let mut created: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if toks[i].tok.is_word("create") && toks.get(i + 1).is_some_and(|t| t.tok.is_word("table"))
        {
            let (name, cols, next) = create_table(&toks, i + 2)?;
            if name == table {
                created = Some(cols);
            }
            i = next;
        } else if toks[i].tok.is_word("insert") || toks[i].tok.is_word("replace") {
            let defaults = || match &created {
                Some(c) => c.clone(),
                None => default_columns.iter().map(|c| c.to_string()).collect(),
            };
            i = insert(&toks, i, &table, defaults, &mut rows)?;
        } else {
            i += 1;
        }
    }
    Ok(rows)
}

/// Skips `IF NOT EXISTS` and reads `name ( defs )` from `at`: the table's
/// name, its columns, and the index after the closing parenthesis.
fn create_table(toks: &[Token], mut at: usize) -> Result<(String, Vec<String>, usize), String> {
    while toks
        .get(at)
        .is_some_and(|t| ["if", "not", "exists"].iter().any(|w| t.tok.is_word(w)))
    {
        at += 1;
    }
    let name = table_name(toks, &mut at).unwrap_or_default();
    let mut cols = Vec::new();
    if toks.get(at).map(|t| &t.tok) != Some(&Tok::Punct(b'(')) {
        return Ok((name, cols, at));
    }
    let (mut depth, mut item_start) = (0usize, true);
    for (j, t) in toks.iter().enumerate().skip(at) {
        match t.tok {
            Tok::Punct(b'(') => depth += 1,
            Tok::Punct(b')') => {
                depth -= 1;
                if depth == 0 {
                    return Ok((name, cols, j + 1));
                }
            }
            Tok::Punct(b',') if depth == 1 => {
                item_start = true;
                continue;
            }
            _ => {}
        }
        if item_start && depth == 1 && !matches!(t.tok, Tok::Punct(_)) {
            const NOT_COLUMNS: [&str; 9] = [
                "primary",
                "unique",
                "key",
                "index",
                "constraint",
                "fulltext",
                "foreign",
                "check",
                "spatial",
            ];
            if !NOT_COLUMNS.iter().any(|w| t.tok.is_word(w)) {
                cols.extend(t.tok.name());
            }
            item_start = false;
        }
    }
    Err(format!(
        "line {}: CREATE TABLE {name} is not closed",
        toks[at].line
    ))
}

/// A table name at `at` (`db.t`, `` `db`.`t` ``: the last part), lower
/// case; moves `at` past it.
fn table_name(toks: &[Token], at: &mut usize) -> Option<String> {
    let mut name = toks.get(*at)?.tok.name()?;
    *at += 1;
    while toks.get(*at).map(|t| &t.tok) == Some(&Tok::Punct(b'.')) {
        name = toks.get(*at + 1)?.tok.name()?;
        *at += 2;
    }
    Some(name)
}

/// Reads the `INSERT` at `start`; its rows go to `rows` if it is into
/// `table`. Returns the index after the statement.
fn insert(
    toks: &[Token],
    start: usize,
    table: &str,
    defaults: impl FnOnce() -> Vec<String>,
    rows: &mut Vec<Row>,
) -> Result<usize, String> {
    let line = toks[start].line;
    let mut at = start + 1;
    while toks.get(at).is_some_and(|t| {
        ["ignore", "into", "low_priority", "delayed", "high_priority"]
            .iter()
            .any(|w| t.tok.is_word(w))
    }) {
        at += 1;
    }
    let name = table_name(toks, &mut at).ok_or(format!("line {line}: INSERT names no table"))?;
    let mut cols = None;
    if toks.get(at).map(|t| &t.tok) == Some(&Tok::Punct(b'(')) {
        let (names, next) = tuple(toks, at)?;
        let names: Option<Vec<String>> = names.iter().map(|t| t.name()).collect();
        cols = Some(names.ok_or(format!(
            "line {line}: the column list is not a list of names"
        ))?);
        at = next;
    }
    if !toks
        .get(at)
        .is_some_and(|t| t.tok.is_word("values") || t.tok.is_word("value"))
    {
        // INSERT … SELECT or SET: not a dump's; skip to the statement's end.
        return Ok(end_of_statement(toks, at));
    }
    at += 1;
    let mine = name == table;
    let cols = match (mine, cols) {
        (false, _) => Vec::new(),
        (true, Some(c)) => c,
        (true, None) => defaults(),
    };
    loop {
        let row_line = toks.get(at).map_or(line, |t| t.line);
        let (cells, next) = tuple(toks, at)?;
        if mine {
            if cells.len() != cols.len() {
                return Err(format!(
                    "line {row_line}: a row of {name} has {} values for {} columns ({})",
                    cells.len(),
                    cols.len(),
                    cols.join(", ")
                ));
            }
            let cells = cols
                .iter()
                .cloned()
                .zip(cells)
                .map(|(c, t)| Ok((c, cell(t)?)))
                .collect::<Result<HashMap<_, _>, String>>()
                .map_err(|t| format!("line {row_line}: {t} is not a value"))?;
            rows.push(Row {
                cells,
                at: format!("line {row_line}"),
            });
        }
        at = next;
        match toks.get(at).map(|t| &t.tok) {
            Some(Tok::Punct(b',')) => at += 1,
            _ => return Ok(end_of_statement(toks, at)),
        }
    }
}

/// The tokens of `( a, b, … )` at `at` (one token each) and the index
/// after it.
fn tuple(toks: &[Token], at: usize) -> Result<(Vec<Tok>, usize), String> {
    let line = toks.get(at).map_or(0, |t| t.line);
    if toks.get(at).map(|t| &t.tok) != Some(&Tok::Punct(b'(')) {
        return Err(format!("line {line}: expected '('"));
    }
    let (mut out, mut i) = (Vec::new(), at + 1);
    loop {
        let t = toks
            .get(i)
            .ok_or(format!("line {line}: a row is not closed"))?;
        out.push(t.tok.clone());
        match toks.get(i + 1).map(|t| &t.tok) {
            Some(Tok::Punct(b',')) => i += 2,
            Some(Tok::Punct(b')')) => return Ok((out, i + 2)),
            None => return Err(format!("line {line}: a row is not closed")),
            _ => {
                return Err(format!(
                    "line {line}: a row holds something other than values"
                ))
            }
        }
    }
}

/// A value token as a cell (`Err`: the token, shown).
fn cell(t: Tok) -> Result<Cell, String> {
    match t {
        Tok::Str(s) => Ok(Cell::Text(s)),
        Tok::Num(n) => Ok(Cell::Number(n)),
        Tok::Word(w) if w.eq_ignore_ascii_case("null") => Ok(Cell::Null),
        Tok::Word(w) if w.eq_ignore_ascii_case("true") => Ok(Cell::Number("1".into())),
        Tok::Word(w) if w.eq_ignore_ascii_case("false") => Ok(Cell::Number("0".into())),
        other => Err(format!("{other:?}")),
    }
}

fn end_of_statement(toks: &[Token], mut at: usize) -> usize {
    while at < toks.len() && toks[at].tok != Tok::Punct(b';') {
        at += 1;
    }
    at + 1
}

/// Rows of a delimited text with a header line; `\r\n` taken as `\n`.
fn delimited(text: &[u8], sep: u8) -> Result<Vec<Row>, String> {
    let records = if sep == b'\t' {
        tsv_records(text)
    } else {
        csv_records(text)?
    };
    let mut it = records.into_iter();
    let Some((_, header)) = it.next() else {
        return Ok(Vec::new());
    };
    let cols: Vec<String> = header
        .iter()
        .map(|c| {
            String::from_utf8_lossy(c.bytes().unwrap_or_default())
                .trim()
                .to_ascii_lowercase()
        })
        .collect();
    let mut rows = Vec::new();
    for (line, cells) in it {
        if cells.len() == 1 && cells[0].bytes().is_some_and(|b| b.is_empty()) {
            continue; // a blank line
        }
        if cells.len() != cols.len() {
            return Err(format!(
                "line {line}: {} fields under a header of {} ({})",
                cells.len(),
                cols.len(),
                cols.join(", ")
            ));
        }
        rows.push(Row {
            cells: cols.iter().cloned().zip(cells).collect(),
            at: format!("line {line}"),
        });
    }
    Ok(rows)
}

/// TSV lines as `mysql -B` writes them: backslash escapes, `NULL`.
fn tsv_records(text: &[u8]) -> Vec<(usize, Vec<Cell>)> {
    let unescape = |f: &[u8]| {
        if f == b"NULL" {
            return Cell::Null;
        }
        let mut out = Vec::with_capacity(f.len());
        let mut i = 0;
        while i < f.len() {
            if f[i] == b'\\' && i + 1 < f.len() {
                out.push(match f[i + 1] {
                    b't' => b'\t',
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b'0' => 0,
                    other => other,
                });
                i += 2;
            } else {
                out.push(f[i]);
                i += 1;
            }
        }
        Cell::Text(out)
    };
    text.split(|&b| b == b'\n')
        .enumerate()
        .map(|(n, l)| (n + 1, l.strip_suffix(b"\r").unwrap_or(l)))
        .filter(|(_, l)| !l.is_empty())
        .map(|(n, l)| (n, l.split(|&b| b == b'\t').map(unescape).collect()))
        .collect()
}

/// CSV records (RFC 4180: quoted fields may hold commas, quotes doubled,
/// newlines); each with the line it starts on.
fn csv_records(text: &[u8]) -> Result<Vec<(usize, Vec<Cell>)>, String> {
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    while i < text.len() {
        let start = line;
        let mut fields = Vec::new();
        loop {
            let mut field = Vec::new();
            if text.get(i) == Some(&b'"') {
                i += 1;
                loop {
                    match text.get(i) {
                        None => return Err(format!("line {start}: a quoted field is not closed")),
                        Some(b'"') if text.get(i + 1) == Some(&b'"') => {
                            field.push(b'"');
                            i += 2;
                        }
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(&c) => {
                            line += usize::from(c == b'\n');
                            field.push(c);
                            i += 1;
                        }
                    }
                }
            }
            while let Some(&c) = text.get(i).filter(|&&c| c != b',' && c != b'\n') {
                if c != b'\r' {
                    field.push(c);
                }
                i += 1;
            }
            fields.push(Cell::Text(field));
            match text.get(i) {
                Some(b',') => i += 1,
                _ => {
                    i += 1;
                    line += 1;
                    break;
                }
            }
        }
        out.push((start, fields));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
