//! The statements the sink sends: one UPSERT and one DELETE per batch, values as
//! positional parameters, never spliced into the text.

use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::sink::bulk::DocumentOp;

/// `UPSERT INTO ks (KEY, VALUE) VALUES ($1, $2), ($3, $4), …` and its arguments.
pub fn upsert(keyspace: &str, ops: &[&DocumentOp]) -> (String, Value) {
    let mut statement = format!("UPSERT INTO {keyspace} (KEY, VALUE) VALUES ");
    let mut args: Vec<Value> = Vec::with_capacity(ops.len() * 2);
    for (index, op) in ops.iter().enumerate() {
        if index > 0 {
            statement.push_str(", ");
        }
        statement.push_str(&format!("(${}, ${})", 2 * index + 1, 2 * index + 2));
        args.push(json!(op.id));
        let body = op.body.as_ref().expect("an upsert has a body");
        let raw =
            RawValue::from_string(String::from_utf8_lossy(body).into_owned()).expect("the sink writes valid JSON");
        args.push(serde_json::to_value(raw).expect("valid JSON is a value"));
    }
    (statement, Value::Array(args))
}

/// `DELETE FROM ks USE KEYS $1` with the ids as one array argument.
pub fn delete(keyspace: &str, ops: &[&DocumentOp]) -> (String, Value) {
    let ids: Vec<&str> = ops.iter().map(|op| op.id.as_str()).collect();
    (format!("DELETE FROM {keyspace} USE KEYS $1"), json!([ids]))
}

/// A page of what the collection holds, by document id after `$1`, `$2` at a time.
pub fn held_page(keyspace: &str) -> String {
    format!(
        "SELECT META(d).id AS id, d.campaign_id, d.seller_id, d.eligible_products, d.eligible_stock \
         FROM {keyspace} AS d WHERE META(d).id > $1 ORDER BY META(d).id LIMIT $2"
    )
}

pub fn create_primary_index(keyspace: &str) -> String {
    format!("CREATE PRIMARY INDEX ON {keyspace}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(id: &str, body: Option<&str>) -> DocumentOp {
        DocumentOp {
            id: id.into(),
            version: 1,
            body: body.map(|b| b.as_bytes().to_vec()),
            time: 1,
        }
    }

    #[test]
    fn values_travel_as_parameters() {
        let a = op(
            "c-1:42",
            Some(r#"{"campaign_id":"c-1","seller_id":42,"eligible_products":3,"eligible_stock":40}"#),
        );
        let b = op(
            "c'; DROP:1",
            Some(r#"{"campaign_id":"c'; DROP","seller_id":1,"eligible_products":1,"eligible_stock":1}"#),
        );
        let (statement, args) = upsert("`b`.`s`.`c`", &[&a, &b]);
        assert_eq!(
            statement,
            "UPSERT INTO `b`.`s`.`c` (KEY, VALUE) VALUES ($1, $2), ($3, $4)"
        );
        assert_eq!(args[0], "c-1:42");
        assert_eq!(args[1]["eligible_stock"], 40);
        assert_eq!(args[2], "c'; DROP:1");
        let (statement, args) = delete("`b`.`s`.`c`", &[&a, &b]);
        assert_eq!(statement, "DELETE FROM `b`.`s`.`c` USE KEYS $1");
        assert_eq!(args, json!([["c-1:42", "c'; DROP:1"]]));
    }
}
