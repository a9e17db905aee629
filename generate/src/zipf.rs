//! A Zipf-like sampler over `1..=n` by inverse CDF: exact, deterministic, O(log n) a draw.

use rand::Rng;

pub struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    /// Item `k` (1-based) has weight `1 / k^exponent`.
    pub fn new(n: u64, exponent: f64) -> Self {
        let n = n.max(1);
        let mut cumulative = Vec::with_capacity(n as usize);
        let mut total = 0.0;
        for k in 1..=n {
            total += 1.0 / (k as f64).powf(exponent);
            cumulative.push(total);
        }
        for value in &mut cumulative {
            *value /= total;
        }
        Zipf { cumulative }
    }

    /// A 0-based rank: 0 is the most popular item.
    pub fn sample<R: Rng>(&self, rng: &mut R) -> u64 {
        let u: f64 = rng.random();
        let rank = self.cumulative.partition_point(|c| *c < u);
        rank.min(self.cumulative.len() - 1) as u64
    }

    /// The share of all draws that goes to rank 0.
    pub fn top_share(&self) -> f64 {
        self.cumulative[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn popular_items_come_first_and_counts_follow_the_weights() {
        let zipf = Zipf::new(100, 1.0);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut counts = [0u32; 100];
        for _ in 0..100_000 {
            counts[zipf.sample(&mut rng) as usize] += 1;
        }
        // Weight of rank 0 is twice that of rank 1 and ten times that of rank 9.
        let ratio = f64::from(counts[0]) / f64::from(counts[1]);
        assert!((1.8..2.2).contains(&ratio), "{ratio}");
        let ratio = f64::from(counts[0]) / f64::from(counts[9]);
        assert!((8.5..11.5).contains(&ratio), "{ratio}");
        assert!((zipf.top_share() - 0.1928).abs() < 0.001);
    }
}
