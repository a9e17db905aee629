//! Whether a record sits on the partition its key belongs to.
//!
//! The job assumes every record of a key is in one partition (offsets order a key's
//! records only within a partition). Producers place keys with the Java clients' murmur2
//! (`eligibility produce` too); one that places them otherwise (librdkafka's default,
//! `consistent_random`, a CRC32) puts some keys on another partition, and a key written by
//! both then lives in two. Checking each record against murmur2 costs a hash of its key and
//! no state, where seeing "the same key on a second partition" would need a partition per
//! key, held for every key. A record found elsewhere is counted
//! (`eligibility_records_misplaced_total`); docs/kafka.md says what it means.

use prometheus_client::metrics::counter::Counter;

/// The partition the Java clients (and librdkafka's `murmur2_random`) give a non-empty key.
pub fn murmur2_partition(key: &[u8], partitions: i32) -> i32 {
    // Java's `Utils.toPositive(murmur2(key)) % partitions`.
    ((murmur2(key) & 0x7fff_ffff) % partitions.max(1) as u32) as i32
}

/// Kafka's `Utils.murmur2`: MurmurHash2, 32 bits, seed 0x9747b28c, little-endian words.
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut words = data.chunks_exact(4);
    for word in &mut words {
        let mut k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate().rev() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// Counts the records of one partition that murmur2 would have put elsewhere.
pub struct Placement {
    partition: i32,
    /// Partitions of the topic (the start plan's, as for the assignment).
    partitions: i32,
    misplaced: Counter,
}

impl Placement {
    pub fn new(partition: i32, partitions: i32, misplaced: Counter) -> Self {
        Placement {
            partition,
            partitions,
            misplaced,
        }
    }

    /// Counts `key` if murmur2 places it on another partition. An empty or absent key is a
    /// dead letter anyway, and has no place.
    pub fn check(&self, key: Option<&[u8]>) {
        if let Some(key) = key.filter(|key| !key.is_empty()) {
            if murmur2_partition(key, self.partitions) != self.partition {
                self.misplaced.inc();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_is_the_java_clients_hash() {
        // Kafka's UtilsTest.testMurmur2: every tail length (0 to 3 bytes) is covered.
        for (key, hash) in [
            ("21", -973932308),
            ("foobar", -790332482),
            ("a-little-bit-long-string", -985981536),
            ("a-little-bit-longer-string", -1486304829),
            ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
            ("abc", 479470107),
        ] {
            assert_eq!(murmur2(key.as_bytes()) as i32, hash, "{key}");
        }
    }

    #[test]
    fn a_record_elsewhere_than_murmur2_puts_its_key_is_counted() {
        let key = b"p-1".as_slice();
        let home = murmur2_partition(key, 6);
        let at_home = Placement::new(home, 6, Counter::default());
        at_home.check(Some(key));
        at_home.check(None);
        at_home.check(Some(b""));
        assert_eq!(at_home.misplaced.get(), 0);
        let elsewhere = Placement::new((home + 1) % 6, 6, Counter::default());
        elsewhere.check(Some(key));
        assert_eq!(elsewhere.misplaced.get(), 1);
    }
}
