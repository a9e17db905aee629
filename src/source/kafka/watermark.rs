//! The high watermark librdkafka last saw for a partition, without asking the broker.
//!
//! Every fetch answer carries each partition's high watermark and librdkafka caches it;
//! reading the cache costs a lock, not a request, so the source can check after every poll
//! how many records wait beyond what it has read. rust-rdkafka offers only the variant
//! that asks the broker (`fetch_watermarks`, a blocking round trip).

use std::ffi::CStr;

use rdkafka::bindings::{rd_kafka_get_watermark_offsets, rd_kafka_resp_err_t};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

/// The cached high watermark of `topic`/`partition`, or `None` before the first fetch
/// answer for it (or for a partition this client does not know).
pub fn cached_high_watermark<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &CStr,
    partition: i32,
) -> Option<i64> {
    let (mut low, mut high) = (-1_i64, -1_i64);
    // SAFETY: the client pointer lives as long as `consumer`; `topic` is NUL-terminated and
    // only read during the call; `low` and `high` are valid for writes.
    let error = unsafe {
        rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    // librdkafka reports an unknown high watermark as a negative logical offset.
    (error == rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}
