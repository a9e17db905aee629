//! How the tables write their figures; a leaf, so every table can use it.

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

pub fn format_ratio(ratio: f64) -> String {
    if ratio >= 100.0 {
        format!("{ratio:.0}×")
    } else if ratio >= 10.0 {
        format!("{ratio:.1}×")
    } else {
        format!("{ratio:.2}×")
    }
}
