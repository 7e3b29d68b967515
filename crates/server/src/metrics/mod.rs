//! Counters and latency histograms, and their encoding for prometheus-client: the node's
//! metrics are written per scrape by collectors (`http::NodeCollector`, and in cluster mode
//! [`replication::ReplicationCollector`]) with the helpers here, into one registry encoded as
//! OpenMetrics text.

#![expect(clippy::indexing_slicing, reason = "shard and bucket indexes are reduced within the fixed array sizes")]

pub mod replication;

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Latency bucket upper bounds in microseconds.
const BUCKETS_US: [u64; 12] = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10_000, 100_000, 1_000_000];

/// One thread group's counters, on cache lines of their own: counters every request updates
/// would otherwise bounce between cores.
#[derive(Default)]
#[repr(align(128))]
struct Shard {
    calls: AtomicU64,
    timed: AtomicU64,
    errors: AtomicU64,
    usec: AtomicU64,
    buckets: [AtomicU64; BUCKETS_US.len()],
}

const SHARDS: usize = 8;

fn shard_index() -> usize {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static INDEX: usize = (NEXT.fetch_add(1, Relaxed) as usize) % SHARDS;
    }
    INDEX.with(|i| *i)
}

#[derive(Default)]
pub struct CmdStats {
    shards: [Shard; SHARDS],
    /// Calls refused before they ran (wrong number of arguments): INFO's `rejected_calls`.
    rejected: AtomicU64,
    /// The counters at the last CONFIG RESETSTAT (calls, errors, timed, usec, rejected): INFO
    /// shows the counts since, while the Prometheus counters keep counting.
    base: [AtomicU64; 5],
}

/// One command's counts since the last CONFIG RESETSTAT, as INFO commandstats shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SinceReset {
    pub calls: u64,
    pub failed: u64,
    pub rejected: u64,
    /// Estimated from the sampled latencies (one call in 16 is timed).
    pub usec: u64,
}

impl CmdStats {
    /// Counts a call; `usec` is its latency when this call was sampled.
    pub fn record(&self, usec: Option<u64>, error: bool) {
        let s = &self.shards[shard_index()];
        s.calls.fetch_add(1, Relaxed);
        if error {
            s.errors.fetch_add(1, Relaxed);
        }
        if let Some(usec) = usec {
            s.timed.fetch_add(1, Relaxed);
            s.usec.fetch_add(usec, Relaxed);
            if let Some(i) = BUCKETS_US.iter().position(|&b| usec <= b) {
                s.buckets[i].fetch_add(1, Relaxed);
            }
        }
    }

    fn sum(&self, f: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        self.shards.iter().map(|s| f(s).load(Relaxed)).sum()
    }

    pub fn calls(&self) -> u64 {
        self.sum(|s| &s.calls)
    }

    pub fn errors(&self) -> u64 {
        self.sum(|s| &s.errors)
    }

    pub fn timed(&self) -> u64 {
        self.sum(|s| &s.timed)
    }

    pub fn usec(&self) -> u64 {
        self.sum(|s| &s.usec)
    }

    fn bucket(&self, i: usize) -> u64 {
        self.sum(|s| &s.buckets[i])
    }

    /// Counts a call refused before it ran.
    pub fn reject(&self) {
        self.rejected.fetch_add(1, Relaxed);
    }

    fn now(&self) -> [u64; 5] {
        [self.calls(), self.errors(), self.timed(), self.usec(), self.rejected.load(Relaxed)]
    }

    /// The counts since the last [`CmdStats::reset`].
    pub fn since_reset(&self) -> SinceReset {
        let now = self.now();
        let d = |i: usize| now[i].saturating_sub(self.base[i].load(Relaxed));
        let (calls, timed, usec) = (d(0), d(2), d(3));
        let usec = if timed == 0 { 0 } else { (usec as f64 * calls as f64 / timed as f64) as u64 };
        SinceReset { calls, failed: d(1), rejected: d(4), usec }
    }

