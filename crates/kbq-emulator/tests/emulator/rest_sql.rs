//! The SQL of `jobs.query` / `jobs.insert` over the emulator's tables: the table checks Google's
//! Go managedwriter integration tests send (their `validateTableConstraints` query, verbatim in
//! shape), `SELECT *` with ORDER BY / LIMIT, the recovery query, `ALTER TABLE … ADD PRIMARY KEY
//! … NOT ENFORCED`, and the 400 `invalidQuery` for what the emulator does not evaluate.

use crate::rest_support::{Rest, assert_error, start};
use prost_reflect::Value as Pv;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto};
use serde_json::{Value, json};

fn field(name: &str, number: i32, t: Type) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(Label::Optional as i32),
        r#type: Some(t as i32),
        ..Default::default()
    }
}

fn descriptor() -> DescriptorProto {
    DescriptorProto {
        name: Some("Row".into()),
        field: vec![
            field("name", 1, Type::String),
            field("value", 2, Type::Int64),
            field("flag", 3, Type::Bool),
            field("score", 4, Type::Double),
            field("ts", 5, Type::Int64),
        ],
        ..Default::default()
    }
}

/// A table `d.t` with five rows: names a, a, b, NULL, c.
async fn table_with_rows() -> Rest {
    let emu = start().await;
    emu.dataset("d").await;
    emu.table(
        "d",
        "t",
        json!([
            {"name": "name", "type": "STRING"},
            {"name": "value", "type": "INTEGER"},
            {"name": "flag", "type": "BOOLEAN"},
            {"name": "score", "type": "FLOAT"},
            {"name": "ts", "type": "TIMESTAMP"},
        ]),
    )
    .await;
    let row = |name: Option<&str>, value: i64, flag: bool, score: f64| {
        let mut r = vec![
            ("value", Pv::I64(value)),
            ("flag", Pv::Bool(flag)),
            ("score", Pv::F64(score)),
            ("ts", Pv::I64(1_700_000_000_000_000 + value)),
        ];
        if let Some(n) = name {
            r.push(("name", Pv::String(n.into())));
        }
        r
    };
    emu.append(
        "d",
        "t",
        &descriptor(),
        &[
            row(Some("a"), 3, true, 1.5),
            row(Some("a"), 1, false, f64::NAN),
            row(Some("b"), 3, true, -2.0),
            row(None, 7, false, 0.0),
            row(Some("c"), 5, true, 10.0),
        ],
    );
    emu
}

fn cells(body: &Value) -> Vec<Value> {
    body["rows"][0]["f"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["v"].clone())
        .collect()
}

#[tokio::test]
async fn googles_table_checks_are_answered() {
    let emu = table_with_rows().await;
    // The shape testutils_test.go builds: one projection per constraint, a newline-separated
    // SELECT list, the project back-quoted apart from dataset and table.
    let sql = "SELECT\nCOUNT(1) AS `total_rows`,\n\
               SUM(IF(`name` IS NULL,1,0)) AS `nullcol_count_name`,\n\
               SUM(IF(`name` IS NOT NULL,1,0)) AS `nonnullcol_count_name`,\n\
               COUNT(DISTINCT `name`) AS `distinct_count_name`,\n\
               APPROX_COUNT_DISTINCT(`value`) AS `approx_value`,\n\
               COUNTIF(`name` = \"a\") AS `string_value_count_name`,\n\
               COUNTIF(`value` = 3) AS `integer_value_count_value`,\n\
               COUNTIF(`flag` = true) AS `bool_value_count_flag`,\n\
               COUNTIF((ABS(`score`) - ABS(1.500000))/ABS(1.500000) < 0.0001) AS `float_value_count_score`,\n\
               COUNTIF(IS_NAN(score)) as `nan_score`\n\
               FROM `p`.d.t";
    let (status, body) = emu.query(sql).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["jobComplete"], true);
    assert_eq!(body["totalRows"], "1");
    let names: Vec<&str> = body["schema"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            assert_eq!(f["type"], "INTEGER", "{f}");
            f["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        names,
        [
            "total_rows",
            "nullcol_count_name",
            "nonnullcol_count_name",
            "distinct_count_name",
            "approx_value",
            "string_value_count_name",
            "integer_value_count_value",
            "bool_value_count_flag",
            "float_value_count_score",
            "nan_score"
        ]
    );
    // The float check counts 1.5 and, its left side being negative, 0.0 too.
    assert_eq!(
        cells(&body),
        ["5", "1", "4", "3", "4", "2", "2", "3", "2", "1"].map(|s| json!(s))
    );
}

