//! Decoding and validation of changelog records, exactly as SPEC.md gives them.
//!
//! Every rejection says which field was wrong and how. Decoding is all-or-nothing: a record
//! either becomes a complete [`Change`] or a [`DecodeError`], so a bad update can never leave
//! a half-applied state behind. Unknown fields are ignored (producers add fields over time).

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::instant::{parse_rfc3339, EpochNanos, Rfc3339Error};
use crate::model::{Campaign, Category, CategoryId, IdSet, Product, Topic, Window};
use crate::number::{self, NumberError};

/// The kind of a JSON value, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonKind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

impl JsonKind {
    fn of(raw: &RawValue) -> JsonKind {
        match raw.get().as_bytes().first() {
            Some(b'n') => JsonKind::Null,
            Some(b't') | Some(b'f') => JsonKind::Bool,
            Some(b'"') => JsonKind::String,
            Some(b'[') => JsonKind::Array,
            Some(b'{') => JsonKind::Object,
            _ => JsonKind::Number,
        }
    }

    fn name(self) -> &'static str {
        match self {
            JsonKind::Null => "null",
            JsonKind::Bool => "a boolean",
            JsonKind::Number => "a number",
            JsonKind::String => "a string",
            JsonKind::Array => "an array",
            JsonKind::Object => "an object",
        }
    }
}

impl std::fmt::Display for JsonKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a record was rejected. The message names the field and what was wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record is not valid UTF-8")]
    NotUtf8,
    #[error("record is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("{what} must be a JSON object, found {found}")]
    NotAnObject { what: &'static str, found: JsonKind },
    #[error("record has no `topic`")]
    MissingTopic,
    #[error("`topic` must be a string, found {0}")]
    TopicNotString(JsonKind),
    #[error("unknown topic {0:?} (expected \"products\", \"campaigns\" or \"categories\")")]
    UnknownTopic(String),
    #[error("record has no key")]
    MissingKey,
    #[error("key must be a string, found {0}")]
    KeyNotString(JsonKind),
    #[error("key is empty")]
    EmptyKey,
    /// A `categories` key: the category id in decimal, digits only.
    #[error("category key must be a decimal integer from 0 to {max}, found {0:?}", max = u64::MAX)]
    CategoryKey(String),
    #[error("record has no `value` (a tombstone is an explicit null)")]
    MissingValue,
    #[error("missing required field `{0}`")]
    MissingField(&'static str),
    #[error("field `{field}` must be {expected}, found {found}")]
    WrongType {
        field: String,
        expected: &'static str,
        found: JsonKind,
    },
    #[error("field `{field}` must not be negative, found {text}")]
    Negative { field: String, text: String },
    #[error("field `{field}` must be an integer, found {text}")]
    NotInteger { field: String, text: String },
    /// `max` is written in SPEC's units (a price in major units, e.g. `123.45`).
    #[error("field `{field}` is out of range (at most {max}), found {text}")]
    OutOfRange { field: String, max: String, text: String },
    #[error("field `{field}` is not an RFC 3339 timestamp with a zone ({text}): {reason}")]
    BadTimestamp {
        field: &'static str,
        text: String,
        reason: Rfc3339Error,
    },
}

impl DecodeError {
    /// A short, stable name for the kind of error: a metrics label and a dead-letter field.
    pub fn code(&self) -> &'static str {
        match self {
            DecodeError::NotUtf8 => "not_utf8",
            DecodeError::InvalidJson(_) => "invalid_json",
            DecodeError::NotAnObject { .. } => "not_an_object",
            DecodeError::MissingTopic => "missing_topic",
            DecodeError::TopicNotString(_) | DecodeError::UnknownTopic(_) => "unknown_topic",
            DecodeError::MissingKey | DecodeError::KeyNotString(_) | DecodeError::EmptyKey => "missing_key",
            DecodeError::CategoryKey(_) => "bad_key",
            DecodeError::MissingValue => "missing_value",
            DecodeError::MissingField(_) => "missing_field",
            DecodeError::WrongType { .. } => "wrong_type",
            DecodeError::Negative { .. } => "negative",
            DecodeError::NotInteger { .. } => "not_integer",
            DecodeError::OutOfRange { .. } => "out_of_range",
            DecodeError::BadTimestamp { .. } => "bad_timestamp",
        }
    }
}

