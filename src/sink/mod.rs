//! Sinks: where pair changes and dead letters go, and how far they are acknowledged.
//!
//! A sink receives the records of each completed logical time, in order, and reports the
//! frontier below which everything it received is durable. [`sink_operator`] runs a sink
//! inside the dataflow: its output carries no data, only that acknowledged frontier, so a
//! probe on it tells every worker which times are safe (for example, whose source offsets
//! may be committed).

pub mod file_outputs;
pub mod jsonl;
pub mod kafka_dead_letter;
pub mod operator;
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
}

/// Several sinks as one: a time is acknowledged once every sink has acknowledged it.
pub struct FanOut<R> {
    sinks: Vec<Box<dyn Sink<R>>>,
}

impl<R> FanOut<R> {
    pub fn new(sinks: Vec<Box<dyn Sink<R>>>) -> Self {
        FanOut { sinks }
    }
}

impl<R> Sink<R> for FanOut<R> {
    fn write(&mut self, time: Time, records: &[R]) -> anyhow::Result<()> {
        self.sinks
            .iter_mut()
            .try_for_each(|sink| sink.write(time, records))
    }

    fn flush(&mut self, upper: Option<Time>) -> anyhow::Result<Option<Time>> {
        let mut acknowledged = None;
        for sink in &mut self.sinks {
            acknowledged = match (acknowledged, sink.flush(upper)?) {
                (Some(a), Some(b)) => Some(Time::min(a, b)),
                (a, b) => a.or(b),
            };
        }
        Ok(acknowledged)
    }
}