#[tokio::test]
async fn aggregates_of_an_empty_table_and_anonymous_columns() {
    let emu = start().await;
    emu.dataset("d").await;
    emu.table(
        "d",
        "e",
        json!([{"name": "x", "type": "INT64"}, {"name": "f", "type": "FLOAT64"}]),
    )
    .await;
    let (status, body) = emu
        .query("SELECT COUNT(*), SUM(x), MAX(x), COUNT(DISTINCT x), SUM(f) AS s FROM d.e")
        .await;
    assert_eq!(status, 200, "{body}");
    let fields = &body["schema"]["fields"];
    assert_eq!(fields[0]["name"], "f0_");
    assert_eq!(fields[1]["name"], "f1_");
    assert_eq!(fields[2]["name"], "f2_");
    assert_eq!(fields[4]["name"], "s");
    assert_eq!(fields[4]["type"], "FLOAT");
    assert_eq!(
        cells(&body),
        [
            json!("0"),
            Value::Null,
            Value::Null,
            json!("0"),
            Value::Null
        ]
    );
}

#[tokio::test]
async fn select_star_orders_limits_and_formats_timestamps() {
    let emu = table_with_rows().await;
    let (status, body) = emu
        .post(
            "/queries",
            json!({
                "query": "SELECT * FROM `p.d.t` WHERE value >= 3 ORDER BY value DESC, name LIMIT 3",
                "useLegacySql": false,
            }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["totalRows"], "3");
    assert_eq!(body["schema"]["fields"][4]["type"], "TIMESTAMP");
    let rows: Vec<Vec<Value>> = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["f"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["v"].clone())
                .collect()
        })
        .collect();
    // value 7 (name NULL), 5 (c), then the two 3s by name: a before b.
    assert_eq!(rows[0][0], Value::Null);
    assert_eq!(rows[0][1], "7");
    assert_eq!(rows[1][0], "c");
    assert_eq!(rows[2][0], "a");
    assert_eq!(rows[2][2], "true");
    assert_eq!(rows[2][3], "1.5");
    // Without useInt64Timestamp, TIMESTAMP is float seconds, as tabledata.list writes it.
    assert_eq!(rows[0][4], "1.700000000000007E9");

    // Columns and expressions, ascending with NULLs first, OFFSET; integer timestamps asked for.
    let (status, body) = emu
        .query("SELECT name, value * 2 AS twice, ts FROM d.t ORDER BY name LIMIT 2 OFFSET 0")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["schema"]["fields"][1]["name"], "twice");
    assert_eq!(body["schema"]["fields"][1]["type"], "INTEGER");
    assert_eq!(
        body["rows"][0]["f"],
        json!([{"v": null}, {"v": "14"}, {"v": "1700000000000007"}])
    );
    assert_eq!(body["rows"][1]["f"][0]["v"], "a");
}

