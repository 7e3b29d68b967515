//! Process-wide measures: device I/O from /proc/self/io, CPU time from getrusage, peak RSS,
//! and the per-interval throughput series.
//!
//! These count the whole process, background engine threads included, which is the point:
//! compactions and GC are part of what an operation costs. Engines run one after another,
//! so each phase's deltas belong to one engine.

use std::time::Duration;

/// Device bytes of this process so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcIo {
    /// Bytes read from the device (`read_bytes`).
    pub read_bytes: u64,
    /// Bytes written to the device: `write_bytes - cancelled_write_bytes`, since a dirty page
    /// truncated before writeback (a deleted RocksDB WAL) never reaches the device.
    pub write_bytes: u64,
}

impl ProcIo {
    /// Reads /proc/self/io; zeros where it is unavailable.
    pub fn now() -> ProcIo {
        let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        let field = |name: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        ProcIo {
            read_bytes: field("read_bytes"),
            write_bytes: field("write_bytes").saturating_sub(field("cancelled_write_bytes")),
        }
    }

    /// Bytes since `earlier`. Cancelled writes may exceed the writes of an interval (a file
    /// written in an earlier phase is deleted in this one), so differences saturate at 0.
    pub fn since(&self, earlier: &ProcIo) -> ProcIo {
        ProcIo {
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
        }
    }
}

/// User + system CPU time of the process so far.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Resets the kernel's peak-RSS mark (VmHWM) so that the next [`peak_rss`] covers one phase.
/// Returns false where /proc/self/clear_refs is not writable; peaks then span the process.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Peak resident set size in bytes (VmHWM), falling back to getrusage's ru_maxrss.
pub fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(kb) = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    {
        return kb * 1024;
    }
    // SAFETY: as in cpu_time.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    ru.ru_maxrss as u64 * 1024
}

/// Mean and coefficient of variation (stddev / mean) of a series; 0 for fewer than 2 points.
pub fn cv(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    if mean == 0.0 {
        return 0.0;
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
    var.sqrt() / mean
}

/// Throughput per interval (ops/s) from cumulative op counts sampled every `tick`.
/// Whole seconds when the phase lasted at least two; otherwise the ticks themselves, so a
/// short phase still gets a stability figure (noisier, and documented as such).
pub fn per_second(samples: &[u64], tick: Duration) -> Vec<f64> {
    let per_sec = (Duration::from_secs(1).as_nanos() / tick.as_nanos().max(1)).max(1) as usize;
    let step = if samples.len() > 2 * per_sec { per_sec } else { 1 };
    let secs = tick.as_secs_f64() * step as f64;
    let mut prev = 0;
    samples
        .iter()
        .skip(step - 1)
        .step_by(step)
        .map(|&c| {
            let r = (c - prev) as f64 / secs;
            prev = c;
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_measures_move() {
        let io = ProcIo::now();
        let t0 = cpu_time();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(cpu_time() >= t0);
        assert!(peak_rss() > 0);
        let later = ProcIo::now();
        assert!(later.since(&io).read_bytes < u64::MAX);
    }

    #[test]
    fn cv_and_rates() {
        assert_eq!(cv(&[5.0]), 0.0);
        assert_eq!(cv(&[4.0, 4.0, 4.0]), 0.0);
        assert!((cv(&[1.0, 3.0]) - 0.5).abs() < 1e-9);
        let tick = Duration::from_millis(100);
        // 100 ops per tick for 5 s: 50 ticks, whole seconds of 1000 ops/s.
        let s: Vec<u64> = (1..=50).map(|i| i * 100).collect();
        assert_eq!(per_second(&s, tick), vec![1000.0; 5]);
        // A short phase keeps its ticks.
        assert_eq!(per_second(&[100, 200, 300], tick).len(), 3);
    }
}
