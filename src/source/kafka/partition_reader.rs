//! One partition's queue, read a batch of messages per call.
//!
//! rust-rdkafka's `PartitionQueue::poll` hands out one message per call, and each call reads
//! the clock three times (its own poll deadline, and librdkafka's poll-interval bookkeeping
//! on entry and exit): `clock_gettime` was 6.5% of a rebuild's reading on the worker thread
//! (docs/benchmarks.md). librdkafka's `rd_kafka_consume_batch_queue` does that bookkeeping
//! once per batch and takes the queue's lock once per message, as a single poll does.
//!
//! The queues are split before the partitions are assigned ([`assign_with_queues`]): an
//! assignment at an absolute offset starts fetching at once, and whatever is fetched before
//! a partition's queue is split lands on the consumer's own queue, out of the reader's
//! sight. A queue the application forwards itself (librdkafka's `RD_KAFKA_Q_F_FWD_APP`)
//! keeps that forwarding when the fetch starts, so split first, nothing goes astray.

use std::ffi::{c_void, CStr, CString};
use std::ptr::NonNull;
use std::sync::Arc;

use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{OwnedHeaders, OwnedMessage, Timestamp};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, TopicPartitionList};

use crate::source::SourceError;

/// What a read gives, in the partition's order.
pub enum Read<'a> {
    Message(RawMessage<'a>),
    /// The partition's end (`enable.partition.eof`): every record so far was given.
    End,
    Error(KafkaError),
}

/// A partition's own queue, split from the consumer's (its messages come only here).
pub struct PartitionReader<C: ConsumerContext + 'static> {
    queue: NonNull<rdsys::rd_kafka_queue_t>,
    /// The queue lives inside the client: kept alive until the queue is destroyed.
    _consumer: Arc<BaseConsumer<C>>,
    /// Double boxed: librdkafka holds a thin pointer to it until the callback is unset.
    nonempty: Option<Box<Box<dyn Fn() + Send + Sync>>>,
    batch: Vec<*mut rdsys::rd_kafka_message_t>,
}

// SAFETY: a librdkafka queue may be used from any thread; the reader is used by one at a time.
unsafe impl<C: ConsumerContext + 'static> Send for PartitionReader<C> {}

impl<C: ConsumerContext + 'static> PartitionReader<C> {
    /// Splits `topic`/`partition`'s queue from the consumer's, before or after its
    /// assignment (librdkafka makes the partition's queue if it has none yet); `None` for a
    /// topic name librdkafka cannot take. Use [`assign_with_queues`] to assign.
    fn split(consumer: &Arc<BaseConsumer<C>>, topic: &str, partition: i32) -> Option<Self> {
        let name = CString::new(topic).ok()?;
        // SAFETY: the client pointer is valid while `consumer` lives; the queue returned is
        // a new reference, destroyed in `drop`.
        let queue =
            unsafe { rdsys::rd_kafka_queue_get_partition(consumer.client().native_ptr(), name.as_ptr(), partition) };
        let queue = NonNull::new(queue)?;
        // SAFETY: `queue` is valid; forwarding to nothing keeps its messages here.
        unsafe { rdsys::rd_kafka_queue_forward(queue.as_ptr(), std::ptr::null_mut()) };
        Some(PartitionReader {
            queue,
            _consumer: consumer.clone(),
            nonempty: None,
            batch: Vec::new(),
        })
    }

    /// Calls `wake` whenever the queue becomes non-empty.
    pub fn set_nonempty_callback(&mut self, wake: impl Fn() + Send + Sync + 'static) {
        unsafe extern "C" fn nonempty(_: *mut rdsys::rd_kafka_t, opaque: *mut c_void) {
            // SAFETY: `opaque` points at the reader's boxed callback, alive until unset.
            let wake = unsafe { &*(opaque as *const Box<dyn Fn() + Send + Sync>) };
            wake();
        }
        let wake: Box<Box<dyn Fn() + Send + Sync>> = Box::new(Box::new(wake));
        // SAFETY: the box outlives the registration: it is replaced only after a new
        // registration, and `drop` unsets the callback before it goes.
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(
                self.queue.as_ptr(),
                Some(nonempty),
                &*wake as *const Box<dyn Fn() + Send + Sync> as *mut c_void,
            )
        };
        self.nonempty = Some(wake);
    }

    /// Takes up to `max` ready messages, ends and errors, without waiting, and gives each to
    /// `each` in order; returns how many it took. Each message is released once `each`
    /// returns.
    pub fn read(&mut self, max: usize, mut each: impl FnMut(Read<'_>)) -> usize {
        self.batch.clear();
        self.batch.reserve(max);
        // SAFETY: the array has room for `max` pointers; librdkafka fills the first `taken`.
        let taken =
            unsafe { rdsys::rd_kafka_consume_batch_queue(self.queue.as_ptr(), 0, self.batch.as_mut_ptr(), max) };
        let taken = usize::try_from(taken).unwrap_or(0);
        // SAFETY: librdkafka wrote `taken` valid message pointers.
        unsafe { self.batch.set_len(taken) };
        for &message in &self.batch {
            // SAFETY: valid until destroyed below, after `each` is done with it.
            let native = unsafe { &*message };
            let read = match native.err {
                rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => Read::Message(RawMessage { native }),
                rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__PARTITION_EOF => Read::End,
                code => Read::Error(KafkaError::MessageConsumption(RDKafkaErrorCode::from(code))),
            };
            each(read);
            // SAFETY: each message is destroyed once, after its last use.
            unsafe { rdsys::rd_kafka_message_destroy(message) };
        }
        self.batch.clear();
        taken
    }
}