#[tokio::test]
async fn results_page_through_get_query_results() {
    let emu = table_with_rows().await;
    let (status, job) = emu
        .post(
            "/jobs",
            json!({"configuration": {"query": {"query": "SELECT value FROM d.t ORDER BY value", "useLegacySql": false}}}),
        )
        .await;
    assert_eq!(status, 200, "{job}");
    let id = job["jobReference"]["jobId"].as_str().unwrap();
    let (status, page) = emu.get(&format!("/queries/{id}?maxResults=2")).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["totalRows"], "5");
    assert_eq!(
        page["rows"],
        json!([{"f": [{"v": "1"}]}, {"f": [{"v": "3"}]}])
    );
    let token = page["pageToken"].as_str().unwrap();
    let (_, page) = emu
        .get(&format!("/queries/{id}?maxResults=10&pageToken={token}"))
        .await;
    assert_eq!(
        page["rows"],
        json!([{"f": [{"v": "3"}]}, {"f": [{"v": "5"}]}, {"f": [{"v": "7"}]}])
    );
    assert!(page.get("pageToken").is_none(), "{page}");
}

#[tokio::test]
async fn the_recovery_query_still_answers() {
    let emu = table_with_rows().await;
    let (status, body) = emu
        .query("SELECT MAX(value) FROM `p.d.t` WHERE name = 'a' AND flag = true")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["schema"]["fields"][0],
        json!({"name": "f0_", "type": "INTEGER", "mode": "NULLABLE"})
    );
    assert_eq!(cells(&body), [json!("3")]);
    // MAX of a column holding a NaN is NaN, as in BigQuery.
    let (_, body) = emu
        .query("SELECT MAX(score) AS m, MIN(ts) AS t FROM d.t")
        .await;
    assert_eq!(cells(&body), [json!("NaN"), json!("1700000000000001")]);
}