/// The new state of one entity: `None` is a tombstone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Product(Option<Product>),
    Campaign(Option<Campaign>),
    Category(Option<Category>),
}

impl Change {
    pub fn topic(&self) -> Topic {
        match self {
            Change::Product(_) => Topic::Products,
            Change::Campaign(_) => Topic::Campaigns,
            Change::Category(_) => Topic::Categories,
        }
    }
}

/// A decoded changelog record: the entity's id and its new state.
///
/// For a [`Change::Category`], `key` has passed [`decode_category_id`], which gives the id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub key: String,
    pub change: Change,
}

/// Deserializes a field as its raw text, so that `null` and "absent" stay distinct.
fn present<'de, D>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    <&RawValue>::deserialize(deserializer).map(Some)
}

#[derive(Deserialize)]
struct EnvelopeFields<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    topic: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    key: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    value: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    timestamp: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ProductFields<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    seller_id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    category_id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    brand_id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    price: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    stock: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct CampaignFields<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    category_ids: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    brand_ids: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    seller_ids: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    excluded_seller_ids: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    min_price: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    max_price: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    min_stock: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    active: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    starts_at: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    ends_at: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct CategoryFields<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    parent_id: Option<&'a RawValue>,
}

/// Parses `text` as a JSON object of the shape `T`, naming `what` it is in errors.
fn parse_object<'a, T: Deserialize<'a>>(text: &'a str, what: &'static str) -> Result<T, DecodeError> {
    // Serde would also read a struct from an array, so the shape is checked first.
    if !text.trim_start().starts_with('{') {
        return match serde_json::from_str::<&RawValue>(text) {
            Ok(raw) => Err(DecodeError::NotAnObject {
                what,
                found: JsonKind::of(raw),
            }),
            Err(error) => Err(DecodeError::InvalidJson(error.to_string())),
        };
    }
    serde_json::from_str::<T>(text).map_err(|error| DecodeError::InvalidJson(error.to_string()))
}

/// Upper bound on `stock`: no physical count comes near it, and it keeps every per-pair
/// stock sum free of overflow.
pub const MAX_STOCK: u64 = u32::MAX as u64;

fn number_error(field: &str, text: &str, error: NumberError, max: String, expected: &'static str) -> DecodeError {
    match error {
        NumberError::NotANumber => DecodeError::WrongType {
            field: field.to_owned(),
            expected,
            found: JsonKind::Number,
        },
        NumberError::Negative => DecodeError::Negative {
            field: field.to_owned(),
            text: text.to_owned(),
        },
        NumberError::NotInteger => DecodeError::NotInteger {
            field: field.to_owned(),
            text: text.to_owned(),
        },
        NumberError::OutOfRange => DecodeError::OutOfRange {
            field: field.to_owned(),
            max,
            text: text.to_owned(),
        },
    }
}

fn expect_number(field: &str, raw: &RawValue, expected: &'static str) -> Result<(), DecodeError> {
    match JsonKind::of(raw) {
        JsonKind::Number => Ok(()),
        found => Err(DecodeError::WrongType {
            field: field.to_owned(),
            expected,
            found,
        }),
    }
}

const NON_NEGATIVE_INTEGER: &str = "a non-negative integer";
const NON_NEGATIVE_NUMBER: &str = "a non-negative number";

