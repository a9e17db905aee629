//! Which worker reads which partition: fixed by the job, never by a consumer group.
//!
//! All partitions of both topics, in a fixed order (products first, then campaigns, each
//! by partition number), are dealt to the workers in turn. Every process computes the same
//! assignment from the same metadata, so each partition has exactly one reader and no
//! rebalance can duplicate or skip a record.

use dataflows::model::Topic;

/// One partition of one of the two input topics.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId {
    pub kind: Topic,
    /// The Kafka topic name (configurable).
    pub topic: String,
    pub partition: i32,
}

/// The worker responsible for the `index`-th partition of the ordered list.
pub fn responsible_worker(index: usize, peers: usize) -> usize {
    index % peers.max(1)
}

/// The partitions `worker` reads, out of all partitions in their fixed order.
pub fn partitions_of(all: &[PartitionId], worker: usize, peers: usize) -> Vec<PartitionId> {
    let mut ordered = all.to_vec();
    ordered.sort();
    ordered
        .into_iter()
        .enumerate()
        .filter(|(index, _)| responsible_worker(*index, peers) == worker)
        .map(|(_, partition)| partition)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partitions(topic: &str, kind: Topic, count: i32) -> Vec<PartitionId> {
        (0..count)
            .map(|partition| PartitionId {
                kind,
                topic: topic.into(),
                partition,
            })
            .collect()
    }

    #[test]
    fn every_partition_has_exactly_one_worker() {
        let mut all = partitions("products", Topic::Products, 5);
        all.extend(partitions("campaigns", Topic::Campaigns, 2));
        for peers in 1..=9 {
            let mut seen: Vec<PartitionId> = (0..peers)
                .flat_map(|worker| partitions_of(&all, worker, peers))
                .collect();
            seen.sort();
            let mut expected = all.clone();
            expected.sort();
            assert_eq!(seen, expected, "peers: {peers}");
        }
        // The order does not depend on how metadata listed the partitions.
        let mut reversed = all.clone();
        reversed.reverse();
        assert_eq!(partitions_of(&all, 1, 3), partitions_of(&reversed, 1, 3));
        assert!(partitions_of(&all, 8, 9).is_empty(), "a worker may own nothing");
    }
}
