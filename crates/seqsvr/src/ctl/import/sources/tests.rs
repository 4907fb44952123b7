//! Each source's rows and keys as floors or refusals.

use super::super::dump::{rows, Format};
use super::*;

fn floors(p: &Plan) -> Vec<(String, u64)> {
    p.floors
        .iter()
        .map(|f| (String::from_utf8_lossy(&f.name).into_owned(), f.floor))
        .collect()
}

fn refusals(p: &Plan) -> Vec<(String, String)> {
    p.refused
        .iter()
        .map(|r| {
            (
                String::from_utf8_lossy(&r.name).into_owned(),
                r.reason.clone(),
            )
        })
        .collect()
}

fn plan_of(source: Source, text: &str) -> Result<Plan, String> {
    let rows = rows(
        text.as_bytes(),
        Format::Auto,
        source.table(),
        source.columns(),
    )?;
    plan_rows(source, &rows)
}

#[test]
fn leaf_rows_floor_at_max_id() {
    let long = "t".repeat(257);
    let sql = format!(
        "INSERT INTO leaf_alloc VALUES ('leaf-segment-test',1,2000,'',NULL),\
         ('order',120001,2000,'',NULL),('neg',-5,1,'',NULL),('nul',NULL,1,'',NULL),\
         ('',3,1,'',NULL),('{long}',4,1,'',NULL),('frac',1.5,1,'',NULL),\
         ('huge',18446744073709551616,1,'',NULL),('order',90000,2000,'',NULL);"
    );
    let p = plan_of(Source::Leaf, &sql).unwrap();
    // "order" twice: the higher floor covers both.
    assert_eq!(
        floors(&p),
        [("leaf-segment-test".into(), 1), ("order".into(), 120001)]
    );
    assert_eq!(
        refusals(&p),
        [
            ("neg".to_string(), "max_id -5 is negative".to_string()),
            ("nul".into(), "max_id is NULL".into()),
            ("".into(), "a name is 1..=256 bytes, not empty".into()),
            (long.clone(), "a name is 1..=256 bytes, not 257".into()),
            ("frac".into(), "max_id 1.5 is not an integer".into()),
            (
                "huge".into(),
                "max_id 18446744073709551616 is above 2^64 - 1".into()
            ),
        ]
    );
    assert_eq!(p.refused[0].at, "leaf_alloc line 1");
}

#[test]
fn leaf_tsv_and_missing_columns() {
    let tsv = "biz_tag\tmax_id\tstep\nim:group:7\t98000000\t100000\nbad\tabc\t1\n";
    let p = plan_of(Source::Leaf, tsv).unwrap();
    assert_eq!(floors(&p), [("im:group:7".into(), 98000000)]);
    assert_eq!(
        refusals(&p),
        [(
            "bad".to_string(),
            "max_id \"abc\" is not an integer".to_string()
        )]
    );
    assert_eq!(
        plan_of(Source::Leaf, "tag,max\na,1\n").map(|_| ()),
        Err("the rows of leaf_alloc have no biz_tag column (they have: max, tag)".into())
    );
    // A dump without the table's rows plans nothing.
    let p = plan_of(Source::Leaf, "INSERT INTO other VALUES (1);").unwrap();
    assert_eq!((p.floors.len(), p.refused.len()), (0, 0));
}

#[test]
fn tinyid_rows_floor_at_max_id() {
    let sql = "INSERT INTO `tiny_id_info` (`id`, `biz_type`, `begin_id`, `max_id`, `step`, `delta`, `remainder`, `create_time`, `update_time`, `version`)\nVALUES\n\t(1, 'test', 1, 200001, 100000, 1, 0, '2018-07-21 23:52:58', '2018-07-22 23:19:27', 3),\n\t(2, 'test_odd', 1, 1, 100000, 2, 1, '2018-07-21 23:52:58', '2018-07-23 00:39:24', 1);";
    let p = plan_of(Source::Tinyid, sql).unwrap();
    assert_eq!(
        floors(&p),
        [("test".into(), 200001), ("test_odd".into(), 1)]
    );
    // Without a column list: Tinyid's own column order.
    let bare = "INSERT INTO tiny_id_info VALUES (1,'t',1,500,100,1,0,NULL,NULL,0);";
    assert_eq!(
        floors(&plan_of(Source::Tinyid, bare).unwrap()),
        [("t".into(), 500)]
    );
}

#[test]
fn redis_keys_and_values() {
    let keys = KeyMap::default();
    let mut p = Plan::default();
    let table: &[(&[u8], Option<&[u8]>)] = &[
        (b"order:20261126", Some(b"41")),
        (b"im:conv:9", Some(b"0")),
        (b"page:views", Some(b"12.5")),
        (b"neg", Some(b"-3")),
        (b"session:abc", Some(b"{\"user\":1}")),
        (b"myhash", None),
        (b"seq:42", Some(b"7")),
        (b"42", Some(b"7")),
        (b"bin", Some(b"\xff\xfe")),
        (b"big", Some(b"99999999999999999999")),
    ];
    for (k, v) in table {
        plan_redis(&mut p, &keys, k, *v);
    }
    assert_eq!(
        floors(&p),
        [("order:20261126".into(), 41), ("im:conv:9".into(), 0)]
    );
    let want = [
        ("page:views", "value \"12.5\" is not an integer"),
        ("neg", "value \"-3\" is negative"),
        (
            "session:abc",
            "value \"{\\\"user\\\":1}\" is not an integer",
        ),
        (
            "myhash",
            "holds no string value (a hash, list, set, or expired)",
        ),
        (
            "seq:42",
            "the Redis door reads this key as uid 42, not a name",
        ),
        ("42", "the Redis door reads this key as uid 42, not a name"),
        ("\u{fffd}\u{fffd}", ""),
        ("big", "value \"99999999999999999999\" is above 2^64 - 1"),
    ];
    let got = refusals(&p);
    assert_eq!(got.len(), want.len(), "{got:?}");
    for ((name, why), (wname, wwhy)) in got.iter().zip(want) {
        if wwhy.is_empty() {
            continue; // "bin" (its name shown lossily): checked below
        }
        assert_eq!((name.as_str(), why.as_str()), (wname, wwhy));
    }
    assert_eq!(p.refused[6].name, b"bin");
    assert_eq!(
        p.refused[6].reason,
        "value \"\u{fffd}\u{fffd}\" is not an integer"
    );
    assert_eq!(p.refused[0].at, "redis key \"page:views\"");
}