fn integer(field: &str, raw: &RawValue, max: u64) -> Result<u64, DecodeError> {
    expect_number(field, raw, NON_NEGATIVE_INTEGER)?;
    let text = raw.get();
    match number::to_integer(text) {
        Ok(value) if value <= max => Ok(value),
        Ok(_) => Err(number_error(
            field,
            text,
            NumberError::OutOfRange,
            max.to_string(),
            NON_NEGATIVE_INTEGER,
        )),
        Err(error) => Err(number_error(field, text, error, max.to_string(), NON_NEGATIVE_INTEGER)),
    }
}

fn price(field: &str, raw: &RawValue) -> Result<u64, DecodeError> {
    expect_number(field, raw, NON_NEGATIVE_NUMBER)?;
    let text = raw.get();
    number::to_scaled(text, 2).map_err(|error| number_error(field, text, error, max_price(), NON_NEGATIVE_NUMBER))
}

/// The greatest price, in SPEC's units: `u64::MAX` minor units.
fn max_price() -> String {
    format!("{}.{:02}", u64::MAX / 100, u64::MAX % 100)
}

fn required<'a>(field: &'static str, raw: Option<&'a RawValue>) -> Result<&'a RawValue, DecodeError> {
    raw.ok_or(DecodeError::MissingField(field))
}

/// An optional field: absent and `null` both mean "use the default".
fn optional(raw: Option<&RawValue>) -> Option<&RawValue> {
    raw.filter(|raw| JsonKind::of(raw) != JsonKind::Null)
}

fn id_list(field: &str, raw: Option<&RawValue>) -> Result<IdSet, DecodeError> {
    let Some(raw) = optional(raw) else {
        return Ok(IdSet::default());
    };
    let found = JsonKind::of(raw);
    if found != JsonKind::Array {
        return Err(DecodeError::WrongType {
            field: field.to_owned(),
            expected: "an array of non-negative integers",
            found,
        });
    }
    let items: Vec<&RawValue> =
        serde_json::from_str(raw.get()).map_err(|error| DecodeError::InvalidJson(error.to_string()))?;
    let mut ids = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        ids.push(integer(&format!("{field}[{index}]"), item, u64::MAX)?);
    }
    Ok(IdSet::new(ids))
}

/// Decodes a product value (the JSON object of SPEC.md); `None` is a tombstone.
pub fn decode_product(value: Option<&str>) -> Result<Option<Product>, DecodeError> {
    let Some(text) = value else { return Ok(None) };
    let fields: ProductFields = parse_object(text, "product value")?;
    Ok(Some(Product {
        seller_id: integer("seller_id", required("seller_id", fields.seller_id)?, u64::MAX)?,
        category_id: integer("category_id", required("category_id", fields.category_id)?, u64::MAX)?,
        brand_id: integer("brand_id", required("brand_id", fields.brand_id)?, u64::MAX)?,
        price_minor: price("price", required("price", fields.price)?)?,
        stock: integer("stock", required("stock", fields.stock)?, MAX_STOCK)? as u32,
    }))
}

/// A window bound: an RFC 3339 timestamp with a zone, or absent/null for no bound.
fn window_bound(field: &'static str, raw: Option<&RawValue>) -> Result<Option<EpochNanos>, DecodeError> {
    let Some(raw) = optional(raw) else { return Ok(None) };
    let found = JsonKind::of(raw);
    if found != JsonKind::String {
        return Err(DecodeError::WrongType {
            field: field.to_owned(),
            expected: "an RFC 3339 timestamp with a zone (a string)",
            found,
        });
    }
    let text: String = serde_json::from_str(raw.get()).map_err(|error| DecodeError::InvalidJson(error.to_string()))?;
    parse_rfc3339(&text)
        .map(Some)
        .map_err(|reason| DecodeError::BadTimestamp { field, text, reason })
}

/// The greatest envelope `timestamp`: Kafka's record timestamps are signed 64-bit.
pub const MAX_TIMESTAMP: u64 = i64::MAX as u64;

