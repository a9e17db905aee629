//! A model of the Couchbase Query service's REST API, for the Couchbase sink's tests.
//!
//! No Couchbase server can run on these machines, so the tests run against this: an HTTP
//! server that speaks the documented request and response format of `POST /query/service`
//! (JSON body with `statement`, positional `args`, `timeout`, `scan_consistency`; answers
//! with `requestID`, `results`, `status`, `errors` of `code` and `msg`, and `metrics` with
//! `mutationCount` and friends), applies the statements the sink sends (UPSERT … VALUES,
//! DELETE … USE KEYS, the keyset SELECT, CREATE PRIMARY INDEX) to an in-memory map, checks
//! basic authentication, and can inject the documented temporary errors.
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// An error to answer instead of executing a data-changing statement.
#[derive(Clone, Debug)]
pub struct Injected {
    pub http_status: u16,
    pub status: &'static str,
    pub code: u64,
    pub msg: &'static str,
}

impl Injected {
    pub fn timeout() -> Self {
        Injected {
            http_status: 500,
            status: "timeout",
            code: 1080,
            msg: "Timeout 30000ms exceeded",
        }
    }
    pub fn queue_full() -> Self {
        Injected {
            http_status: 429,
            status: "errors",
            code: 1201,
            msg: "Request queue full",
        }
    }
    pub fn temporary_failure() -> Self {
        Injected {
            http_status: 500,
            status: "errors",
            code: 12009,
            msg: "DML Error, possible causes include concurrent modification. Failed to perform UPSERT - cause: Temporary failure",
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Recorded {
    pub statement: String,
    pub documents: usize,
}

#[derive(Default)]
pub struct ModelState {
    pub documents: BTreeMap<String, Value>,
    /// Writes (upserts and deletes) per document id.
    pub writes: BTreeMap<String, usize>,
    pub requests: Vec<Recorded>,
    pub inject: VecDeque<Injected>,
    pub injected: usize,
    /// Ids the model refuses as "value too large" (a permanent, per-document error).
    pub poison: Vec<String>,
    pub primary_index: bool,
    pub keyspace: String,
    pub credentials: (String, String),
}

pub struct QueryServiceModel {
    pub port: u16,
    pub state: Arc<Mutex<ModelState>>,
}

fn success(results: Vec<Value>, mutations: usize) -> (u16, Value) {
    let size: usize = results.iter().map(|r| r.to_string().len()).sum();
    (
        200,
        json!({
            "requestID": format!("{:032x}", rand_id()),
            "signature": {"*": "*"},
            "results": results.clone(),
            "status": "success",
            "metrics": {"elapsedTime": "1.2ms", "executionTime": "1.1ms", "resultCount": results.len(),
                        "resultSize": size, "mutationCount": mutations, "errorCount": 0}
        }),
    )
}

fn failure(http_status: u16, status: &str, code: u64, msg: &str) -> (u16, Value) {
    (
        http_status,
        json!({
            "requestID": format!("{:032x}", rand_id()),
            "errors": [{"code": code, "msg": msg}],
            "status": status,
            "metrics": {"elapsedTime": "0.3ms", "executionTime": "0.2ms", "resultCount": 0, "resultSize": 0, "errorCount": 1}
        }),
    )
}

fn rand_id() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// `$n` placeholders in order of appearance.
fn placeholders(text: &str) -> Vec<usize> {
    let mut found = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' {
            let start = i + 1;
            let mut end = start;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            if let Ok(n) = text[start..end].parse() {
                found.push(n);
            }
            i = end;
        } else {
            i += 1;
        }
    }
    found
}

impl ModelState {
    fn execute(&mut self, statement: &str, args: &[Value]) -> (u16, Value) {
        let upsert_prefix = format!("UPSERT INTO {} (KEY, VALUE) VALUES ", self.keyspace);
        let delete_statement = format!("DELETE FROM {} USE KEYS $1", self.keyspace);
        let select_prefix =
            "SELECT META(d).id AS id, d.campaign_id, d.seller_id, d.eligible_products, d.eligible_stock FROM ";
        let dml = statement.starts_with("UPSERT") || statement.starts_with("DELETE");
        if dml {
            if let Some(injected) = self.inject.pop_front() {
                self.injected += 1;
                return failure(injected.http_status, injected.status, injected.code, injected.msg);
            }
        }
        if let Some(values) = statement.strip_prefix(&upsert_prefix) {
            let slots = placeholders(values);
            if slots.is_empty() || slots.len() % 2 != 0 || slots.iter().any(|n| *n == 0 || *n > args.len()) {
                return failure(
                    400,
                    "fatal",
                    3000,
                    "syntax error - placeholders do not match the arguments",
                );
            }
            let pairs: Vec<(String, Value)> = slots
                .chunks(2)
                .map(|slot| {
                    (
                        args[slot[0] - 1].as_str().unwrap_or_default().to_owned(),
                        args[slot[1] - 1].clone(),
                    )
                })
                .collect();
            if let Some((id, _)) = pairs.iter().find(|(id, _)| self.poison.contains(id)) {
                return failure(500, "errors", 12009, &format!("DML Error, possible causes include CAS mismatch. Failed to perform UPSERT on key {id} - cause: Value too large"));
            }
            for (id, value) in &pairs {
                if !value.is_object() || id.is_empty() {
                    return failure(500, "errors", 5070, "Cannot UPSERT non-string key or non-object value");
                }
            }
            self.requests.push(Recorded {
                statement: "UPSERT".into(),
                documents: pairs.len(),
            });
            for (id, value) in pairs.iter().cloned() {
                *self.writes.entry(id.clone()).or_default() += 1;
                self.documents.insert(id, value);
            }
            return success(Vec::new(), pairs.len());
        }
        if statement == delete_statement {
            let Some(keys) = args.first().and_then(Value::as_array) else {
                return failure(500, "errors", 5000, "USE KEYS needs an array of keys");
            };
            let mut mutations = 0;
            for key in keys {
                let id = key.as_str().unwrap_or_default().to_owned();
                *self.writes.entry(id.clone()).or_default() += 1;
                mutations += usize::from(self.documents.remove(&id).is_some());
            }
            self.requests.push(Recorded {
                statement: "DELETE".into(),
                documents: keys.len(),
            });
            return success(Vec::new(), mutations);
        }
        if let Some(rest) = statement.strip_prefix(select_prefix) {
            if rest
                != format!(
                    "{} AS d WHERE META(d).id > $1 ORDER BY META(d).id LIMIT $2",
                    self.keyspace
                )
            {
                return failure(500, "errors", 12003, "Keyspace not found in CB datastore");
            }
            if !self.primary_index {
                return failure(
                    500,
                    "errors",
                    4000,
                    "No index available on keyspace that matches your query.",
                );
            }
            let after = args.first().and_then(Value::as_str).unwrap_or_default().to_owned();
            let limit = args.get(1).and_then(Value::as_u64).unwrap_or(0) as usize;
            let results = self
                .documents
                .range::<String, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
                .take(limit)
                .map(|(id, doc)| {
                    let mut row = doc.clone();
                    row["id"] = json!(id);
                    row
                })
                .collect();
            return success(results, 0);
        }
        if statement == format!("CREATE PRIMARY INDEX ON {}", self.keyspace) {
            if self.primary_index {
                return failure(500, "errors", 4300, "The index #primary already exists.");
            }
            self.primary_index = true;
            return success(Vec::new(), 0);
        }
        if statement.contains('`') && !statement.contains(&self.keyspace) {
            return failure(500, "errors", 12003, "Keyspace not found in CB datastore");
        }
        failure(400, "fatal", 3000, "syntax error")
    }
}

impl QueryServiceModel {
    /// Serves `keyspace` on a free loopback port, for `user`:`password`.
    pub fn start(keyspace: &str, user: &str, password: &str) -> Self {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let port = server.server_addr().to_ip().unwrap().port();
        let state = Arc::new(Mutex::new(ModelState {
            keyspace: keyspace.to_owned(),
            credentials: (user.to_owned(), password.to_owned()),
            ..ModelState::default()
        }));
        let shared = state.clone();
        std::thread::spawn(move || {
            for mut request in server.incoming_requests() {
                let expected_auth = {
                    use base64::Engine;
                    let (user, password) = &shared.lock().unwrap().credentials;
                    format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
                    )
                };
                let authorized = request
                    .headers()
                    .iter()
                    .any(|h| h.field.equiv("Authorization") && h.value.as_str() == expected_auth);
                let (status, body) =
                    if request.url() != "/query/service" || request.method() != &tiny_http::Method::Post {
                        failure(404, "fatal", 1000, "not found")
                    } else if !authorized {
                        failure(401, "fatal", 10000, "Authentication Failure")
                    } else {
                        let mut text = String::new();
                        let _ = std::io::Read::read_to_string(request.as_reader(), &mut text);
                        match serde_json::from_str::<Value>(&text) {
                            Ok(body) => {
                                let statement = body["statement"].as_str().unwrap_or_default().to_owned();
                                let args = body["args"].as_array().cloned().unwrap_or_default();
                                shared.lock().unwrap().execute(&statement, &args)
                            }
                            Err(_) => failure(400, "fatal", 1040, "Error processing the request body"),
                        }
                    };
                let header = tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
                let _ = request.respond(
                    tiny_http::Response::from_string(body.to_string())
                        .with_status_code(status)
                        .with_header(header),
                );
            }
        });
        QueryServiceModel { port, state }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}
