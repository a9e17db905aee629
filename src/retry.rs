//! Retrying with exponential backoff: one policy, configured the same way for every sink
//! and store that retries (`[sinks.*.retry]`).

use std::time::Duration;

use rand::Rng;
use serde::Deserialize;

/// `retry = { initial_ms, max_ms }`: the first delay, doubling with jitter up to the longest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// First retry delay (ms); doubling, with jitter.
    #[serde(default = "default_initial_ms")]
    pub initial_ms: u64,
    /// Longest retry delay (ms).
    #[serde(default = "default_max_ms")]
    pub max_ms: u64,
}

fn default_initial_ms() -> u64 {
    100
}

fn default_max_ms() -> u64 {
    30_000
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            initial_ms: default_initial_ms(),
            max_ms: default_max_ms(),
        }
    }
}

impl RetryConfig {
    /// The backoff, each delay at least 1 ms and the longest at least the first.
    pub fn backoff(&self) -> Backoff {
        let initial = self.initial_ms.max(1);
        Backoff {
            initial: Duration::from_millis(initial),
            max: Duration::from_millis(self.max_ms.max(initial)),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The delay before attempt `attempt` (1 for the first retry): doubling from `initial`
    /// up to `max`, then a random point in its upper half, so that many writers retrying at
    /// once spread out instead of hitting the cluster together.
    pub fn delay(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let exponent = attempt.saturating_sub(1).min(30);
        let ceiling = self.initial.saturating_mul(1 << exponent).min(self.max);
        let half = ceiling / 2;
        half + Duration::from_nanos(rng.random_range(0..=half.as_nanos().max(1) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn delays_double_up_to_the_cap_with_jitter_in_the_upper_half() {
        let backoff = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for (attempt, ceiling_ms) in [(1, 100), (2, 200), (3, 400), (5, 1600), (6, 2000), (40, 2000)] {
            for _ in 0..50 {
                let delay = backoff.delay(attempt, &mut rng).as_millis() as u64;
                assert!(
                    (ceiling_ms / 2..=ceiling_ms).contains(&delay),
                    "attempt {attempt}: {delay} ms"
                );
            }
        }
    }
}
