//! Sinks: where pair changes and dead letters go, and how far they are acknowledged.
//!
//! `contract` is what the job sees of a sink; every other module here is one kind of sink
//! (or a piece the bulk sinks share). [`operator::SinkOperator`] runs a sink inside the
//! dataflow: its output carries the records the sink rejected for good (as dead letters)
//! and its frontier is the acknowledged frontier, so a probe on it tells every worker
//! which times are safe (for example, whose source offsets may be committed).

pub mod auth;
pub mod bulk;
pub mod contract;
pub mod couchbase;
pub mod elasticsearch;
pub mod file_outputs;
pub mod jsonl;
pub mod kafka_dead_letter;
pub mod operator;
pub mod sorted_runs;
pub mod startup;
pub mod tls;
pub mod write_behind;
pub mod written_before;
