//! The metrics endpoint: `GET /metrics` (Prometheus text) and `GET /health`.
//!
//! `/health` (readiness) answers 200 when every component is healthy and 503 otherwise,
//! with a JSON body naming each component and, for an unhealthy one, why. `/health/live`
//! (liveness) answers 503 only when the worker loop has stopped going round.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use anyhow::{anyhow, Context};
use tiny_http::{Header, Response, Server};

use super::Metrics;

/// A worker loop that has not gone round for this long is stuck.
const LIVENESS_WINDOW: std::time::Duration = std::time::Duration::from_secs(120);

/// Serves the endpoint on a background thread; returns the address it listens on.
pub fn serve(listen: &str, metrics: Arc<Metrics>) -> anyhow::Result<std::net::SocketAddr> {
    let server = Server::http(listen).map_err(|error| anyhow!("cannot listen on {listen} for metrics: {error}"))?;
    let address = server
        .server_addr()
        .to_ip()
        .context("the metrics endpoint has no IP address")?;
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            for request in server.incoming_requests() {
                let response = respond(request.url(), &metrics);
                if let Err(error) = request.respond(response) {
                    tracing::debug!(%error, "metrics client went away");
                }
            }
        })
        .context("cannot start the metrics thread")?;
    tracing::info!(%address, "serving /metrics and /health");
    Ok(address)
}

fn respond(url: &str, metrics: &Metrics) -> Response<std::io::Cursor<Vec<u8>>> {
    let header = |value: &str| Header::from_bytes("Content-Type", value).expect("a valid header");
    match url {
        "/metrics" => Response::from_string(metrics.encode())
            .with_header(header("application/openmetrics-text; version=1.0.0; charset=utf-8")),
        "/health" => {
            let (healthy, components) = metrics.health.report();
            let body: serde_json::Map<String, serde_json::Value> = components
                .into_iter()
                .map(|(name, status)| {
                    let since = status
                        .since
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_secs())
                        .unwrap_or(0);
                    let value = serde_json::json!({"healthy": status.healthy, "reason": status.reason, "since": since});
                    (name, value)
                })
                .collect();
            let body = serde_json::json!({"healthy": healthy, "components": body}).to_string();
            Response::from_string(body)
                .with_status_code(if healthy { 200 } else { 503 })
                .with_header(header("application/json"))
        }
        // Liveness, not readiness: a sink or broker outage must not restart the cluster.
        "/health/live" => match metrics.alive(LIVENESS_WINDOW) {
            true => Response::from_string("alive\n"),
            false => Response::from_string("the worker loop has not gone round for too long\n").with_status_code(503),
        },
        _ => Response::from_string("not found: try /metrics, /health or /health/live\n").with_status_code(404),
    }
}
