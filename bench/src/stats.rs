//! Samples and their summaries: medians and p99 of latencies, rates of byte counts.

use std::time::{Duration, Instant};

/// Latencies of one operation, in the order they were taken.
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples(Vec<Duration>);

impl Samples {
    /// Wraps durations already measured (e.g. by the Python client).
    pub(crate) fn from_durations(d: Vec<Duration>) -> Self {
        Samples(d)
    }

    /// Runs `op` `warmup` times unmeasured, then `n` times measured.
    pub(crate) fn measure<E>(
        warmup: usize,
        n: usize,
        mut op: impl FnMut() -> Result<(), E>,
    ) -> Result<Self, E> {
        for _ in 0..warmup {
            op()?;
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            op()?;
            out.push(t.elapsed());
        }
        Ok(Samples(out))
    }

    /// The async form of [`Samples::measure`].
    pub(crate) async fn measure_async<E, F>(
        warmup: usize,
        n: usize,
        mut op: impl FnMut() -> F,
    ) -> Result<Self, E>
    where
        F: Future<Output = Result<(), E>>,
    {
        for _ in 0..warmup {
            op().await?;
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            op().await?;
            out.push(t.elapsed());
        }
        Ok(Samples(out))
    }

    /// Runs the async `op` and then each of `floors`, in turn, `warmup` rounds unmeasured
    /// and `n` measured: the figure and its floors take turns call by call, so whatever
    /// slows the machine for a while (a disk busy with another tenant's writes, a
    /// neighbour's build) slows them alike instead of landing on one of them.
    pub(crate) async fn alternate<F>(
        warmup: usize,
        n: usize,
        mut op: impl FnMut() -> F,
        floors: &mut [&mut dyn FnMut() -> std::io::Result<()>],
    ) -> anyhow::Result<(Self, Vec<Self>)>
    where
        F: Future<Output = anyhow::Result<()>>,
    {
        let mut out = Samples(Vec::with_capacity(n));
        let mut floor_out: Vec<Samples> = floors.iter().map(|_| Samples(Vec::with_capacity(n))).collect();
        for round in 0..warmup + n {
            let t = Instant::now();
            op().await?;
            let took = t.elapsed();
            if round >= warmup {
                out.0.push(took);
            }
            for (floor, samples) in floors.iter_mut().zip(&mut floor_out) {
                let t = Instant::now();
                floor()?;
                let took = t.elapsed();
                if round >= warmup {
                    samples.0.push(took);
                }
            }
        }
        Ok((out, floor_out))
    }

    /// The `q`-quantile (0.5: median), nearest rank.
    pub(crate) fn quantile(&self, q: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let mut v = self.0.clone();
        v.sort_unstable();
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "q is in 0..=1, so the rank is a small non-negative whole number"
        )]
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }

    /// Median.
    pub(crate) fn p50(&self) -> Duration {
        self.quantile(0.5)
    }

    /// 99th percentile.
    pub(crate) fn p99(&self) -> Duration {
        self.quantile(0.99)
    }
}

/// A duration for humans: µs under 10 ms, ms with one decimal under 10 s, else s.
pub(crate) fn fmt_dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 {
        format!("{us:.0} µs")
    } else if us < 10_000_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// Bytes per second for humans, in MiB/s.
pub(crate) fn fmt_rate(bytes: u64, d: Duration) -> String {
    format!("{:.0} MiB/s", rate_mib(bytes, d))
}

/// MiB per second.
pub(crate) fn rate_mib(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / d.as_secs_f64().max(1e-9)
}

/// A byte count for humans.
pub(crate) fn fmt_bytes(n: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if n >= 1 << 30 {
        format!("{:.2} GiB", n as f64 / (MIB * 1024.0))
    } else if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / MIB)
    } else {
        format!("{:.0} KiB", n as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_nearest_rank() {
        let s = Samples((1..=100).map(Duration::from_micros).collect());
        assert_eq!(s.p50(), Duration::from_micros(50));
        assert_eq!(s.p99(), Duration::from_micros(99));
        assert_eq!(Samples(vec![Duration::from_micros(7)]).p99(), Duration::from_micros(7));
        assert_eq!(Samples::default().p50(), Duration::ZERO);
    }

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(fmt_dur(Duration::from_micros(42)), "42 µs");
        assert_eq!(fmt_dur(Duration::from_micros(12_340)), "12.3 ms");
        assert_eq!(fmt_dur(Duration::from_secs(12)), "12.00 s");
    }
}