/// An envelope's `timestamp`: milliseconds since the Unix epoch, a non-negative integer.
/// Present, it must be one; `null` is "any other value" too (SPEC.md, "Campaign windows").
fn envelope_timestamp(raw: Option<&RawValue>) -> Result<Option<u64>, DecodeError> {
    raw.map(|raw| match JsonKind::of(raw) {
        JsonKind::Number => integer("timestamp", raw, MAX_TIMESTAMP),
        found => Err(DecodeError::WrongType {
            field: "timestamp".to_owned(),
            expected: "milliseconds since the Unix epoch (a non-negative integer)",
            found,
        }),
    })
    .transpose()
}

/// Decodes a campaign value (every field optional); `None` is a tombstone.
pub fn decode_campaign(value: Option<&str>) -> Result<Option<Campaign>, DecodeError> {
    let Some(text) = value else { return Ok(None) };
    let fields: CampaignFields = parse_object(text, "campaign value")?;
    let active = match optional(fields.active) {
        None => true,
        Some(raw) => match raw.get() {
            "true" => true,
            "false" => false,
            _ => {
                return Err(DecodeError::WrongType {
                    field: "active".to_owned(),
                    expected: "a boolean",
                    found: JsonKind::of(raw),
                })
            }
        },
    };
    Ok(Some(Campaign {
        category_ids: id_list("category_ids", fields.category_ids)?,
        brand_ids: id_list("brand_ids", fields.brand_ids)?,
        seller_ids: id_list("seller_ids", fields.seller_ids)?,
        excluded_seller_ids: id_list("excluded_seller_ids", fields.excluded_seller_ids)?,
        min_price_minor: optional(fields.min_price)
            .map(|raw| price("min_price", raw))
            .transpose()?,
        max_price_minor: optional(fields.max_price)
            .map(|raw| price("max_price", raw))
            .transpose()?,
        min_stock: optional(fields.min_stock)
            .map(|raw| integer("min_stock", raw, u64::MAX))
            .transpose()?
            .unwrap_or(0),
        active,
        window: Window {
            starts_at: window_bound("starts_at", fields.starts_at)?,
            ends_at: window_bound("ends_at", fields.ends_at)?,
        },
    }))
}

/// Decodes a category value (`parent_id` absent or null for a root); `None` is a tombstone.
pub fn decode_category(value: Option<&str>) -> Result<Option<Category>, DecodeError> {
    let Some(text) = value else { return Ok(None) };
    let fields: CategoryFields = parse_object(text, "category value")?;
    Ok(Some(Category {
        parent_id: optional(fields.parent_id)
            .map(|raw| integer("parent_id", raw, u64::MAX))
            .transpose()?,
    }))
}

/// Decodes the value of a record on `topic`; `None` (a null value) is a tombstone.
pub fn decode_value(topic: Topic, value: Option<&str>) -> Result<Change, DecodeError> {
    Ok(match topic {
        Topic::Products => Change::Product(decode_product(value)?),
        Topic::Campaigns => Change::Campaign(decode_campaign(value)?),
        Topic::Categories => Change::Category(decode_category(value)?),
    })
}

/// The id a `categories` key names: a decimal integer, ASCII digits only (no sign, no
/// spaces, no exponent), that fits 64 bits. Leading zeros name the same id.
pub fn decode_category_id(key: &str) -> Result<CategoryId, DecodeError> {
    let bad = || DecodeError::CategoryKey(key.to_owned());
    // `u64::from_str` alone would also take a leading `+`.
    if key.is_empty() || !key.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(bad());
    }
    key.parse().map_err(|_| bad())
}

/// Checks what a topic asks of its keys beyond being a non-empty string.
fn check_key(topic: Topic, key: &str) -> Result<(), DecodeError> {
    match topic {
        Topic::Products | Topic::Campaigns => Ok(()),
        Topic::Categories => decode_category_id(key).map(|_| ()),
    }
}