#[tokio::test]
async fn alter_table_adds_a_primary_key() {
    let emu = table_with_rows().await;
    let (status, body) = emu
        .query("ALTER TABLE `p.d.t` ADD PRIMARY KEY(value) NOT ENFORCED;")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["jobComplete"], true);
    assert!(body.get("schema").is_none(), "{body}");
    let (_, table) = emu.get("/datasets/d/tables/t").await;
    assert_eq!(
        table["tableConstraints"],
        json!({"primaryKey": {"columns": ["value"]}})
    );

    let (status, body) = emu
        .query("ALTER TABLE d.t ADD PRIMARY KEY(name) NOT ENFORCED")
        .await;
    assert_eq!(status, 400);
    assert_error(&body, 400, "invalidQuery", "already has a primary key");

    // jobs.insert, as Google's clients send DDL; the job says what it ran.
    emu.table(
        "d",
        "u",
        json!([{"name": "id", "type": "INT64"}, {"name": "f", "type": "FLOAT64"}]),
    )
    .await;
    let (status, job) = emu
        .post(
            "/jobs",
            json!({"configuration": {"query": {"query": "ALTER TABLE `p`.d.u ADD PRIMARY KEY (id) NOT ENFORCED", "useLegacySql": false}}}),
        )
        .await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["statistics"]["query"]["statementType"], "ALTER_TABLE");
    let (_, table) = emu.get("/datasets/d/tables/u").await;
    assert_eq!(
        table["tableConstraints"]["primaryKey"]["columns"],
        json!(["id"])
    );

    emu.table(
        "d",
        "v",
        json!([{"name": "id", "type": "INT64"}, {"name": "f", "type": "FLOAT64"}]),
    )
    .await;
    for (sql, message) in [
        ("ALTER TABLE d.v ADD PRIMARY KEY (f) NOT ENFORCED", "FLOAT"),
        (
            "ALTER TABLE d.v ADD PRIMARY KEY (nope) NOT ENFORCED",
            "not in the schema",
        ),
        ("ALTER TABLE d.v ADD PRIMARY KEY (id)", "NOT ENFORCED"),
        (
            "ALTER TABLE d.v DROP COLUMN f",
            "Unsupported in the emulator",
        ),
    ] {
        let (status, body) = emu.query(sql).await;
        assert_eq!(status, 400, "{sql}: {body}");
        assert_error(&body, 400, "invalidQuery", message);
    }
    // An unquoted project id with dashes, as Google's Go client writes a table's identifier.
    let other = emu.base.replace("/projects/p", "/projects/my-project");
    for (path, body) in [
        (
            "/datasets",
            json!({"datasetReference": {"projectId": "my-project", "datasetId": "d"}}),
        ),
        (
            "/datasets/d/tables",
            json!({"tableReference": {"projectId": "my-project", "datasetId": "d", "tableId": "w"},
                   "schema": {"fields": [{"name": "id", "type": "INT64"}]}}),
        ),
    ] {
        let resp = emu
            .http
            .post(format!("{other}{path}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
    }
    let (status, body) = emu
        .query("ALTER TABLE my-project.d.w ADD PRIMARY KEY(id) NOT ENFORCED;")
        .await;
    assert_eq!(status, 200, "{body}");
    let resp = emu
        .http
        .get(format!("{other}/datasets/d/tables/w"))
        .send()
        .await
        .unwrap();
    let table: Value = resp.json().await.unwrap();
    assert_eq!(
        table["tableConstraints"]["primaryKey"]["columns"],
        json!(["id"])
    );

    let (status, body) = emu
        .query("ALTER TABLE d.missing ADD PRIMARY KEY (id) NOT ENFORCED")
        .await;
    assert_eq!(status, 404);
    assert_error(&body, 404, "notFound", "d.missing");
}

#[tokio::test]
async fn what_the_emulator_does_not_evaluate_is_refused_by_name() {
    let emu = table_with_rows().await;
    for (sql, named) in [
        ("SELECT name, COUNT(1) FROM d.t GROUP BY name", "GROUP BY"),
        ("SELECT * FROM d.t JOIN d.t AS u ON true", "JOIN"),
        ("WITH x AS (SELECT 1) SELECT * FROM d.t", "WITH"),
        ("SELECT DISTINCT name FROM d.t", "SELECT DISTINCT"),
        ("SELECT UPPER(name) FROM d.t", "the function UPPER"),
        (
            "SELECT COUNTIF(ts = '2024-01-01') FROM d.t",
            "comparing a STRING with a TIMESTAMP",
        ),
        (
            "SELECT * FROM d.t WHERE name LIKE 'a%'",
            "the expression name LIKE 'a%'",
        ),
        ("SELECT ROW_NUMBER() OVER () FROM d.t", "window functions"),
        ("SELECT (SELECT 1) FROM d.t", "the expression (SELECT 1)"),
        ("DELETE FROM d.t WHERE true", "the statement DELETE FROM"),
        ("SELECT 1; SELECT 2", "a script of several statements"),
        ("SELECT 1", "SELECT without FROM"),
        ("SELECT SUM(DISTINCT value) FROM d.t", "SUM(DISTINCT"),
    ] {
        let (status, body) = emu.query(sql).await;
        assert_eq!(status, 400, "{sql}: {body}");
        assert_error(&body, 400, "invalidQuery", named);
    }
    // BigQuery's own refusals, checked before any row is read.
    for (sql, message) in [
        (
            "SELECT COUNTIF(value = 'x') FROM d.t",
            "No matching signature for operator = for argument types: INT64, STRING",
        ),
        ("SELECT nope FROM d.t", "Unrecognized name: nope"),
        (
            "SELECT name, COUNT(1) FROM d.t",
            "neither grouped nor aggregated",
        ),
        (
            "SELECT * FROM d.t WHERE value",
            "WHERE clause should return type BOOL",
        ),
        ("SELECT * FROM d.t WHERE", "Syntax error"),
    ] {
        let (status, body) = emu.query(sql).await;
        assert_eq!(status, 400, "{sql}: {body}");
        assert_error(&body, 400, "invalidQuery", message);
    }
    let (status, body) = emu.query("SELECT * FROM d.nope").await;
    assert_eq!(status, 404);
    assert_error(&body, 404, "notFound", "Not found: Table p:d.nope");
}
