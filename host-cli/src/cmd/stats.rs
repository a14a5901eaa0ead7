//! `atoll stats [NAME...]`: one reading of what sandboxes use, as a table or JSON; a thin
//! caller of [`crate::sandbox::metrics`].

use std::fmt::Write as _;

use anyhow::Result;

use super::Ctx;
use crate::output::human_bytes;
use crate::sandbox::metrics::{Metrics, metrics};

/// Prints the metrics of the sandboxes named (all when none is).
pub(crate) async fn stats(ctx: &Ctx, names: &[String]) -> Result<u8> {
    let all = metrics(names).await?;
    if ctx.out.json {
        ctx.out.json(&all)?;
        return Ok(0);
    }
    if all.is_empty() {
        eprintln!("atoll: no sandboxes; make one with `atoll create`");
        return Ok(0);
    }
    let mut text = format!(
        "{:<20} {:<8} {:>7} {:>10} {:>23} {:>6} {:>10} {:>21} {:>9}\n",
        "NAME",
        "STATE",
        "CPU %",
        "HOST CPU %",
        "MEM USAGE / LIMIT",
        "MEM %",
        "DISK USED",
        "NET RX / TX",
        "UPTIME"
    );
    let percent = |p: Option<f64>| p.map_or("-".into(), |c| format!("{c:.1}%"));
    for m in &all {
        let _ = writeln!(
            text,
            "{:<20} {:<8} {:>7} {:>10} {:>23} {:>6} {:>10} {:>21} {:>9}",
            m.name,
            m.state,
            percent(m.cpu_percent),
            percent(m.host_cpu_percent),
            format!(
                "{} / {}",
                m.memory_used_bytes.map_or("-".into(), human_bytes),
                human_bytes(m.memory_limit_bytes)
            ),
            memory_percent(m),
            m.disk_used_bytes.map_or("-".into(), human_bytes),
            match (m.net_rx_bytes, m.net_tx_bytes) {
                (Some(rx), Some(tx)) => format!("{} / {}", human_bytes(rx), human_bytes(tx)),
                _ => "-".into(),
            },
            uptime(m.uptime_secs)
        );
    }
    ctx.out.text(text.trim_end())?;
    Ok(0)
}

fn memory_percent(m: &Metrics) -> String {
    match m.memory_used_bytes {
        Some(used) if m.memory_limit_bytes > 0 => {
            format!("{:.1}%", used as f64 * 100.0 / m.memory_limit_bytes as f64)
        }
        _ => "-".into(),
    }
}

/// `42s`, `5m12s`, `3h04m`, `2d05h`.
fn uptime(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        s => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn uptimes_read_like_docker() {
        assert_eq!(super::uptime(42), "42s");
        assert_eq!(super::uptime(312), "5m12s");
        assert_eq!(super::uptime(3 * 3600 + 240), "3h04m");
        assert_eq!(super::uptime(2 * 86_400 + 5 * 3600), "2d05h");
    }
}
