//! Waiting for a sink's destination at start-up.

use std::future::Future;
use std::time::Duration;

use crate::metrics::Metrics;

/// Runs `attempt` until it succeeds, pausing longer each time (up to 10 s), with `component`
/// unhealthy and the reason logged meanwhile. Gives up once a shutdown is requested.
pub async fn until_ready<T, F, Fut>(component: &str, what: &str, metrics: &Metrics, mut attempt: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let mut delay = Duration::from_millis(200);
    loop {
        match attempt().await {
            Ok(value) => {
                metrics.health.set_healthy(component);
                return Ok(value);
            }
            Err(error) if crate::shutdown::requested() => return Err(error.context(format!("cannot {what}"))),
            Err(error) => {
                metrics
                    .health
                    .set_unhealthy(component, format!("cannot {what}: {error:#}"));
                tracing::warn!(component, error = %format!("{error:#}"), retry_in_ms = delay.as_millis() as u64, "cannot {what} yet");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}
