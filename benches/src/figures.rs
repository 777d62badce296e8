//! How the bench report and the goals write their figures: durations, spreads, sizes and
//! ratios.

use crate::measurements::Row;

pub fn duration(ns: f64) -> String {
    match ns {
        ns if ns >= 1e9 => format!("{:.2} s", ns / 1e9),
        ns if ns >= 1e6 => format!("{:.2} ms", ns / 1e6),
        ns => format!("{:.1} µs", ns / 1e3),
    }
}

pub fn spread(row: &Row) -> String {
    format!("±{:.0}%", 100.0 * row.spread_ns / row.median_ns)
}

pub fn bytes(bytes: Option<u64>) -> String {
    match bytes {
        None => "—".into(),
        Some(b) if b < 1024 => format!("{b} B"),
        Some(b) if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1u64 << 20) as f64),
        Some(b) => format!("{:.0} kB", b as f64 / 1024.0),
    }
}

/// Two decimals, or two significant digits below 0.1: a read a thousand times faster than
/// the naive path is `0.0010×`, not `0.00×`.
pub fn ratio(ours: Option<&Row>, baseline: Option<&Row>) -> String {
    match (ours, baseline) {
        (Some(ours), Some(b)) => times(ours.median_ns, b.median_ns),
        _ => "—".into(),
    }
}

/// `part` as a multiple of `whole`, written as [`ratio`] writes it; — unless both are
/// positive.
pub fn times(part: f64, whole: f64) -> String {
    if part <= 0.0 || whole <= 0.0 {
        return "—".into();
    }
    let ratio = part / whole;
    let decimals = (1 - ratio.log10().floor() as i32).max(2) as usize;
    format!("{ratio:.decimals$}×")
}

/// A byte count in full, grouped by thousands: stored sizes and WAL differ by a few bytes.
pub fn byte_count(bytes: i64) -> String {
    let digits = bytes.unsigned_abs().to_string();
    let mut grouped = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if bytes < 0 {
        format!("-{grouped}")
    } else {
        grouped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JSONB, OURS};

    fn row(level: &str, operation: &str, variant: &str, median_ns: f64) -> Row {
        Row::example(level, operation, variant, median_ns)
    }

    #[test]
    fn ratios_divide_ours_by_the_baseline() {
        let ours = row("sql", "read title", OURS, 3e6);
        assert_eq!(ratio(Some(&ours), Some(&row("sql", "read title", JSONB, 1e6))), "3.00×");
        assert_eq!(ratio(Some(&ours), None), "—");
        assert_eq!(ratio(Some(&row("sql", "read title", OURS, 1e3)), Some(&ours)), "0.00033×");
        assert_eq!(ratio(Some(&row("sql", "read title", OURS, 3e5)), Some(&ours)), "0.10×");
        assert_eq!(ratio(None, Some(&ours)), "—");
        assert_eq!(times(336e6, 1e9), "0.34×");
        assert_eq!(times(-1.0, 1.0), "—");
    }

    #[test]
    fn byte_counts_group_thousands() {
        assert_eq!(byte_count(0), "0");
        assert_eq!(byte_count(999), "999");
        assert_eq!(byte_count(1_263_104), "1,263,104");
        assert_eq!(byte_count(-4096), "-4,096");
    }
}
