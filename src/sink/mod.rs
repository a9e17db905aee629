//! Sinks: where pair changes and dead letters go, and how far they are acknowledged.
//!
//! A sink receives the records of each completed logical time, in order, and reports the
//! frontier below which everything it received is durable. [`SinkOperator`] runs a sink
//! inside the dataflow: its output carries the records the sink rejected for good (as dead
//! letters) and its frontier is the acknowledged frontier, so a probe on it tells every
//! worker which times are safe (for example, whose source offsets may be committed).

pub mod bulk;
pub mod couchbase;
pub mod elasticsearch;
pub mod file_outputs;
pub mod jsonl;
pub mod kafka_dead_letter;
pub mod operator;
pub mod startup;
pub mod written_before;

use dataflows::model::Time;

pub use operator::SinkOperator;

/// A destination for the records of completed times.
pub trait Sink<R>: Send {
    /// Takes the records of one completed time, sorted; may buffer them.
    fn write(&mut self, time: Time, records: &[R]) -> anyhow::Result<()>;

    /// Every time below `upper` (every time, if `None`) has been written. Makes progress on
    /// outstanding work and returns the frontier below which all writes are acknowledged
    /// (`None`: all of them).
    fn flush(&mut self, upper: Option<Time>) -> anyhow::Result<Option<Time>>;

    /// Records the destination refused for good since the last call, as dead letters at
    /// their times. Called after `flush`; a rejected record counts as acknowledged.
    fn take_rejected(&mut self) -> Vec<(Time, crate::dead_letter::DeadLetter)> {
        Vec::new()
    }
}