    /// Starts INFO's counts again from zero (the Prometheus counters go on).
    pub fn reset(&self) {
        for (b, v) in self.base.iter().zip(self.now()) {
            b.store(v, Relaxed);
        }
    }
}

/// Server-wide counters.
#[derive(Default)]
pub struct Metrics {
    pub commands: BTreeMap<&'static str, CmdStats>,
    pub unknown_commands: AtomicU64,
    pub connections_total: AtomicU64,
    pub connections_rejected: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub idle_timeouts: AtomicU64,
    pub auth_failures: AtomicU64,
    /// Clients refused in protected mode (any protocol).
    pub protected_refusals: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Error replies by their code word since the last CONFIG RESETSTAT (INFO errorstats).
    pub errors: parking_lot::Mutex<BTreeMap<String, u64>>,
    /// The most memory INFO saw the store hold (`used_memory_peak`).
    pub memory_peak: AtomicU64,
    /// Connections, rejected connections, bytes in and out at the last CONFIG RESETSTAT.
    base: [AtomicU64; 4],
    /// The command count and time of the last sample of INFO's `instantaneous_ops_per_sec`,
    /// and the rate it gave.
    ops_sample: parking_lot::Mutex<Option<(std::time::Instant, u64, f64)>>,
}

/// Server-wide counts since the last CONFIG RESETSTAT, as INFO stats shows them.
#[derive(Clone, Copy, Debug, Default)]
pub struct StatsSinceReset {
    pub connections: u64,
    pub rejected_connections: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub commands: u64,
}

impl Metrics {
    pub fn new(names: &[&'static str]) -> Metrics {
        Metrics { commands: names.iter().map(|n| (*n, CmdStats::default())).collect(), ..Metrics::default() }
    }

    pub fn total_calls(&self) -> u64 {
        self.commands.values().map(CmdStats::calls).sum()
    }

    fn server_counters(&self) -> [u64; 4] {
        let load = |c: &AtomicU64| c.load(Relaxed);
        [load(&self.connections_total), load(&self.connections_rejected), load(&self.bytes_in), load(&self.bytes_out)]
    }

    /// The server-wide counts since the last [`Metrics::reset`].
    pub fn since_reset(&self) -> StatsSinceReset {
        let now = self.server_counters();
        let d = |i: usize| now[i].saturating_sub(self.base[i].load(Relaxed));
        StatsSinceReset {
            connections: d(0),
            rejected_connections: d(1),
            bytes_in: d(2),
            bytes_out: d(3),
            commands: self.commands.values().map(|c| c.since_reset().calls).sum(),
        }
    }

    /// CONFIG RESETSTAT: INFO's counts start again from zero. The Prometheus counters are
    /// not reset (they must only grow): INFO subtracts what they held at the reset.
    pub fn reset(&self) {
        for c in self.commands.values() {
            c.reset();
        }
        for (b, v) in self.base.iter().zip(self.server_counters()) {
            b.store(v, Relaxed);
        }
        self.errors.lock().clear();
        self.memory_peak.store(0, Relaxed);
        *self.ops_sample.lock() = None;
    }

    /// Counts an error reply by its code word (`ERR`, `WRONGTYPE`...) for INFO errorstats.
    pub fn count_error(&self, text: &str) {
        let code = text.split_whitespace().next().unwrap_or("ERR");
        let code: String = code.chars().take(32).collect();
        *self.errors.lock().entry(code).or_default() += 1;
    }

    /// Commands per second since the previous sample, taken at most once a second (INFO
    /// reads it; between samples it gives the last rate).
    pub fn ops_per_sec(&self) -> f64 {
        let (now, calls) = (std::time::Instant::now(), self.total_calls());
        let mut s = self.ops_sample.lock();
        match *s {
            Some((t, n, rate)) => {
                let secs = now.duration_since(t).as_secs_f64();
                if secs < 1.0 {
                    return rate;
                }
                let rate = calls.saturating_sub(n) as f64 / secs;
                *s = Some((now, calls, rate));
                rate
            }
            None => {
                *s = Some((now, calls, 0.0));
                0.0
            }
        }
    }
}

/// The process' resident memory now and at its peak (`VmRSS`, `VmHWM` of
/// `/proc/self/status`), in bytes; zeros where there is no such file.
pub fn rss_bytes() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU seconds (user, system) this process has used.
pub fn cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_utime), t(ru.ru_stime))
}

