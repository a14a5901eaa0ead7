//! The one table every run prints: a row per figure, its floor or peer beside it.

use std::time::Duration;

use crate::stats::{Samples, fmt_dur};

/// One line of the table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// What was measured.
    pub(crate) figure: String,
    /// The measurement (p50 for latencies).
    pub(crate) value: String,
    /// p99, where there is one.
    pub(crate) p99: String,
    /// What it is compared with, and that figure.
    pub(crate) against: String,
    /// The comparison as a ratio or difference.
    pub(crate) ratio: String,
}

impl Row {
    /// A latency row: `s` next to `floor` (label, samples), with ratio and difference.
    pub(crate) fn latency(figure: impl Into<String>, s: &Samples, floor: Option<(&str, &Samples)>) -> Row {
        let (against, ratio) = match floor {
            Some((label, f)) => (
                format!("{label}: {} (p99 {})", fmt_dur(f.p50()), fmt_dur(f.p99())),
                compare(s.p50(), f.p50()),
            ),
            None => (String::new(), String::new()),
        };
        Row { figure: figure.into(), value: fmt_dur(s.p50()), p99: fmt_dur(s.p99()), against, ratio }
    }

    /// A row with free-form cells.
    pub(crate) fn plain(
        figure: impl Into<String>,
        value: impl Into<String>,
        against: impl Into<String>,
        ratio: impl Into<String>,
    ) -> Row {
        Row {
            figure: figure.into(),
            value: value.into(),
            p99: String::new(),
            against: against.into(),
            ratio: ratio.into(),
        }
    }

    /// A row for something that could not be measured, and why.
    pub(crate) fn missing(figure: impl Into<String>, why: impl Into<String>) -> Row {
        Row::plain(figure, "not measured", why, "")
    }
}

/// `a` against `b`: "2.10x, +123 µs".
pub(crate) fn compare(a: Duration, b: Duration) -> String {
    let ratio = a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    let diff = a.as_secs_f64() - b.as_secs_f64();
    let sign = if diff < 0.0 { "-" } else { "+" };
    format!("{ratio:.2}x, {sign}{}", fmt_dur(Duration::from_secs_f64(diff.abs())))
}

/// A section heading and its rows, as markdown.
pub(crate) fn markdown(sections: &[(String, Vec<Row>)]) -> String {
    let mut out = String::from("| Figure | atoll p50 / value | p99 | Floor or peer (same run) | Ratio |\n");
    out.push_str("|---|---|---|---|---|\n");
    for (title, rows) in sections {
        out.push_str(&format!("| **{title}** | | | | |\n"));
        for r in rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                cell(&r.figure),
                cell(&r.value),
                cell(&r.p99),
                cell(&r.against),
                cell(&r.ratio)
            ));
        }
    }
    out
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_gives_ratio_and_signed_difference() {
        assert_eq!(compare(Duration::from_micros(300), Duration::from_micros(100)), "3.00x, +200 µs");
        assert_eq!(compare(Duration::from_micros(50), Duration::from_micros(100)), "0.50x, -50 µs");
    }

    #[test]
    fn cells_cannot_break_the_table() {
        let t = markdown(&[("s".into(), vec![Row::plain("a|b", "1\n2", "", "")])]);
        assert!(t.contains("| a\\|b | 1 2 |"), "{t}");
    }
}
