//! Malformed records, through the binary: each goes to the dead-letter output with its
//! reason, line and bytes, and none changes the state.

mod support;

use dataflows::model::{PairFigures, PairKey};
use eligibility::change_log::{fold_state, read_changes};
use support::{path_str, run_ok};

const GOOD: [&str; 3] = [
    r#"{"topic": "campaigns", "key": "c-9", "value": {"category_ids": [1001], "min_stock": 1}}"#,
    r#"{"topic": "products", "key": "p-1", "value": {"seller_id": 42, "category_id": 1001, "brand_id": 7, "price": 129.90, "stock": 15}}"#,
    r#"{"topic": "products", "key": "p-2", "value": {"seller_id": 42, "category_id": 1001, "brand_id": 7, "price": 10, "stock": 5}}"#,
];

/// Every kind of bad record of SPEC.md, each aimed at a key that exists, with the code and
/// a piece of the reason the dead letter must carry.
const BAD: [(&str, &str, &str); 14] = [
    (
        "{\"topic\": \"products\", \"key\": \"p-1\", \"value\": {\"seller_id\": 42",
        "invalid_json",
        "not valid JSON",
    ),
    ("not json at all", "invalid_json", "not valid JSON"),
    (r#"{"topic": "products", "value": null}"#, "missing_key", "no key"),
    (
        r#"{"topic": "products", "key": "", "value": null}"#,
        "missing_key",
        "key is empty",
    ),
    (
        r#"{"topic": "products", "key": 1, "value": null}"#,
        "missing_key",
        "key must be a string",
    ),
    (
        r#"{"topic": "orders", "key": "p-1", "value": null}"#,
        "unknown_topic",
        "unknown topic \"orders\"",
    ),
    (r#"{"key": "p-1", "value": null}"#, "missing_topic", "no `topic`"),
    (r#"{"topic": "products", "key": "p-1"}"#, "missing_value", "no `value`"),
    (
        r#"{"topic": "products", "key": "p-1", "value": {"category_id": 1001, "brand_id": 7, "price": 1, "stock": 1}}"#,
        "missing_field",
        "`seller_id`",
    ),
    (
        r#"{"topic": "products", "key": "p-1", "value": {"seller_id": 42, "category_id": 1001, "brand_id": 7, "price": "1.00", "stock": 1}}"#,
        "wrong_type",
        "field `price` must be a non-negative number, found a string",
    ),
    (
        r#"{"topic": "products", "key": "p-2", "value": {"seller_id": 42, "category_id": 1001, "brand_id": 7, "price": 10, "stock": -5}}"#,
        "negative",
        "field `stock` must not be negative",
    ),
    (
        r#"{"topic": "products", "key": "p-2", "value": {"seller_id": 42, "category_id": 1001, "brand_id": 7, "price": 10, "stock": 2.5}}"#,
        "not_integer",
        "field `stock` must be an integer",
    ),
    (
        r#"{"topic": "campaigns", "key": "c-9", "value": {"category_ids": [1001, -1]}}"#,
        "negative",
        "`category_ids[1]`",
    ),
    (
        r#"{"topic": "campaigns", "key": "c-9", "value": ["active"]}"#,
        "not_an_object",
        "campaign value must be a JSON object",
    ),
];

#[test]
fn bad_records_go_to_the_dead_letter_output_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.jsonl");
    let output = dir.path().join("changes.jsonl");
    let rejected = dir.path().join("rejected.jsonl");
    let mut lines: Vec<String> = GOOD.iter().map(|s| s.to_string()).collect();
    lines.extend(BAD.iter().map(|(line, _, _)| line.to_string()));
    // A tombstone for an unknown key and an identical re-send are valid and change nothing.
    lines.push(r#"{"topic": "products", "key": "p-404", "value": null}"#.into());
    lines.push(GOOD[2].into());
    let mut bytes = lines.join("\n").into_bytes();
    bytes.extend_from_slice(b"\n\xff\xfe not utf-8\n");
    std::fs::write(&input, &bytes).unwrap();

    for batch_size in ["1", "4", "1000"] {
        run_ok(&[
            "run",
            "--input",
            path_str(&input),
            "--output",
            path_str(&output),
            "--dead-letter",
            path_str(&rejected),
            "--batch-size",
            batch_size,
            "--workers",
            "2",
        ]);

        // State: as if the bad records were not there.
        let state = fold_state(&read_changes(&output).unwrap());
        let pair = PairKey {
            campaign_id: "c-9".into(),
            seller_id: 42,
        };
        assert_eq!(state.len(), 1, "batch size {batch_size}: {state:?}");
        assert_eq!(
            state[&pair],
            PairFigures {
                eligible_products: 2,
                eligible_stock: 20
            }
        );

        // Dead letters: one per bad line, in line order, with code, reason and bytes.
        let letters: Vec<serde_json::Value> = std::fs::read_to_string(&rejected)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(letters.len(), BAD.len() + 1, "batch size {batch_size}");
        for (index, (line, code, reason)) in BAD.iter().enumerate() {
            let letter = &letters[index];
            assert_eq!(letter["line"], GOOD.len() + index, "{letter}");
            assert_eq!(letter["code"], *code, "{letter}");
            assert!(
                letter["reason"].as_str().unwrap().contains(reason),
                "{letter} should say {reason}"
            );
            assert_eq!(letter["raw"], *line);
        }
        let last = &letters[BAD.len()];
        assert_eq!(last["code"], "not_utf8");
        assert_eq!(last["line"], lines.len());
        assert_eq!(last["raw_base64"], "//4gbm90IHV0Zi04");
    }
}