/// The `Content-Type` of [`encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry's metrics in the OpenMetrics text format, ending in `# EOF`. Collectors read
/// what they report (the engine's statistics among it) now: call from a blocking thread.
pub fn encode(registry: &Registry) -> Result<String, fmt::Error> {
    let mut o = String::with_capacity(32 << 10);
    prometheus_client::encoding::text::encode(&mut o, registry)?;
    Ok(o)
}

/// The family name of a counter whose samples are `name`: the encoder appends `_total` itself.
fn counter_family(name: &str) -> &str {
    debug_assert!(name.ends_with("_total"), "counter {name} must end in _total");
    name.strip_suffix("_total").unwrap_or(name)
}

/// A counter with one sample, `name` (ending in `_total`).
pub(crate) fn counter(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    v: impl EncodeCounterValue,
) -> fmt::Result {
    ConstCounter::new(v).encode(e.encode_descriptor(counter_family(name), help, None, MetricType::Counter)?)
}

/// A gauge with one sample.
pub(crate) fn gauge(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: impl EncodeGaugeValue) -> fmt::Result {
    ConstGauge::new(v).encode(e.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// A counter with a sample per label set; `name` ends in `_total`.
pub(crate) fn labeled_counters<L: EncodeLabelSet, V: EncodeCounterValue>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result {
    let mut m = e.encode_descriptor(counter_family(name), help, None, MetricType::Counter)?;
    for (labels, v) in samples {
        ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A gauge, or an untyped metric (`MetricType::Unknown`), with a sample per label set.
pub(crate) fn labeled_values<L: EncodeLabelSet, V: EncodeGaugeValue>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in samples {
        m.encode_family(&labels)?.encode_gauge(&v)?;
    }
    Ok(())
}

/// The connection and byte counters (bytes of both protocols: `native` holds the native
/// protocol's); `connected` is the clients connected now.
pub(crate) fn encode_connections(
    e: &mut DescriptorEncoder<'_>,
    m: &Metrics,
    connected: usize,
    native: &crate::native::NativeCounters,
) -> fmt::Result {
    let load = |c: &AtomicU64| c.load(Relaxed);
    counter(e, "halyard_connections_total", "Client connections accepted.", load(&m.connections_total))?;
    counter(
        e,
        "halyard_connections_rejected_total",
        "Connections refused over --max-clients.",
        load(&m.connections_rejected),
    )?;
    counter(
        e,
        "halyard_protocol_errors_total",
        "Malformed or oversized requests (connection closed).",
        load(&m.protocol_errors),
    )?;
    counter(e, "halyard_idle_timeouts_total", "Connections closed for idling.", load(&m.idle_timeouts))?;
    counter(
        e,
        "halyard_auth_failures_total",
        "Failed AUTH attempts (Redis and native protocol).",
        load(&m.auth_failures) + load(&native.auth_failures),
    )?;
    counter(
        e,
        "halyard_protected_mode_refusals_total",
        "Clients from beyond loopback refused because a listener bound beyond loopback has no password or cluster secret.",
        load(&m.protected_refusals),
    )?;
    counter(e, "halyard_unknown_commands_total", "Unknown commands.", load(&m.unknown_commands))?;
    counter(
        e,
        "halyard_network_received_bytes_total",
        "Bytes received from clients (RESP and native).",
        load(&m.bytes_in) + load(&native.bytes_in),
    )?;
    counter(
        e,
        "halyard_network_sent_bytes_total",
        "Bytes sent to clients (RESP and native).",
        load(&m.bytes_out) + load(&native.bytes_out),
    )?;
    gauge(e, "halyard_connected_clients", "Clients connected now.", connected as u64)
}

/// Per-command calls and errors (every command), and the latency histograms of the commands
/// called at least once.
pub(crate) fn encode_commands(e: &mut DescriptorEncoder<'_>, m: &Metrics) -> fmt::Result {
    let by_cmd = |f: fn(&CmdStats) -> u64| m.commands.iter().map(move |(n, c)| ([("cmd", *n)], f(c)));
    labeled_counters(e, "halyard_commands_total", "Commands executed, by command.", by_cmd(CmdStats::calls))?;
    labeled_counters(
        e,
        "halyard_command_errors_total",
        "Commands that replied with an error.",
        by_cmd(CmdStats::errors),
    )?;
    let mut h =
        e.encode_descriptor("halyard_command_duration_seconds", "Command latency.", None, MetricType::Histogram)?;
    for (n, c) in m.commands.iter().filter(|(_, c)| c.calls() > 0) {
        let mut buckets: Vec<(f64, u64)> =
            BUCKETS_US.iter().enumerate().map(|(i, &b)| (b as f64 / 1e6, c.bucket(i))).collect();
        let bucketed: u64 = buckets.iter().map(|b| b.1).sum();
        // Calls slower than the last bound count only here; the counters are read one by one,
        // so the count is held to the buckets' total at least.
        let count = c.timed().max(bucketed);
        buckets.push((f64::INFINITY, count - bucketed));
        let labels = [("cmd", *n)];
        h.encode_family(&labels)?.encode_histogram::<NoLabelSet>(c.usec() as f64 / 1e6, count, &buckets, None)?;
    }
    Ok(())
}

/// The native protocol's request, error and bad-frame counters.
pub(crate) fn encode_native(e: &mut DescriptorEncoder<'_>, n: &crate::native::NativeCounters) -> fmt::Result {
    counter(e, "halyard_native_requests_total", "Native protocol requests.", n.requests.load(Relaxed))?;
    counter(e, "halyard_native_errors_total", "Native protocol error replies.", n.errors.load(Relaxed))?;
    counter(
        e,
        "halyard_native_bad_frames_total",
        "Malformed native frames (connection closed).",
        n.bad_frames.load(Relaxed),
    )
}

/// CPU time, in total and per request (RESP and native) served.
pub(crate) fn encode_cpu(e: &mut DescriptorEncoder<'_>, requests: u64) -> fmt::Result {
    let (user, sys) = cpu_seconds();
    counter(e, "halyard_cpu_user_seconds_total", "User CPU time of the server process.", user)?;
    counter(e, "halyard_cpu_system_seconds_total", "System CPU time of the server process.", sys)?;
    gauge(
        e,
        "halyard_cpu_us_per_request",
        "CPU time (user+system) per request served.",
        if requests == 0 { 0.0 } else { (user + sys) * 1e6 / requests as f64 },
    )
}

/// The engine's device traffic, L0 and levels.
pub(crate) fn encode_engine_io(e: &mut DescriptorEncoder<'_>, s: &halyard_engine::Stats) -> fmt::Result {
    counter(e, "halyard_engine_device_read_bytes_total", "Bytes read from the device.", s.device_read_bytes)?;
    counter(e, "halyard_engine_device_write_bytes_total", "Bytes written to the device.", s.device_write_bytes)?;
    let by_purpose = |v: &[(&'static str, u64)]| v.iter().map(|&(k, v)| ([("purpose", k)], v)).collect::<Vec<_>>();
    labeled_values(
        e,
        "halyard_engine_device_write_bytes_by_purpose",
        "Bytes written to the device, by purpose.",
        MetricType::Unknown,
        by_purpose(&s.write_bytes_by),
    )?;
    labeled_values(
        e,
        "halyard_engine_device_read_bytes_by_purpose",
        "Bytes read from the device, by purpose.",
        MetricType::Unknown,
        by_purpose(&s.read_bytes_by),
    )?;
    counter(
        e,
        "halyard_engine_user_bytes_total",
        "Bytes of keys and values written by clients.",
        s.user_bytes_written,
    )?;
    gauge(
        e,
        "halyard_engine_io_amplification",
        "Device bytes read and written per user byte written.",
        s.io_amplification(),
    )?;
    gauge(e, "halyard_engine_l0_bytes", "Bytes in the in-memory L0.", s.l0_bytes)?;
    let by_level = |f: fn(&halyard_engine::LevelStats) -> u64| {
        s.levels.iter().enumerate().map(move |(i, l)| ([("level", i + 1)], f(l)))
    };
    labeled_values(
        e,
        "halyard_engine_level_bytes",
        "Bytes per level (stored).",
        MetricType::Gauge,
        by_level(|l| l.stored_bytes),
    )?;
    labeled_values(e, "halyard_engine_level_ssts", "SSTs per level.", MetricType::Unknown, by_level(|l| l.ssts as u64))
}

/// The engine's background work (compaction, GC), cache, space and open cost.
pub(crate) fn encode_engine_work(e: &mut DescriptorEncoder<'_>, s: &halyard_engine::Stats) -> fmt::Result {
    counter(e, "halyard_engine_stall_seconds_total", "Time writers waited for L0 space.", s.stall_seconds)?;
    counter(e, "halyard_engine_compactions_total", "Compactions completed.", s.compactions)?;
    counter(
        e,
        "halyard_engine_warmed_leaves_total",
        "Leaves compactions cached in place of the cached leaves they rewrote.",
        s.warmed_leaves,
    )?;
    counter(
        e,
        "halyard_engine_compaction_cached_bytes_total",
        "Bytes of input leaves compactions took from the cache instead of the device.",
        s.compaction_cached_bytes,
    )?;
    counter(
        e,
        "halyard_engine_l0_merge_parts_total",
        "Parts of the L0 -> L1 merges cut by key range (their parts run at once).",
        s.l0_merge_parts,
    )?;
    counter(
        e,
        "halyard_engine_l0_versions_dropped_total",
        "Superseded versions L0 dropped before compaction (no reader could see them).",
        s.l0_versions_dropped,
    )?;
    counter(e, "halyard_engine_gc_segments_total", "Large-log segments reclaimed by GC.", s.gc_segments)?;
    counter(
        e,
        "halyard_engine_gc_known_segments_total",
        "Large-log segments GC reclaimed without an index lookup per record.",
        s.gc_known_segments,
    )?;
    counter(e, "halyard_engine_gc_bytes_moved_total", "Bytes GC re-appended.", s.gc_bytes_moved)?;
    gauge(e, "halyard_engine_cache_hit_ratio", "Node and value cache hit rate.", s.cache_hit_rate())?;
    gauge(e, "halyard_engine_space_allocated_bytes", "Bytes of segments in use.", s.space_allocated_bytes)?;
    gauge(e, "halyard_engine_open_seconds", "How long the store's last open took.", s.open_seconds)?;
    gauge(e, "halyard_engine_open_read_bytes", "Device bytes the store's last open read.", s.open_read_bytes)?;
    gauge(
        e,
        "halyard_engine_partly_filled_log_segments",
        "Large-log segments left holding records in less than half of their bytes.",
        s.partly_filled_log_segments,
    )?;
    gauge(
        e,
        "halyard_engine_pinned_bytes",
        "Bloom filters and SST index nodes held in memory outside the cache.",
        s.levels.iter().map(|l| l.pinned_bytes).sum::<u64>(),
    )
}
