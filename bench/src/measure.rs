//! What a phase measured, and the process's memory as the kernel reports it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Phase;

/// One implementation's figures for one phase.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhaseResult {
    pub phase: Phase,
    /// Events in the timed batches.
    pub events: u64,
    /// Batches timed, and batches in the phase: a slow baseline is timed on a prefix.
    pub batches_timed: u64,
    pub batches_total: u64,
    /// Wall time of the timed batches.
    pub seconds: f64,
    pub events_per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Pair writes made in the timed batches.
    pub writes: u64,
    /// The process's peak resident memory by the end of the phase (run in a process of its
    /// own, the implementation's peak so far, workload included).
    #[serde(default)]
    pub peak_rss_bytes: u64,
    #[serde(skip)]
    latencies_ms: Vec<f64>,
}

impl PhaseResult {
    pub fn new(phase: Phase) -> Self {
        PhaseResult {
            phase,
            events: 0,
            batches_timed: 0,
            batches_total: 0,
            seconds: 0.0,
            events_per_second: 0.0,
            p50_ms: 0.0,
            p99_ms: 0.0,
            max_ms: 0.0,
            writes: 0,
            peak_rss_bytes: 0,
            latencies_ms: Vec::new(),
        }
    }

    pub fn record_batch(&mut self, events: usize, latency: Duration) {
        self.events += events as u64;
        self.batches_timed += 1;
        self.batches_total += 1;
        self.latencies_ms.push(latency.as_secs_f64() * 1e3);
    }

    pub fn record_untimed_batch(&mut self) {
        self.batches_total += 1;
    }

    /// Fixes the summary figures once the phase is over.
    pub fn finish(&mut self, seconds: f64, writes: u64) {
        self.seconds = seconds;
        self.writes = writes;
        self.events_per_second = self.events as f64 / seconds.max(1e-9);
        self.latencies_ms.sort_by(f64::total_cmp);
        self.p50_ms = percentile(&self.latencies_ms, 0.50);
        self.p99_ms = percentile(&self.latencies_ms, 0.99);
        self.max_ms = self.latencies_ms.last().copied().unwrap_or_default();
        self.peak_rss_bytes = peak_resident_bytes();
    }

    pub fn sampled(&self) -> bool {
        self.batches_timed < self.batches_total
    }
}

/// The engine's memory as its first run measured it in its own process.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Memory {
    /// Resident memory the generated workload takes, before any engine runs.
    pub workload_bytes: u64,
    /// Growth of resident memory over the engine's initial load, less the bench's copy of
    /// the pairs: the engine's state.
    pub engine_state_bytes: u64,
    pub engine_state_bytes_per_product: f64,
    /// The bench's copy of the pairs after the initial load, taken out of the state.
    pub collected_pairs_bytes: u64,
    pub peak_resident_bytes_after_engine: u64,
    pub engine_workers: usize,
}

/// The nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], quantile: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((quantile * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Resident memory now, in bytes (0 where /proc is missing).
pub fn resident_bytes() -> u64 {
    status_kib("VmRSS:") * 1024
}

/// The process's peak resident memory so far, in bytes.
pub fn peak_resident_bytes() -> u64 {
    status_kib("VmHWM:") * 1024
}

fn status_kib(field: &str) -> u64 {
    kib_field(&std::fs::read_to_string("/proc/self/status").unwrap_or_default(), field)
}

/// A `Field:   123 kB` line of a /proc file, in KiB.
pub fn kib_field(text: &str, field: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), 50.0);
        assert_eq!(percentile(&values, 0.99), 99.0);
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn memory_is_read_from_proc() {
        let before = resident_bytes();
        // Kept opaque so an optimized build cannot elide the written block.
        let block = std::hint::black_box(vec![1u8; 64 << 20]);
        let after = resident_bytes();
        assert!(after >= before + (60 << 20), "{before} -> {after}");
        assert!(peak_resident_bytes() >= after);
        drop(block);
    }
}
