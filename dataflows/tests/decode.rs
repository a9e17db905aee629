//! Decoding: every accepted shape and every rejection reason of SPEC.md.

use dataflows::decode::{
    decode_category_id, decode_envelope, decode_line, decode_message, Change, DecodeError, JsonKind, Record,
};
use dataflows::instant::EpochNanos;
use dataflows::model::Window;
use dataflows::{Campaign, Category, IdSet, Product, Topic};

fn decode(line: &str) -> Result<Record, DecodeError> {
    decode_envelope(line.as_bytes())
}

fn product_line(value: &str) -> String {
    format!(r#"{{"topic": "products", "key": "p-1", "value": {value}}}"#)
}

fn campaign_line(value: &str) -> String {
    format!(r#"{{"topic": "campaigns", "key": "c-1", "value": {value}}}"#)
}

fn category_line(key: &str, value: &str) -> String {
    format!(r#"{{"topic": "categories", "key": "{key}", "value": {value}}}"#)
}

const PRODUCT: &str = r#"{"seller_id": 42, "category_id": 1001, "brand_id": 7, "price": 129.90, "stock": 15}"#;

#[test]
fn a_product_decodes_with_its_price_in_minor_units() {
    let record = decode(&product_line(PRODUCT)).unwrap();
    assert_eq!(record.key, "p-1");
    assert_eq!(
        record.change,
        Change::Product(Some(Product {
            seller_id: 42,
            category_id: 1001,
            brand_id: 7,
            price_minor: 12990,
            stock: 15
        }))
    );
}

#[test]
fn unknown_fields_and_whitespace_are_ignored() {
    let value = r#"{ "seller_id" : 42 , "category_id": 1001, "brand_id": 7, "price": 5, "stock": 0,
                    "title": "kettle", "tags": [1, {"x": null}] }"#;
    let line = format!(r#"{{"key": "p-1", "extra": true, "value": {value}, "topic": "products"}}"#).replace('\n', " ");
    let Change::Product(Some(product)) = decode(&line).unwrap().change else {
        panic!()
    };
    assert_eq!(product.price_minor, 500);
    assert_eq!(product.stock, 0);
}

#[test]
fn a_null_value_is_a_tombstone() {
    assert_eq!(decode(&product_line("null")).unwrap().change, Change::Product(None));
    assert_eq!(decode(&campaign_line("null")).unwrap().change, Change::Campaign(None));
}

#[test]
fn campaign_fields_default_when_absent_or_null() {
    let Change::Campaign(Some(campaign)) = decode(&campaign_line("{}")).unwrap().change else {
        panic!()
    };
    assert_eq!(campaign, Campaign::unrestricted());
    let all_null = r#"{"category_ids": null, "brand_ids": null, "seller_ids": null, "excluded_seller_ids": null,
        "min_price": null, "max_price": null, "min_stock": null, "active": null}"#
        .replace('\n', " ");
    let Change::Campaign(Some(campaign)) = decode(&campaign_line(&all_null)).unwrap().change else {
        panic!()
    };
    assert_eq!(campaign, Campaign::unrestricted());
}

#[test]
fn a_full_campaign_decodes_with_sorted_lists() {
    let value = r#"{"category_ids": [1001, 5, 5], "brand_ids": [7], "seller_ids": [], "excluded_seller_ids": [9, 3],
        "min_price": 10.5, "max_price": 200, "min_stock": 2, "active": false,
        "starts_at": "2026-11-27T03:00:00.250+03:00", "ends_at": null}"#
        .replace('\n', " ");
    let Change::Campaign(Some(campaign)) = decode(&campaign_line(&value)).unwrap().change else {
        panic!()
    };
    assert_eq!(
        campaign,
        Campaign {
            category_ids: IdSet::new(vec![5, 1001]),
            brand_ids: IdSet::new(vec![7]),
            seller_ids: IdSet::default(),
            excluded_seller_ids: IdSet::new(vec![3, 9]),
            min_price_minor: Some(1050),
            max_price_minor: Some(20000),
            min_stock: 2,
            active: false,
            window: Window {
                starts_at: Some(EpochNanos(1_795_737_600_250_000_000)),
                ends_at: None,
            },
        }
    );
}

fn rejected(line: &str) -> DecodeError {
    decode(line).expect_err(line)
}

#[test]
fn envelope_rejections_name_what_is_wrong() {
    assert_eq!(decode_envelope(b"\xff\xfe").unwrap_err(), DecodeError::NotUtf8);
    assert!(matches!(rejected("{not json"), DecodeError::InvalidJson(_)));
    assert!(matches!(rejected(""), DecodeError::InvalidJson(_)));
    assert!(matches!(
        rejected(r#"{"topic": "products", "key": "p", "value": {}} trailing"#),
        DecodeError::InvalidJson(_)
    ));
    assert_eq!(
        rejected("[1, 2]"),
        DecodeError::NotAnObject {
            what: "record",
            found: JsonKind::Array
        }
    );
    assert_eq!(rejected(r#"{"key": "p-1", "value": null}"#), DecodeError::MissingTopic);
    assert_eq!(
        rejected(r#"{"topic": 3, "key": "p-1", "value": null}"#),
        DecodeError::TopicNotString(JsonKind::Number)
    );
    assert_eq!(
        rejected(r#"{"topic": "orders", "key": "p-1", "value": null}"#),
        DecodeError::UnknownTopic("orders".into())
    );
    assert_eq!(
        rejected(r#"{"topic": "products", "value": null}"#),
        DecodeError::MissingKey
    );
    assert_eq!(
        rejected(r#"{"topic": "products", "key": null, "value": null}"#),
        DecodeError::MissingKey
    );
    assert_eq!(
        rejected(r#"{"topic": "products", "key": 17, "value": null}"#),
        DecodeError::KeyNotString(JsonKind::Number)
    );
    assert_eq!(
        rejected(r#"{"topic": "products", "key": "", "value": null}"#),
        DecodeError::EmptyKey
    );
    assert_eq!(
        rejected(r#"{"topic": "products", "key": "p-1"}"#),
        DecodeError::MissingValue
    );
    assert_eq!(
        rejected(&product_line("[1]")),
        DecodeError::NotAnObject {
            what: "product value",
            found: JsonKind::Array
        }
    );
    assert_eq!(
        rejected(&campaign_line(r#""on""#)),
        DecodeError::NotAnObject {
            what: "campaign value",
            found: JsonKind::String
        }
    );
}

#[test]
fn product_rejections_name_the_field() {
    for field in ["seller_id", "category_id", "brand_id", "price", "stock"] {
        let mut value: serde_json::Map<String, serde_json::Value> = serde_json::from_str(PRODUCT).unwrap();
        value.remove(field);
        let line = product_line(&serde_json::Value::Object(value).to_string());
        assert_eq!(rejected(&line), DecodeError::MissingField(field), "{line}");
    }
    let cases: Vec<(&str, DecodeError)> = vec![
        (
            r#"{"seller_id": "42", "category_id": 1, "brand_id": 7, "price": 1, "stock": 1}"#,
            DecodeError::WrongType {
                field: "seller_id".into(),
                expected: "a non-negative integer",
                found: JsonKind::String,
            },
        ),
        (
            r#"{"seller_id": null, "category_id": 1, "brand_id": 7, "price": 1, "stock": 1}"#,
            DecodeError::WrongType {
                field: "seller_id".into(),
                expected: "a non-negative integer",
                found: JsonKind::Null,
            },
        ),
        (
            r#"{"seller_id": 42, "category_id": -1, "brand_id": 7, "price": 1, "stock": 1}"#,
            DecodeError::Negative {
                field: "category_id".into(),
                text: "-1".into(),
            },
        ),
        (
            r#"{"seller_id": 42, "category_id": 1, "brand_id": 7.5, "price": 1, "stock": 1}"#,
            DecodeError::NotInteger {
                field: "brand_id".into(),
                text: "7.5".into(),
            },
        ),
        (
            r#"{"seller_id": 42, "category_id": 1, "brand_id": 7, "price": "129.90", "stock": 1}"#,
            DecodeError::WrongType {
                field: "price".into(),
                expected: "a non-negative number",
                found: JsonKind::String,
            },
        ),
        (
            r#"{"seller_id": 42, "category_id": 1, "brand_id": 7, "price": -0.01, "stock": 1}"#,
            DecodeError::Negative {
                field: "price".into(),
                text: "-0.01".into(),
            },
        ),
        (
            r#"{"seller_id": 42, "category_id": 1, "brand_id": 7, "price": 1e300, "stock": 1}"#,
            DecodeError::OutOfRange {
                field: "price".into(),
                // In SPEC's units: the limit of u64::MAX cents, written as a price.
                max: "184467440737095516.15".into(),
                text: "1e300".into(),
            },
        ),
        (
            r#"{"seller_id": 42, "category_id": 1, "brand_id": 7, "price": 1, "stock": -2}"#,
            DecodeError::Negative {
                field: "stock".into(),
                text: "-2".into(),
            },
        ),
        (
            r#"{"seller_id": 42, "category_id": 1, "brand_id": 7, "price": 1, "stock": 4294967296}"#,
            DecodeError::OutOfRange {
                field: "stock".into(),
                max: "4294967295".into(),
                text: "4294967296".into(),
            },
        ),
        (
            r#"{"seller_id": 42, "category_id": 1, "brand_id": 7, "price": 1, "stock": true}"#,
            DecodeError::WrongType {
                field: "stock".into(),
                expected: "a non-negative integer",
                found: JsonKind::Bool,
            },
        ),
        (
            r#"{"seller_id": 18446744073709551616, "category_id": 1, "brand_id": 7, "price": 1, "stock": 1}"#,
            DecodeError::OutOfRange {
                field: "seller_id".into(),
                max: u64::MAX.to_string(),
                text: "18446744073709551616".into(),
            },
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(rejected(&product_line(value)), expected, "{value}");
    }
    assert!(matches!(
        rejected(&product_line(r#"{"seller_id": 1, "seller_id": 2, "category_id": 1, "brand_id": 7, "price": 1, "stock": 1}"#)),
        DecodeError::InvalidJson(message) if message.contains("duplicate field")
    ));
}

#[test]
fn campaign_rejections_name_the_field() {
    let cases: Vec<(&str, DecodeError)> = vec![
        (
            r#"{"category_ids": 5}"#,
            DecodeError::WrongType {
                field: "category_ids".into(),
                expected: "an array of non-negative integers",
                found: JsonKind::Number,
            },
        ),
        (
            r#"{"brand_ids": [1, "2"]}"#,
            DecodeError::WrongType {
                field: "brand_ids[1]".into(),
                expected: "a non-negative integer",
                found: JsonKind::String,
            },
        ),
        (
            r#"{"seller_ids": [1, 2, -3]}"#,
            DecodeError::Negative {
                field: "seller_ids[2]".into(),
                text: "-3".into(),
            },
        ),
        (
            r#"{"excluded_seller_ids": [0.5]}"#,
            DecodeError::NotInteger {
                field: "excluded_seller_ids[0]".into(),
                text: "0.5".into(),
            },
        ),
        (
            r#"{"min_price": "10"}"#,
            DecodeError::WrongType {
                field: "min_price".into(),
                expected: "a non-negative number",
                found: JsonKind::String,
            },
        ),
        (
            r#"{"max_price": -1}"#,
            DecodeError::Negative {
                field: "max_price".into(),
                text: "-1".into(),
            },
        ),
        (
            r#"{"min_stock": 1.5}"#,
            DecodeError::NotInteger {
                field: "min_stock".into(),
                text: "1.5".into(),
            },
        ),
        (
            r#"{"active": "yes"}"#,
            DecodeError::WrongType {
                field: "active".into(),
                expected: "a boolean",
                found: JsonKind::String,
            },
        ),
        (
            r#"{"active": 1}"#,
            DecodeError::WrongType {
                field: "active".into(),
                expected: "a boolean",
                found: JsonKind::Number,
            },
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(rejected(&campaign_line(value)), expected, "{value}");
    }
}

#[test]
fn every_rejection_has_a_readable_reason_and_a_code() {
    let error = rejected(&product_line(
        r#"{"seller_id": 42, "category_id": 1, "brand_id": 7, "price": 1, "stock": -2}"#,
    ));
    assert_eq!(error.to_string(), "field `stock` must not be negative, found -2");
    assert_eq!(error.code(), "negative");
    assert_eq!(
        rejected(&product_line(
            r#"{"category_id": 1, "brand_id": 7, "price": 1, "stock": 2}"#
        ))
        .to_string(),
        "missing required field `seller_id`"
    );
}

#[test]
fn kafka_messages_decode_from_raw_bytes() {
    let record = decode_message(Topic::Products, Some(b"p-9"), Some(PRODUCT.as_bytes())).unwrap();
    assert_eq!(record.key, "p-9");
    assert!(matches!(record.change, Change::Product(Some(_))));
    let tombstone = decode_message(Topic::Campaigns, Some(b"c-1"), None).unwrap();
    assert_eq!(tombstone.change, Change::Campaign(None));
    assert_eq!(
        decode_message(Topic::Products, None, None).unwrap_err(),
        DecodeError::MissingKey
    );
    assert_eq!(
        decode_message(Topic::Products, Some(b""), None).unwrap_err(),
        DecodeError::EmptyKey
    );
    assert_eq!(
        decode_message(Topic::Products, Some(b"\xff"), None).unwrap_err(),
        DecodeError::NotUtf8
    );
    assert_eq!(
        decode_message(Topic::Products, Some(b"p"), Some(b"\xff")).unwrap_err(),
        DecodeError::NotUtf8
    );
}

#[test]
fn a_category_decodes_with_its_parent_or_as_a_root() {
    let record = decode(&category_line("1001", r#"{"parent_id": 10}"#)).unwrap();
    assert_eq!(record.key, "1001");
    assert_eq!(record.change, Change::Category(Some(Category { parent_id: Some(10) })));
    assert_eq!(record.change.topic(), Topic::Categories);
    let root = Change::Category(Some(Category { parent_id: None }));
    assert_eq!(
        decode(&category_line("10", r#"{"parent_id": null}"#)).unwrap().change,
        root
    );
    assert_eq!(decode(&category_line("10", "{}")).unwrap().change, root);
    assert_eq!(
        decode(&category_line("10", r#"{"parent_id": 1.0e1, "name": "Phones"}"#))
            .unwrap()
            .change,
        Change::Category(Some(Category { parent_id: Some(10) })),
        "an integral number in any notation; unknown fields ignored"
    );
    // Its own parent is a cycle of one, accepted like any cycle.
    assert!(decode(&category_line("7", r#"{"parent_id": 7}"#)).is_ok());
    assert_eq!(
        decode(&category_line("1001", "null")).unwrap().change,
        Change::Category(None)
    );
    assert_eq!(decode_category_id("1001"), Ok(1001));
    assert_eq!(decode_category_id("007"), Ok(7), "leading zeros name the same id");
    assert_eq!(decode_category_id(&u64::MAX.to_string()), Ok(u64::MAX));
}

#[test]
fn category_rejections_name_the_key_or_the_field() {
    for key in [
        "abc",
        "-1",
        "+1",
        "1.5",
        "1e3",
        " 1",
        "1 ",
        "0x10",
        "18446744073709551616",
    ] {
        let line = category_line(key, r#"{"parent_id": 1}"#);
        assert_eq!(rejected(&line), DecodeError::CategoryKey(key.into()), "{line}");
        // A tombstone's key is checked too.
        assert_eq!(
            rejected(&category_line(key, "null")),
            DecodeError::CategoryKey(key.into())
        );
    }
    assert_eq!(rejected(&category_line("", "null")), DecodeError::EmptyKey);
    let cases: Vec<(&str, DecodeError)> = vec![
        (
            r#"{"parent_id": "10"}"#,
            DecodeError::WrongType {
                field: "parent_id".into(),
                expected: "a non-negative integer",
                found: JsonKind::String,
            },
        ),
        (
            r#"{"parent_id": [10]}"#,
            DecodeError::WrongType {
                field: "parent_id".into(),
                expected: "a non-negative integer",
                found: JsonKind::Array,
            },
        ),
        (
            r#"{"parent_id": -3}"#,
            DecodeError::Negative {
                field: "parent_id".into(),
                text: "-3".into(),
            },
        ),
        (
            r#"{"parent_id": 2.5}"#,
            DecodeError::NotInteger {
                field: "parent_id".into(),
                text: "2.5".into(),
            },
        ),
        (
            r#"{"parent_id": 18446744073709551616}"#,
            DecodeError::OutOfRange {
                field: "parent_id".into(),
                max: u64::MAX.to_string(),
                text: "18446744073709551616".into(),
            },
        ),
        (
            "[10]",
            DecodeError::NotAnObject {
                what: "category value",
                found: JsonKind::Array,
            },
        ),
        (
            "10",
            DecodeError::NotAnObject {
                what: "category value",
                found: JsonKind::Number,
            },
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(rejected(&category_line("1001", value)), expected, "{value}");
    }
    let error = rejected(&category_line("phones", "null"));
    assert_eq!(error.code(), "bad_key");
    assert_eq!(
        error.to_string(),
        "category key must be a decimal integer from 0 to 18446744073709551615, found \"phones\""
    );
    assert_eq!(rejected(&category_line("1", r#"{"parent_id": -3}"#)).code(), "negative");
    // Product and campaign keys stay free text.
    assert!(decode(r#"{"topic": "campaigns", "key": "abc", "value": null}"#).is_ok());
}

#[test]
fn kafka_category_messages_check_the_key() {
    let record = decode_message(Topic::Categories, Some(b"1001"), Some(br#"{"parent_id": 10}"#)).unwrap();
    assert_eq!(record.key, "1001");
    assert_eq!(record.change, Change::Category(Some(Category { parent_id: Some(10) })));
    assert_eq!(
        decode_message(Topic::Categories, Some(b"1001"), None).unwrap().change,
        Change::Category(None)
    );
    assert_eq!(
        decode_message(Topic::Categories, Some(b"x1"), None).unwrap_err(),
        DecodeError::CategoryKey("x1".into())
    );
    assert_eq!(
        decode_message(Topic::Categories, None, None).unwrap_err(),
        DecodeError::MissingKey
    );
    assert_eq!(
        decode_message(Topic::Categories, Some(b"1"), Some(br#"{"parent_id": true}"#)).unwrap_err(),
        DecodeError::WrongType {
            field: "parent_id".into(),
            expected: "a non-negative integer",
            found: JsonKind::Bool,
        }
    );
}

#[test]
fn window_bounds_decode_in_every_zone_and_compare_to_the_nanosecond() {
    let window = |value: &str| match decode(&campaign_line(value)).unwrap().change {
        Change::Campaign(Some(campaign)) => campaign.window,
        other => panic!("{other:?}"),
    };
    let at = |nanos: i128| Some(EpochNanos(nanos));
    assert_eq!(window("{}"), Window::default(), "absent: no bounds");
    assert_eq!(
        window(r#"{"starts_at": null, "ends_at": null}"#),
        Window::default(),
        "null: no bounds"
    );
    // One instant, three zones: equal to the nanosecond.
    for text in [
        "2026-11-27T00:00:00Z",
        "2026-11-27T03:00:00+03:00",
        "2026-11-26T18:30:00.000000000-05:30",
    ] {
        let value = format!(r#"{{"starts_at": "{text}"}}"#);
        assert_eq!(window(&value).starts_at, at(1_795_737_600_000_000_000), "{text}");
    }
    // One nanosecond apart is apart.
    assert_eq!(
        window(r#"{"ends_at": "2026-11-27T00:00:00.000000001Z"}"#).ends_at,
        at(1_795_737_600_000_000_001)
    );
    // An end before the start is valid (never open).
    let backwards = window(r#"{"starts_at": "2026-11-28T00:00:00Z", "ends_at": "2026-11-27T00:00:00Z"}"#);
    assert!(backwards.ends_at < backwards.starts_at);
}

#[test]
fn bad_window_bounds_are_rejected_with_the_field_and_the_reason() {
    let no_zone = rejected(&campaign_line(r#"{"starts_at": "2026-11-27T00:00:00"}"#));
    assert!(
        matches!(&no_zone, DecodeError::BadTimestamp { field: "starts_at", text, .. } if text == "2026-11-27T00:00:00"),
        "{no_zone:?}"
    );
    assert_eq!(no_zone.code(), "bad_timestamp");
    assert!(no_zone.to_string().contains("starts_at"), "{no_zone}");
    assert!(no_zone.to_string().contains("zone"), "{no_zone}");
    assert_eq!(
        rejected(&campaign_line(r#"{"ends_at": 1795737600000}"#)),
        DecodeError::WrongType {
            field: "ends_at".into(),
            expected: "an RFC 3339 timestamp with a zone (a string)",
            found: JsonKind::Number,
        }
    );
    for value in [
        r#"{"ends_at": "27/11/2026"}"#,
        r#"{"ends_at": "2026-11-27"}"#,
        r#"{"ends_at": "2026-02-29T00:00:00Z"}"#,
        r#"{"ends_at": "2026-11-27T00:00:00.1234567891Z"}"#,
        r#"{"ends_at": "2026-11-27T00:00:00+0300"}"#,
    ] {
        let error = rejected(&campaign_line(value));
        assert!(
            matches!(error, DecodeError::BadTimestamp { field: "ends_at", .. }),
            "{value}: {error:?}"
        );
    }
    assert!(matches!(
        rejected(&campaign_line(r#"{"starts_at": true}"#)),
        DecodeError::WrongType {
            found: JsonKind::Bool,
            ..
        }
    ));
}

#[test]
fn an_envelope_timestamp_is_kept_and_a_bad_one_rejects_the_line() {
    let line =
        |timestamp: &str| format!(r#"{{"topic": "products", "key": "p-1", "value": null, "timestamp": {timestamp}}}"#);
    assert_eq!(
        decode_line(line("1795737600000").as_bytes()).unwrap().timestamp,
        Some(1_795_737_600_000)
    );
    assert_eq!(decode_line(line("0").as_bytes()).unwrap().timestamp, Some(0));
    assert_eq!(
        decode_line(product_line("null").as_bytes()).unwrap().timestamp,
        None,
        "absent"
    );
    assert_eq!(
        decode(&line("-1")).unwrap_err(),
        DecodeError::Negative {
            field: "timestamp".into(),
            text: "-1".into()
        }
    );
    assert!(matches!(
        decode(&line("1.5")).unwrap_err(),
        DecodeError::NotInteger { .. }
    ));
    assert!(matches!(
        decode(&line("1e400")).unwrap_err(),
        DecodeError::OutOfRange { .. } | DecodeError::NotInteger { .. }
    ));
    assert!(matches!(
        decode(&line("9223372036854775808")).unwrap_err(),
        DecodeError::OutOfRange { .. }
    ));
    for (text, found) in [
        (r#""1795737600000""#, JsonKind::String),
        ("null", JsonKind::Null),
        ("true", JsonKind::Bool),
    ] {
        assert_eq!(
            decode(&line(text)).unwrap_err(),
            DecodeError::WrongType {
                field: "timestamp".into(),
                expected: "milliseconds since the Unix epoch (a non-negative integer)",
                found,
            },
            "{text}"
        );
    }
}