/// Checks a changelog key: a non-empty string.
pub fn decode_key(key: Option<&[u8]>) -> Result<String, DecodeError> {
    let bytes = key.ok_or(DecodeError::MissingKey)?;
    let key = std::str::from_utf8(bytes).map_err(|_| DecodeError::NotUtf8)?;
    if key.is_empty() {
        return Err(DecodeError::EmptyKey);
    }
    Ok(key.to_owned())
}

/// Decodes a Kafka-style record: raw key and value bytes, a null value being a tombstone.
pub fn decode_message(topic: Topic, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Record, DecodeError> {
    let key = decode_key(key)?;
    check_key(topic, &key)?;
    let value = value
        .map(|bytes| std::str::from_utf8(bytes).map_err(|_| DecodeError::NotUtf8))
        .transpose()?;
    Ok(Record {
        key,
        change: decode_value(topic, value)?,
    })
}

/// One line of the JSONL event log, split but not yet decoded: the value's raw JSON text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope<'a> {
    pub topic: Topic,
    pub key: String,
    /// `None` is a tombstone.
    pub value: Option<&'a str>,
    /// Milliseconds since the Unix epoch, when the line carries one: what moves file
    /// mode's clock, and the Kafka record's timestamp when produced.
    pub timestamp: Option<u64>,
}

/// Splits one line of the JSONL event log into topic, key and raw value. What a topic asks
/// of its key beyond a non-empty string (a category id) is checked by [`decode_envelope`].
pub fn split_envelope(line: &[u8]) -> Result<Envelope<'_>, DecodeError> {
    let text = std::str::from_utf8(line).map_err(|_| DecodeError::NotUtf8)?;
    let fields: EnvelopeFields = parse_object(text, "record")?;

    let topic_raw = fields.topic.ok_or(DecodeError::MissingTopic)?;
    let topic_name: String = match JsonKind::of(topic_raw) {
        JsonKind::String => {
            serde_json::from_str(topic_raw.get()).map_err(|e| DecodeError::InvalidJson(e.to_string()))?
        }
        found => return Err(DecodeError::TopicNotString(found)),
    };
    let topic = match topic_name.as_str() {
        "products" => Topic::Products,
        "campaigns" => Topic::Campaigns,
        "categories" => Topic::Categories,
        _ => return Err(DecodeError::UnknownTopic(topic_name)),
    };

    let key_raw = fields.key.ok_or(DecodeError::MissingKey)?;
    let key: String = match JsonKind::of(key_raw) {
        JsonKind::String => serde_json::from_str(key_raw.get()).map_err(|e| DecodeError::InvalidJson(e.to_string()))?,
        JsonKind::Null => return Err(DecodeError::MissingKey),
        found => return Err(DecodeError::KeyNotString(found)),
    };
    if key.is_empty() {
        return Err(DecodeError::EmptyKey);
    }

    let value_raw = fields.value.ok_or(DecodeError::MissingValue)?;
    let value = match JsonKind::of(value_raw) {
        JsonKind::Null => None,
        _ => Some(value_raw.get()),
    };
    let timestamp = envelope_timestamp(fields.timestamp)?;
    Ok(Envelope {
        topic,
        key,
        value,
        timestamp,
    })
}

/// A decoded line of the JSONL event log, with its timestamp if it carries one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub record: Record,
    pub timestamp: Option<u64>,
}

/// Decodes one line of the JSONL event log, keeping its `timestamp`.
pub fn decode_line(line: &[u8]) -> Result<Line, DecodeError> {
    let envelope = split_envelope(line)?;
    check_key(envelope.topic, &envelope.key)?;
    Ok(Line {
        record: Record {
            change: decode_value(envelope.topic, envelope.value)?,
            key: envelope.key,
        },
        timestamp: envelope.timestamp,
    })
}

/// Decodes one line of the JSONL event log: `{"topic": …, "key": …, "value": …}` (and
/// an optional `"timestamp"`, checked but not returned: see [`decode_line`]).
pub fn decode_envelope(line: &[u8]) -> Result<Record, DecodeError> {
    decode_line(line).map(|line| line.record)
}
