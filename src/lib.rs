//! The `eligibility` job: command line, sources, sinks, cluster start-up and metrics
//! around the pure dataflow of the `dataflows` crate.

pub mod change_log;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod compose;
pub mod config;
pub mod dead_letter;
pub mod job;
pub mod metrics;
pub mod progress;
pub mod retry;
pub mod shutdown;
pub mod sink;
pub mod source;
pub mod worker_error;
