//! Dumps as the tools write them, read back as rows.

use super::*;

/// A `mysqldump` of Leaf's table (schema from Leaf's README; extended
/// inserts, escapes, conditional comments, a second table interleaved).
const LEAF_MYSQLDUMP: &str = r#"-- MySQL dump 10.13  Distrib 5.7.44, for Linux (x86_64)
--
-- Host: localhost    Database: leaf
-- ------------------------------------------------------
/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;
/*!40101 SET NAMES utf8 */;

--
-- Table structure for table `leaf_alloc`
--

DROP TABLE IF EXISTS `leaf_alloc`;
/*!40101 SET @saved_cs_client     = @@character_set_client */;
CREATE TABLE `leaf_alloc` (
  `biz_tag` varchar(128) NOT NULL DEFAULT '',
  `max_id` bigint(20) NOT NULL DEFAULT '1',
  `step` int(11) NOT NULL,
  `description` varchar(256) DEFAULT NULL,
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8;
/*!40101 SET character_set_client = @saved_cs_client */;

LOCK TABLES `leaf_alloc` WRITE;
/*!40000 ALTER TABLE `leaf_alloc` DISABLE KEYS */;
INSERT INTO `leaf_alloc` VALUES ('leaf-segment-test',1,2000,'Test leaf Segment Mode Get Id','2019-08-29 10:37:08'),('order',120001,2000,'it\'s (orders), \"quoted\"; ok',NULL),('im:msg',98000000,100000,'line\nbreak','2024-01-02 03:04:05');
/*!40000 ALTER TABLE `leaf_alloc` ENABLE KEYS */;
UNLOCK TABLES;

CREATE TABLE `other` (`id` int, `max_id` bigint);
INSERT INTO `other` VALUES (1,5);
"#;

fn get<'a>(r: &'a Row, c: &str) -> &'a Cell {
    &r.cells[c]
}

fn text(s: &str) -> Cell {
    Cell::Text(s.as_bytes().to_vec())
}

fn num(s: &str) -> Cell {
    Cell::Number(s.into())
}

#[test]
fn a_mysqldump_of_leaf_alloc() {
    let leaf = ["biz_tag", "max_id", "step", "description", "update_time"];
    let rows = rows(LEAF_MYSQLDUMP.as_bytes(), Format::Auto, "leaf_alloc", &leaf).unwrap();
    assert_eq!(rows.len(), 3);
    let want = [
        ("leaf-segment-test", "1", "2000"),
        ("order", "120001", "2000"),
        ("im:msg", "98000000", "100000"),
    ];
    for (r, (tag, max, step)) in rows.iter().zip(want) {
        assert_eq!(get(r, "biz_tag"), &text(tag));
        assert_eq!(get(r, "max_id"), &num(max));
        assert_eq!(get(r, "step"), &num(step));
        assert_eq!(r.at, "line 26");
    }
    assert_eq!(
        get(&rows[1], "description"),
        &text("it's (orders), \"quoted\"; ok")
    );
    assert_eq!(get(&rows[1], "update_time"), &Cell::Null);
    assert_eq!(get(&rows[2], "description"), &text("line\nbreak"));
}

#[test]
fn statements_in_every_shape() {
    let cols = ["biz_tag", "max_id", "step", "description", "update_time"];
    let table: &[(&str, Vec<(&str, &str)>)] = &[
        // Leaf's README: lower case, a column list, no semicolon.
        (
            "insert into leaf_alloc(biz_tag, max_id, step, description) values('leaf-segment-test', 1, 2000, 'Test leaf Segment Mode Get Id')",
            vec![("leaf-segment-test", "1")],
        ),
        // --complete-insert, a schema-qualified name, multi-line VALUES.
        (
            "INSERT INTO `leaf`.`leaf_alloc` (`biz_tag`, `max_id`, `step`) VALUES\n\t('a', 10, 5),\n\t('b', 20, 5);",
            vec![("a", "10"), ("b", "20")],
        ),
        // No column list and no CREATE TABLE: Leaf's own column order.
        (
            "INSERT IGNORE INTO leaf_alloc VALUES ('x',7,1,'',NULL);",
            vec![("x", "7")],
        ),
        (
            "REPLACE INTO leaf_alloc (max_id, biz_tag) VALUES (+9, \"dq\"), (3, 'it''s');",
            vec![("dq", "9"), ("it's", "3")],
        ),
        // Comments between rows; other statements ignored.
        (
            "# a comment\nSET NAMES utf8;\nINSERT INTO leaf_alloc (biz_tag,max_id) /* inline */ VALUES ('c',-4); -- trailing\nINSERT INTO leaf_alloc (biz_tag,max_id) SELECT 'd', 1;",
            vec![("c", "-4")],
        ),
    ];
    for (sql, want) in table {
        let rows = rows(sql.as_bytes(), Format::Sql, "leaf_alloc", &cols)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let got: Vec<(Cell, Cell)> = rows
            .iter()
            .map(|r| (get(r, "biz_tag").clone(), get(r, "max_id").clone()))
            .collect();
        let want: Vec<(Cell, Cell)> = want.iter().map(|(t, m)| (text(t), num(m))).collect();
        assert_eq!(got, want, "{sql}");
    }
}

