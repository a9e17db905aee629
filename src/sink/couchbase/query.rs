//! A client of the Couchbase Query service REST API (`POST /query/service`).
//!
//! Requests are JSON: `statement`, positional `args`, `timeout`, and for reads
//! `scan_consistency`. Answers carry `status` (`success`, `errors`, `timeout`, `fatal`, …),
//! `errors` (`code`, `msg`), `results` and `metrics` (`mutationCount`, …).
//!
//! What an error means, from the Query service's documented codes:
//!
//! | code / status | meaning | kind |
//! |---|---|---|
//! | status `timeout`, 1080 | statement timed out | temporary |
//! | 1196, 1199 | throttled / rejected by limits | temporary |
//! | 1201 | request queue full | temporary |
//! | 1202, 1203 | client disconnected, slow client | temporary |
//! | 5000 | internal error (node failing over, index moving) | temporary |
//! | 12009 with "temporary" or "timeout" in the message | KV temporary failure in DML | temporary |
//! | HTTP 429, 5xx, connection errors | overload, unavailable | temporary |
//! | 10000–10999, HTTP 401/403 | authentication, authorisation | blocking |
//! | 12003, 12004, 12016, 12021 | keyspace, index or scope missing | blocking |
//! | anything else (3000–4999 parse and plan errors, 12009 "value too large", …) | the request is refused | permanent |
//!
//! Temporary errors are retried with backoff; blocking ones too, while the sink reports
//! itself unhealthy; permanent ones send the documents to the dead-letter output.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use super::config::{CouchbaseConfig, SECTION};
use crate::sink::auth::Credentials;
use crate::sink::contract::SinkError;
use crate::sink::tls::Trust;

/// One problem the Query service reported.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct QueryError {
    pub code: u64,
    #[serde(default)]
    pub msg: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct QueryResponse {
    pub status: String,
    #[serde(default)]
    pub errors: Vec<QueryError>,
    #[serde(default)]
    pub results: Vec<Value>,
    #[serde(default)]
    pub metrics: Value,
}

/// Why a statement did not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryFailure {
    Temporary(String),
    Blocking(String),
    Permanent { code: String, reason: String },
}

impl QueryFailure {
    pub fn reason(&self) -> &str {
        match self {
            QueryFailure::Temporary(reason) | QueryFailure::Blocking(reason) => reason,
            QueryFailure::Permanent { reason, .. } => reason,
        }
    }
}

/// What the errors of an answer mean. The service's error codes decide; the HTTP status
/// only when the answer carries none (a proxy's 503, say).
pub fn classify(http_status: u16, status: &str, errors: &[QueryError]) -> QueryFailure {
    let described = errors
        .iter()
        .map(|e| format!("{} {}", e.code, e.msg))
        .collect::<Vec<_>>()
        .join("; ");
    let reason = format!("HTTP {http_status}, status {status}: {described}");
    let blocking = |e: &QueryError| (10000..11000).contains(&e.code) || matches!(e.code, 12003 | 12004 | 12016 | 12021);
    let temporary = |e: &QueryError| {
        let msg = e.msg.to_ascii_lowercase();
        matches!(e.code, 1080 | 1196 | 1199 | 1201 | 1202 | 1203 | 5000)
            || (e.code == 12009 && (msg.contains("temporary") || msg.contains("timeout") || msg.contains("timed out")))
    };
    if matches!(http_status, 401 | 403) || errors.iter().any(blocking) {
        return QueryFailure::Blocking(reason);
    }
    if status == "timeout" || errors.iter().any(temporary) {
        return QueryFailure::Temporary(reason);
    }
    if errors.is_empty() && (http_status == 429 || http_status >= 500) {
        return QueryFailure::Temporary(reason);
    }
    let code = errors
        .first()
        .map_or_else(|| format!("http_{http_status}"), |e| format!("query_{}", e.code));
    QueryFailure::Permanent { code, reason }
}

pub struct QueryClient {
    http: reqwest::Client,
    url: String,
    credentials: Option<(String, String)>,
    timeout: Duration,
}