impl<C: ConsumerContext + 'static> Drop for PartitionReader<C> {
    fn drop(&mut self) {
        // SAFETY: the queue is valid; the callback is unset before its box is dropped, and
        // the queue reference is released while the client (`_consumer`) still lives.
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(self.queue.as_ptr(), None, std::ptr::null_mut());
            rdsys::rd_kafka_queue_destroy(self.queue.as_ptr());
        }
    }
}

/// Assigns `assignment` to `consumer` with a reader for each of its partitions, in the
/// list's order: every queue is split before the assignment, so that no record fetched
/// right after it reaches the consumer's own queue instead.
pub fn assign_with_queues<C: ConsumerContext + 'static>(
    consumer: &Arc<BaseConsumer<C>>,
    assignment: &TopicPartitionList,
) -> Result<Vec<PartitionReader<C>>, SourceError> {
    assign_with_queues_then(consumer, assignment, || ())
}

/// [`assign_with_queues`], calling `after_assigning` as soon as the assignment is made: a
/// test that waits there sees any record fetched before a queue was split.
pub fn assign_with_queues_then<C: ConsumerContext + 'static>(
    consumer: &Arc<BaseConsumer<C>>,
    assignment: &TopicPartitionList,
    after_assigning: impl FnOnce(),
) -> Result<Vec<PartitionReader<C>>, SourceError> {
    let readers = assignment
        .elements()
        .iter()
        .map(|element| {
            PartitionReader::split(consumer, element.topic(), element.partition()).ok_or_else(|| {
                SourceError::Config(format!(
                    "cannot open the queue of {}/{}",
                    element.topic(),
                    element.partition()
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    consumer
        .assign(assignment)
        .map_err(SourceError::kafka("assign the partitions"))?;
    after_assigning();
    Ok(readers)
}

/// A message of a batch, borrowed until the batch's next message.
pub struct RawMessage<'a> {
    native: &'a rdsys::rd_kafka_message_t,
}

impl RawMessage<'_> {
    /// An owned copy, to keep past the read.
    pub fn detach(&self) -> OwnedMessage {
        OwnedMessage::new(
            self.payload().map(<[u8]>::to_vec),
            self.key().map(<[u8]>::to_vec),
            self.topic().to_owned(),
            self.timestamp(),
            self.partition(),
            self.offset(),
            None,
        )
    }
}

/// `len` bytes at `ptr`, if any.
///
/// # Safety
/// `ptr` must be null or point at `len` bytes that live as long as `'a`.
unsafe fn bytes<'a>(ptr: *const c_void, len: usize) -> Option<&'a [u8]> {
    // SAFETY: as the caller promises.
    (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

impl Message for RawMessage<'_> {
    type Headers = OwnedHeaders;

    fn key(&self) -> Option<&[u8]> {
        // SAFETY: librdkafka's key and its length, alive as long as the message.
        unsafe { bytes(self.native.key, self.native.key_len) }
    }

    fn payload(&self) -> Option<&[u8]> {
        // SAFETY: librdkafka's payload and its length, alive as long as the message.
        unsafe { bytes(self.native.payload, self.native.len) }
    }

    unsafe fn payload_mut(&mut self) -> Option<&mut [u8]> {
        None
    }

    fn topic(&self) -> &str {
        // SAFETY: a message's topic handle lives as long as the message; its name is a
        // NUL-terminated string owned by the handle.
        let name = unsafe { CStr::from_ptr(rdsys::rd_kafka_topic_name(self.native.rkt)) };
        name.to_str().unwrap_or_default()
    }

    fn partition(&self) -> i32 {
        self.native.partition
    }

    fn offset(&self) -> i64 {
        self.native.offset
    }

    fn timestamp(&self) -> Timestamp {
        let mut kind = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: the message is valid; librdkafka writes the kind.
        let millis = unsafe { rdsys::rd_kafka_message_timestamp(self.native, &mut kind) };
        match kind {
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_CREATE_TIME => Timestamp::CreateTime(millis),
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => Timestamp::LogAppendTime(millis),
            _ => Timestamp::NotAvailable,
        }
    }

    fn headers(&self) -> Option<&OwnedHeaders> {
        None
    }
}