#[test]
fn broken_dumps_name_the_line() {
    let cols = ["biz_tag", "max_id"];
    let table = [
        (
            "INSERT INTO leaf_alloc VALUES ('a',1",
            "line 1: a row is not closed",
        ),
        (
            "\n\nINSERT INTO leaf_alloc VALUES ('a)",
            "line 3: a string is not closed",
        ),
        (
            "INSERT INTO leaf_alloc VALUES ('a',1,2);",
            "line 1: a row of leaf_alloc has 3 values for 2 columns (biz_tag, max_id)",
        ),
        (
            "INSERT INTO leaf_alloc VALUES ('a',now());",
            "line 1: a row holds something other than values",
        ),
        ("/* open", "line 1: a comment is not closed"),
    ];
    for (sql, want) in table {
        assert_eq!(
            rows(sql.as_bytes(), Format::Sql, "leaf_alloc", &cols),
            Err(want.to_string()),
            "{sql}"
        );
    }
}

/// The dump of Tinyid's own `db.sql`: a column list, `VALUES` on its own
/// line, a tab before the row.
#[test]
fn tinyid_db_sql() {
    let sql = "INSERT INTO `tiny_id_info` (`id`, `biz_type`, `begin_id`, `max_id`, `step`, `delta`, `remainder`, `create_time`, `update_time`, `version`)\nVALUES\n\t(1, 'test', 1, 1, 100000, 1, 0, '2018-07-21 23:52:58', '2018-07-22 23:19:27', 1);\n\nINSERT INTO `tiny_id_info` (`id`, `biz_type`, `begin_id`, `max_id`, `step`, `delta`, `remainder`, `create_time`, `update_time`, `version`)\nVALUES\n\t(2, 'test_odd', 1, 300001, 100000, 2, 1, '2018-07-21 23:52:58', '2018-07-23 00:39:24', 3);\n\nINSERT INTO `tiny_id_token` (`id`, `token`, `biz_type`, `remark`, `create_time`, `update_time`)\nVALUES\n\t(1, '0f673adf80504e2eaa552f5d791b644c', 'test', '1', '2017-12-14 16:36:46', '2017-12-14 16:36:48');\n";
    let rows = rows(sql.as_bytes(), Format::Auto, "tiny_id_info", &[]).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(get(&rows[1], "biz_type"), &text("test_odd"));
    assert_eq!(get(&rows[1], "max_id"), &num("300001"));
    assert_eq!(get(&rows[1], "delta"), &num("2"));
    assert_eq!(rows[1].at, "line 7");
}

#[test]
fn tsv_as_mysql_batch_prints_it() {
    let tsv =
        "biz_tag\tmax_id\tstep\nleaf-segment-test\t1\t2000\r\ntab\\there\t5\t1\nnull\tNULL\t1\n\n";
    let rows = rows(tsv.as_bytes(), Format::Auto, "leaf_alloc", &[]).unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(get(&rows[0], "max_id"), &text("1"));
    assert_eq!(get(&rows[0], "step"), &text("2000"));
    assert_eq!(get(&rows[1], "biz_tag"), &text("tab\there"));
    assert_eq!(get(&rows[2], "max_id"), &Cell::Null);
    assert_eq!(rows[1].at, "line 3");
    let short = "biz_tag\tmax_id\na\n";
    assert_eq!(
        rows_of(short, Format::Tsv),
        Err("line 2: 1 fields under a header of 2 (biz_tag, max_id)".into())
    );
}

fn rows_of(t: &str, f: Format) -> Result<Vec<Row>, String> {
    rows(t.as_bytes(), f, "leaf_alloc", &[])
}

#[test]
fn csv_with_quotes() {
    let csv = "BIZ_TAG,max_id,step\n\"a,b\",10,1\n\"say \"\"hi\"\"\",11,1\n\"multi\nline\",12,1\nplain,13,1\n";
    let rows = rows_of(csv, Format::Auto).unwrap();
    let tags: Vec<&Cell> = rows.iter().map(|r| get(r, "biz_tag")).collect();
    assert_eq!(
        tags,
        [
            &text("a,b"),
            &text("say \"hi\""),
            &text("multi\nline"),
            &text("plain")
        ]
    );
    assert_eq!(rows[3].at, "line 6");
    assert_eq!(
        rows_of("a,b\n\"open,1\n", Format::Csv),
        Err("line 2: a quoted field is not closed".into())
    );
    assert_eq!(rows_of("", Format::Csv), Ok(vec![]));
}