impl QueryClient {
    pub fn new(config: &CouchbaseConfig) -> Result<Self, SinkError> {
        let timeout = Duration::from_millis(config.timeout_ms);
        let mut builder = reqwest::Client::builder()
            .timeout(timeout + Duration::from_secs(5))
            .no_proxy();
        builder = match config.client.tls.trust()? {
            Trust::System => builder,
            Trust::Any => builder.danger_accept_invalid_certs(true),
            Trust::Ca(pem) => builder.add_root_certificate(
                reqwest::Certificate::from_pem(&pem).map_err(|error| SinkError::Config(error.to_string()))?,
            ),
        };
        let credentials = match config.client.auth.credentials(SECTION)? {
            None => None,
            Some(Credentials::Basic { username, password }) => Some((username, password)),
            Some(Credentials::ApiKey(_)) => {
                return Err(SinkError::Config(format!(
                    "{SECTION}.auth.api_key_env: the Query service takes a user and password"
                )))
            }
        };
        Ok(QueryClient {
            http: builder
                .build()
                .map_err(|error| SinkError::Config(format!("cannot build the Couchbase HTTP client: {error}")))?,
            url: format!("{}/query/service", config.url.trim_end_matches('/')),
            credentials,
            timeout,
        })
    }

    /// Runs one statement with positional `args` (`$1`, `$2`, …).
    pub async fn execute(
        &self,
        statement: &str,
        args: Value,
        scan_consistency: Option<&str>,
    ) -> Result<QueryResponse, QueryFailure> {
        let mut body = json!({
            "statement": statement,
            "args": args,
            "timeout": format!("{}ms", self.timeout.as_millis()),
        });
        if let Some(consistency) = scan_consistency {
            body["scan_consistency"] = json!(consistency);
        }
        let mut request = self.http.post(&self.url).json(&body);
        if let Some((user, password)) = &self.credentials {
            request = request.basic_auth(user, Some(password));
        }
        let response = request
            .send()
            .await
            .map_err(|error| QueryFailure::Temporary(format!("cannot reach the Query service: {error}")))?;
        let http_status = response.status().as_u16();
        let text = response
            .text()
            .await
            .map_err(|error| QueryFailure::Temporary(format!("unreadable answer: {error}")))?;
        match serde_json::from_str::<QueryResponse>(&text) {
            Ok(answer) if answer.status == "success" && (200..300).contains(&http_status) => Ok(answer),
            Ok(answer) => Err(classify(http_status, &answer.status, &answer.errors)),
            Err(_) => {
                let snippet: String = text.chars().take(300).collect();
                let failure = classify(http_status, "unreadable", &[]);
                Err(match failure {
                    QueryFailure::Permanent { code, .. } => QueryFailure::Permanent {
                        code,
                        reason: format!("HTTP {http_status}, unreadable answer: {snippet}"),
                    },
                    other => other,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(code: u64, msg: &str) -> Vec<QueryError> {
        vec![QueryError { code, msg: msg.into() }]
    }

    #[test]
    fn documented_errors_are_classified() {
        assert!(matches!(
            classify(200, "timeout", &error(1080, "Timeout 30s exceeded")),
            QueryFailure::Temporary(_)
        ));
        for code in [1196, 1199, 1201, 1202, 1203, 5000] {
            assert!(
                matches!(classify(200, "errors", &error(code, "x")), QueryFailure::Temporary(_)),
                "{code}"
            );
        }
        assert!(matches!(classify(503, "errors", &[]), QueryFailure::Temporary(_)));
        // The code decides, not the HTTP status the service sent with it.
        assert!(matches!(
            classify(500, "errors", &error(12009, "cause: Value too large")),
            QueryFailure::Permanent { .. }
        ));
        assert!(matches!(
            classify(500, "errors", &error(4300, "The index #primary already exists.")),
            QueryFailure::Permanent { .. }
        ));
        assert!(matches!(classify(200, "errors", &error(12009, "DML Error, possible causes include CAS mismatch or concurrent modificationFailed to perform UPSERT - cause: Temporary failure")), QueryFailure::Temporary(_)));
        assert!(matches!(
            classify(401, "errors", &error(10000, "Authentication Failure")),
            QueryFailure::Blocking(_)
        ));
        assert!(matches!(
            classify(200, "errors", &error(12003, "Keyspace not found")),
            QueryFailure::Blocking(_)
        ));
        assert_eq!(
            classify(200, "errors", &error(12009, "DML Error - cause: Value too large")),
            QueryFailure::Permanent {
                code: "query_12009".into(),
                reason: "HTTP 200, status errors: 12009 DML Error - cause: Value too large".into()
            }
        );
        assert!(matches!(
            classify(400, "fatal", &error(3000, "syntax error")),
            QueryFailure::Permanent { .. }
        ));
    }
}
