//! Runs the workload sequence on one engine and measures every phase.

#![expect(clippy::indexing_slicing, reason = "per-thread and per-phase arrays are sized by the run they describe")]

use crate::args::{Config, EngineKind};
use crate::engines::{self, disk_bytes, Engine, EngineConfig, EngineStats};
use crate::measure::{self, ProcIo};
use crate::workload::{Chooser, KeyScheme, Mix, Op, OpGen, Workload, KEY_BYTES};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicU8,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the sampler reads the op counters (throughput series, progress bar).
const TICK: Duration = Duration::from_millis(100);

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

/// Measures of one phase on one engine. The first fields are the documented JSON shape;
/// the rest are extras for diagnosis.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseResult {
    /// Engine name.
    pub engine: String,
    /// Mix name.
    pub mix: String,
    /// Workload name.
    pub workload: String,
    /// Operations completed.
    pub ops: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Latency per operation (a read-modify-write counts as one).
    pub latency_us: Latency,
    /// Key and value bytes the workload wrote or read back.
    pub user_bytes: u64,
    /// Device bytes read (/proc/self/io; for a server, the server's count; null: unknown).
    pub device_read_bytes: Option<u64>,
    /// Device bytes written (/proc/self/io net of cancelled writes, or the server's count).
    pub device_write_bytes: Option<u64>,
    /// (device read + write) / user bytes.
    pub io_amplification: f64,
    /// Bytes on disk / live user bytes at the end of the phase.
    pub space_amplification: f64,
    /// CPU time (user + sys) per operation, microseconds: of this process for in-process
    /// engines, of the server when it can be measured, else of the client (`cpu_source`).
    pub cpu_us_per_op: f64,
    /// Coefficient of variation of the throughput series.
    pub throughput_cv: f64,
    /// Seconds writers were stalled during the phase.
    pub stall_seconds: f64,
    /// Peak resident set size during the phase (whole run if the kernel cannot reset it); of
    /// the server for server engines (null: unknown).
    pub peak_rss_bytes: Option<u64>,
    /// Device bytes (read + written) per operation.
    pub device_bytes_per_op: f64,
    /// Bytes allocated under the engine's directory (or by the server) at the end of the phase.
    pub disk_bytes: Option<u64>,
    /// Bytes of the live pairs at the end of the phase.
    pub live_bytes: u64,
    /// Reads (and scan starts) that found no pair.
    pub misses: u64,
    /// The engine's own count of device bytes read (Halyard), to cross-check /proc.
    pub engine_device_read_bytes: Option<u64>,
    /// The engine's own count of device bytes written (Halyard).
    pub engine_device_write_bytes: Option<u64>,
    /// The engine's own counters (Halyard), deltas over the phase.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub engine_counters: std::collections::BTreeMap<String, u64>,
    /// The engine's own state at the end of the phase (Halyard).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub engine_gauges: std::collections::BTreeMap<String, u64>,
    /// Interval of `throughput_series`, seconds.
    pub series_interval_s: f64,
    /// Throughput per interval, ops/s.
    pub throughput_series: Vec<f64>,
    /// The longest request that ended in each second of the phase, milliseconds (second i
    /// holds those ended i to i+1 s after `started_unix_ms`): when the slow ones happened.
    pub max_latency_ms_series: Vec<f64>,
    /// When the phase's first request was issued, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Whose CPU `cpu_us_per_op` is: "process" (in-process engine), "server" or "client"
    /// (a server that cannot be measured).
    pub cpu_source: String,
    /// CPU per operation of this process alone (for a server engine: the client's cost).
    pub client_cpu_us_per_op: f64,
    /// For server engines: where the server-side figures come from, or why they are unknown.
    pub server_measures: Option<String>,
    /// Cluster runs (`--cluster`): the backup nodes' work, summed; the other figures are
    /// the primary's.
    pub roles: Option<Roles>,
    /// `--reopen-between-phases`: the open before the phase and the close after it.
    pub reopen: Option<Reopen>,
}

/// Primary and backup work of a cluster run, for one phase.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Roles {
    /// CPU (user + sys) of the backup processes per operation, microseconds.
    pub backup_cpu_us_per_op: Option<f64>,
    /// Device bytes the backup processes read.
    pub backup_device_read_bytes: Option<u64>,
    /// Device bytes the backup processes wrote.
    pub backup_device_write_bytes: Option<u64>,
    /// (backup device read + write) / user bytes.
    pub backup_io_amplification: Option<f64>,
    /// Bytes sent and received by all server processes, on client and replication sockets
    /// (docs/design.md §5: a replication byte counts at its sender and at its receiver).
    pub network_bytes: Option<u64>,
    /// network bytes / user bytes.
    pub network_amplification: Option<f64>,
    /// Replication frame bytes the primary queued to its backups (all backups).
    pub replication_bytes: Option<u64>,
    /// Of those, segment images (SSTs and medium runs) before LZ4 packing; the packed size is
    /// what `replication_bytes` counts.
    pub index_image_bytes: Option<u64>,
    /// The primary's L0 bytes at the end of the phase.
    pub primary_l0_bytes: Option<u64>,
    /// The backups' L0 bytes at the end of the phase (Send-Index keeps none).
    pub backup_l0_bytes: Option<u64>,
}

impl Roles {
    fn new(before: &EngineStats, after: &EngineStats, ops: u64, user_bytes: u64) -> Option<Roles> {
        let (b0, b1) = (before.backup.as_ref(), after.backup.as_ref());
        let (p0, p1) = (before.server.as_ref()?, after.server.as_ref()?);
        let d = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        let read = b0.zip(b1).and_then(|(a, b)| d(a.read_bytes, b.read_bytes));
        let write = b0.zip(b1).and_then(|(a, b)| d(a.write_bytes, b.write_bytes));
        let cpu = b0.zip(b1).and_then(|(a, b)| Some((b.cpu_seconds? - a.cpu_seconds?).max(0.0)));
        let total =
            |s: &EngineStats| Some(s.server.as_ref()?.net_bytes? + s.backup.as_ref().map_or(Some(0), |b| b.net_bytes)?);
        let net = d(total(before), total(after));
        let user = user_bytes.max(1) as f64;
        Some(Roles {
            backup_cpu_us_per_op: cpu.map(|c| c * 1e6 / ops.max(1) as f64),
            backup_device_read_bytes: read,
            backup_device_write_bytes: write,
            backup_io_amplification: read.zip(write).map(|(r, w)| (r + w) as f64 / user),
            network_bytes: net,
            network_amplification: net.map(|n| n as f64 / user),
            replication_bytes: d(p0.shipped_bytes, p1.shipped_bytes),
            index_image_bytes: d(p0.image_bytes, p1.image_bytes),
            primary_l0_bytes: p1.l0_bytes,
            backup_l0_bytes: b1.and_then(|b| b.l0_bytes),
        })
    }
}

/// One engine on one mix: its settings, the phases that completed and, if it failed, why.
#[derive(Clone, Debug, Serialize)]
pub struct EngineRun {
    /// Engine.
    pub engine: EngineKind,
    /// Mix name.
    pub mix: String,
    /// Settings as the engine reports them.
    pub settings: Vec<(String, String)>,
    /// Completed phases.
    pub results: Vec<PhaseResult>,
    /// The failed phase and the error.
    pub failure: Option<(String, String)>,
    /// Phases the engine cannot run faithfully, skipped, with the reason.
    pub unsupported: Vec<(String, String)>,
    /// Halyard (in process or behind a server): a numerator of the ratios.
    pub halyard: bool,
}

#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicU64);

/// Per-thread outcome of a phase.
struct Worker {
    hist: Histogram<u64>,
    /// The longest request, ns, that ended in each second since the phase started.
    slowest: Vec<u64>,
    user_bytes: u64,
    misses: u64,
    inserts: u64,
}

fn engine_dir(cfg: &Config, kind: &EngineKind, mix: &Mix) -> PathBuf {
    // Target names are URLs: no slashes or colons in a directory name.
    let clean = |s: &str| -> String { s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect() };
    cfg.dir.join(format!("{}-{}", clean(kind.name()), clean(&mix.name)))
}

/// Runs every workload of `cfg` on a fresh `kind` store. Never fails: errors end up in
/// `EngineRun::failure` with the phases completed before them.
pub fn run_engine(cfg: &Config, kind: &EngineKind, mix: &Mix) -> EngineRun {
    let mut run = EngineRun {
        engine: kind.clone(),
        mix: mix.name.clone(),
        settings: Vec::new(),
        results: Vec::new(),
        failure: None,
        unsupported: Vec::new(),
        halyard: *kind == EngineKind::Halyard,
    };
    let dir = engine_dir(cfg, kind, mix);
    let (opened, mut open_cost) = timed(|| open_fresh(cfg, kind, &dir));
    let mut engine = match opened {
        Ok(e) => e,
        Err(e) => {
            run.failure = Some(("open".into(), e));
            return run;
        }
    };
    run.settings = engine.settings();
    run.halyard |= engine.halyard_server();
    let sizes: Vec<AtomicU8> = (0..record_capacity(cfg)).map(|_| AtomicU8::new(0)).collect();
    let mut base = 0;
    for (i, &w) in cfg.workloads.iter().enumerate() {
        // Skipped rather than failed: the engine is fine, the workload has no equivalent on
        // it, and the phases after it still run.
        if let Some(why) = engine.unsupported(w) {
            if !cfg.quiet {
                eprintln!("{} {} {w}: {why}", kind.name(), mix.name);
            }
            run.unsupported.push((w.name().into(), why));
            continue;
        }
        // A phase that ran left the store open since: reopen it (a failed one ended the loop).
        if cfg.reopen && !run.results.is_empty() {
            let (opened, cost) = reopen(cfg, kind, &dir, engine, &mut run);
            engine = match opened {
                Ok(e) => e,
                Err(e) => {
                    run.failure.get_or_insert((format!("reopen before {w}"), e));
                    return finish(cfg, &dir, run);
                }
            };
            open_cost = cost;
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_phase(cfg, kind, mix, &*engine, &dir, &sizes, i, w, base)
        }));
        match r {
            Ok(Ok((mut res, new_base))) => {
                if cfg.reopen {
                    res.reopen = Some(Reopen::opened(&open_cost));
                }
                report_phase(cfg, &res);
                run.results.push(res);
                base = new_base;
            }
            Ok(Err(e)) => {
                run.failure = Some((w.name().into(), e));
                break;
            }
            Err(p) => {
                run.failure = Some((w.name().into(), format!("panicked: {}", panic_text(&*p))));
                break;
            }
        }
    }
    // Closing can fail in a broken engine too; the results are kept either way.
    if let Err(e) = close(engine, &mut run) {
        run.failure.get_or_insert(("close".into(), e));
    }
    finish(cfg, &dir, run)
}

fn report_phase(cfg: &Config, res: &PhaseResult) {
    if !cfg.quiet {
        eprintln!(
            "{} {} {}: {} ops in {:.1} s, {:.0} ops/s, I/O amp {:.2} (NaN: unknown)",
            res.engine, res.mix, res.workload, res.ops, res.seconds, res.ops_per_sec, res.io_amplification
        );
    }
}

/// Closes the engine and opens its store again; the open's cost.
fn reopen(
    cfg: &Config,
    kind: &EngineKind,
    dir: &std::path::Path,
    engine: Box<dyn Engine>,
    run: &mut EngineRun,
) -> (Result<Box<dyn Engine>, String>, Cost) {
    let closed = close(engine, run);
    timed(|| closed.and_then(|()| engines::open(kind, dir, &EngineConfig::from_config(cfg))))
}

/// Closes the engine, charging the close to the last phase when it reports reopens.
fn close(engine: Box<dyn Engine>, run: &mut EngineRun) -> Result<(), String> {
    let (closed, cost) = timed(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(engine))));
    if let Some(last) = run.results.last_mut() {
        if let Some(r) = &mut last.reopen {
            r.closed(&cost, last.ops, last.seconds);
        }
    }
    closed.map_err(|p| format!("panicked: {}", panic_text(&*p)))
}

fn finish(cfg: &Config, dir: &std::path::Path, run: EngineRun) -> EngineRun {
    if !cfg.keep {
        let _ = std::fs::remove_dir_all(dir);
    }
    run
}

/// What a piece of work outside the phases cost this process.
struct Cost {
    seconds: f64,
    io: ProcIo,
    cpu: Duration,
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Cost) {
    let (t, io, cpu) = (Instant::now(), ProcIo::now(), measure::cpu_time());
    let r = f();
    (r, Cost { seconds: t.elapsed().as_secs_f64(), io: ProcIo::now().since(&io), cpu: measure::cpu_time() - cpu })
}

/// The open before a phase and the close after it (`--reopen-between-phases`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Reopen {
    /// Seconds the open before the phase took (before the first phase: a fresh store's).
    pub open_seconds: f64,
    /// Device bytes that open read.
    pub open_read_bytes: u64,
    /// Device bytes that open wrote.
    pub open_write_bytes: u64,
    /// Seconds the close after the phase took.
    pub close_seconds: f64,
    /// Device bytes that close read.
    pub close_read_bytes: u64,
    /// Device bytes that close wrote.
    pub close_write_bytes: u64,
    /// CPU seconds of the open and the close.
    pub cpu_seconds: f64,
    /// Operations per second over open..close (the phase's operations over the open, the
    /// phase and the close).
    pub ops_per_sec_open_to_close: f64,
}

impl Reopen {
    fn opened(c: &Cost) -> Reopen {
        Reopen {
            open_seconds: c.seconds,
            open_read_bytes: c.io.read_bytes,
            open_write_bytes: c.io.write_bytes,
            cpu_seconds: c.cpu.as_secs_f64(),
            ..Reopen::default()
        }
    }

    fn closed(&mut self, c: &Cost, ops: u64, phase_seconds: f64) {
        self.close_seconds = c.seconds;
        self.close_read_bytes = c.io.read_bytes;
        self.close_write_bytes = c.io.write_bytes;
        self.cpu_seconds += c.cpu.as_secs_f64();
        self.ops_per_sec_open_to_close = ops as f64 / (self.open_seconds + phase_seconds + c.seconds).max(1e-9);
    }
}

/// Opens `kind` on an empty `dir`.
fn open_fresh(cfg: &Config, kind: &EngineKind, dir: &std::path::Path) -> Result<Box<dyn Engine>, String> {
    std::fs::remove_dir_all(dir)
        .or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) })
        .and_then(|()| std::fs::create_dir_all(dir))
        .map_err(|e| format!("cannot make a fresh {}: {e}", dir.display()))?;
    engines::open(kind, dir, &EngineConfig::from_config(cfg))
}

/// Room for every record number a phase can create: load-a's, plus per inserting run phase
/// at most ceil(ops / threads) per thread.
fn record_capacity(cfg: &Config) -> u64 {
    let per_thread = cfg.ops.div_ceil(cfg.threads as u64);
    let inserting = cfg.workloads.iter().filter(|w| w.inserts() && **w != Workload::LoadA).count() as u64;
    cfg.records + inserting * per_thread * cfg.threads as u64
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default()
}

fn progress(cfg: &Config, total: u64, label: String) -> ProgressBar {
    if cfg.quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{msg:24} [{bar:40}] {pos}/{len} {per_sec} eta {eta}") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(label);
    pb
}

/// Runs one phase; returns its result and the record count after it.
#[allow(clippy::too_many_arguments)]
fn run_phase(
    cfg: &Config,
    kind: &EngineKind,
    mix: &Mix,
    engine: &dyn Engine,
    dir: &std::path::Path,
    sizes: &[AtomicU8],
    phase: usize,
    w: Workload,
    base: u64,
) -> Result<(PhaseResult, u64), String> {
    let total = match w {
        Workload::LoadA => cfg.records,
        Workload::Verify => base,
        _ => cfg.ops,
    };
    // Load A never draws from it; its expected inserts only size a count nothing uses.
    let chooser = Chooser::new(cfg.dist_of(w), base.max(1), total * w.insert_percent() / 100);
    let gen = |t| {
        OpGen::new(cfg.seed, phase, w, mix, chooser.clone(), t, cfg.threads, base, total)
            .reading_updates(cfg.update_rmw)
    };
    let shape = Shape { keys: cfg.keys, mix };
    let pb = progress(cfg, total, format!("{} {} {}", kind.name(), mix.name, w));

    let (est0, io0, cpu0) = (engine.stats(), ProcIo::now(), measure::cpu_time());
    measure::reset_peak_rss();
    engine.begin_phase();
    let Ran { workers, samples, seconds, started, error } = run_workers(cfg.threads, engine, shape, sizes, &pb, gen);
    pb.finish_and_clear();
    let (cpu, io, est) = (measure::cpu_time() - cpu0, ProcIo::now().since(&io0), engine.stats());
    let peak_rss_bytes = measure::peak_rss();
    if let Some(e) = error {
        return Err(e);
    }
    let totals = Totals::merge(workers)?;
    let live_bytes = shape.live_bytes(sizes);
    let m = Measured::new(&est0, &est, io, cpu, peak_rss_bytes, dir);
    let new_base = match w {
        Workload::LoadA => cfg.records,
        Workload::RunD | Workload::RunE => base + totals.max_inserts * cfg.threads as u64,
        _ => base,
    };
    let raw = Raw { seconds, started, samples, cpu, est0, est, totals, live_bytes };
    Ok((phase_result(kind, mix, w, raw, m), new_base))
}

/// What [`run_workers`] saw.
struct Ran {
    workers: Vec<Result<Worker, String>>,
    /// Ops done so far, once per TICK; the last, partial tick is left out.
    samples: Vec<u64>,
    seconds: f64,
    /// When the workers started, milliseconds since the Unix epoch.
    started: u64,
    /// The first error a worker hit.
    error: Option<String>,
}

/// Runs `threads` workers (`gen(t)` makes thread t's operations) and samples their op
/// counters until they are done (throughput series and progress).
fn run_workers(
    threads: usize,
    engine: &dyn Engine,
    shape: Shape<'_>,
    sizes: &[AtomicU8],
    pb: &ProgressBar,
    gen: impl Fn(usize) -> OpGen,
) -> Ran {
    let counters: Vec<Padded> = (0..threads).map(|_| Padded::default()).collect();
    let stop = AtomicBool::new(false);
    // Each worker holds a sender; the channel disconnects the moment the last one ends, so
    // the phase's end is not rounded up to the sampler's tick.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let error: Mutex<Option<String>> = Mutex::new(None);
    let t0 = Instant::now();
    let started =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let mut samples = Vec::new();
    let mut end = t0;
    let workers: Vec<Result<Worker, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let gen = gen(t);
                let (counter, stop, error, done) = (&counters[t].0, &stop, &error, done_tx.clone());
                s.spawn(move || {
                    engines::set_bench_thread(t);
                    let r = worker(engine, gen, shape, sizes, counter, stop, t0);
                    if let Err(e) = &r {
                        stop.store(true, Relaxed);
                        error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(|| e.clone());
                    }
                    drop(done);
                    r
                })
            })
            .collect();
        drop(done_tx);
        let mut next = t0 + TICK;
        loop {
            match done_rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Err(RecvTimeoutError::Timeout) => {
                    let n: u64 = counters.iter().map(|c| c.0.load(Relaxed)).sum();
                    samples.push(n);
                    pb.set_position(n);
                    next += TICK;
                }
                Err(RecvTimeoutError::Disconnected) => break,
                Ok(()) => {}
            }
        }
        end = Instant::now();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| Err(format!("worker panicked: {}", panic_text(&*p)))))
            .collect()
    });
    let error = error.into_inner().unwrap_or_else(|p| p.into_inner());
    Ran { workers, samples, seconds: (end - t0).as_secs_f64(), started, error }
}

/// The workers of a phase, merged.
struct Totals {
    hist: Histogram<u64>,
    /// The longest request, ns, that ended in each second of the phase (all workers).
    slowest: Vec<u64>,
    user_bytes: u64,
    misses: u64,
    max_inserts: u64,
}

impl Totals {
    fn merge(workers: Vec<Result<Worker, String>>) -> Result<Totals, String> {
        let hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
        let mut t = Totals { hist, slowest: Vec::new(), user_bytes: 0, misses: 0, max_inserts: 0 };
        for wk in workers {
            let wk = wk?;
            t.hist.add(&wk.hist).map_err(|e| e.to_string())?;
            if t.slowest.len() < wk.slowest.len() {
                t.slowest.resize(wk.slowest.len(), 0);
            }
            for (a, b) in t.slowest.iter_mut().zip(&wk.slowest) {
                *a = (*a).max(*b);
            }
            t.user_bytes += wk.user_bytes;
            t.misses += wk.misses;
            t.max_inserts = t.max_inserts.max(wk.inserts);
        }
        Ok(t)
    }
}

/// What a phase measured as its workers finished, before it becomes a [`PhaseResult`].
struct Raw {
    seconds: f64,
    started: u64,
    samples: Vec<u64>,
    /// This process's CPU time over the phase.
    cpu: Duration,
    est0: EngineStats,
    est: EngineStats,
    totals: Totals,
    live_bytes: u64,
}

fn phase_result(kind: &EngineKind, mix: &Mix, w: Workload, raw: Raw, m: Measured) -> PhaseResult {
    let Raw { seconds, started, samples, cpu, est0, est, totals, live_bytes } = raw;
    let Totals { hist, slowest, user_bytes, misses, .. } = totals;
    let ops = hist.len();
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    let device = match (m.read, m.write) {
        (Some(r), Some(w)) => (r + w) as f64,
        _ => f64::NAN,
    };
    let client_cpu = cpu.as_secs_f64() * 1e6 / ops.max(1) as f64;
    let series = measure::per_second(&samples, TICK);
    let interval = if series.len() < samples.len() { 1.0 } else { TICK.as_secs_f64() };
    let delta = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
    PhaseResult {
        engine: kind.name().into(),
        mix: mix.name.clone(),
        workload: w.name().into(),
        ops,
        seconds,
        ops_per_sec: ops as f64 / seconds.max(1e-9),
        latency_us: Latency { p50: us(0.5), p99: us(0.99), p999: us(0.999), max: hist.max() as f64 / 1000.0 },
        user_bytes,
        device_read_bytes: m.read,
        device_write_bytes: m.write,
        io_amplification: device / user_bytes.max(1) as f64,
        space_amplification: m.disk.map_or(f64::NAN, |d| d as f64 / live_bytes.max(1) as f64),
        cpu_us_per_op: m.cpu_seconds.map_or(client_cpu, |c| c * 1e6 / ops.max(1) as f64),
        throughput_cv: measure::cv(&series),
        // NaN (unknown) stays NaN: f64::max would turn it into 0.
        stall_seconds: if m.stall.is_nan() { f64::NAN } else { m.stall.max(0.0) },
        peak_rss_bytes: m.peak_rss,
        device_bytes_per_op: device / ops.max(1) as f64,
        disk_bytes: m.disk,
        live_bytes,
        misses,
        engine_device_read_bytes: delta(est.device_read_bytes, est0.device_read_bytes),
        engine_device_write_bytes: delta(est.device_write_bytes, est0.device_write_bytes),
        engine_counters: est
            .counters
            .iter()
            .map(|(k, v)| (k.clone(), v.saturating_sub(est0.counters.get(k).copied().unwrap_or(0))))
            .collect(),
        engine_gauges: est.gauges.clone(),
        series_interval_s: interval,
        throughput_series: series,
        max_latency_ms_series: slowest.iter().map(|ns| *ns as f64 / 1e6).collect(),
        started_unix_ms: started,
        cpu_source: m.cpu_source.into(),
        client_cpu_us_per_op: client_cpu,
        server_measures: m.server,
        roles: if matches!(kind, EngineKind::Cluster(_)) { Roles::new(&est0, &est, ops, user_bytes) } else { None },
        reopen: None,
    }
}

/// The resource figures of a phase, from this process or from the server behind the engine.
struct Measured {
    read: Option<u64>,
    write: Option<u64>,
    /// CPU seconds to charge the phase; `None`: this process's (given apart).
    cpu_seconds: Option<f64>,
    cpu_source: &'static str,
    disk: Option<u64>,
    peak_rss: Option<u64>,
    stall: f64,
    server: Option<String>,
}

impl Measured {
    fn new(
        before: &EngineStats,
        after: &EngineStats,
        io: ProcIo,
        cpu: Duration,
        peak_rss: u64,
        dir: &std::path::Path,
    ) -> Measured {
        let stall = after.stall_seconds - before.stall_seconds;
        let (Some(s0), Some(s1)) = (&before.server, &after.server) else {
            // In process: the engine's costs are this process's.
            return Measured {
                read: Some(io.read_bytes),
                write: Some(io.write_bytes),
                cpu_seconds: Some(cpu.as_secs_f64()),
                cpu_source: "process",
                disk: Some(disk_bytes(dir)),
                peak_rss: Some(peak_rss),
                stall,
                server: None,
            };
        };
        let delta = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        let cpu_seconds = match (s0.cpu_seconds, s1.cpu_seconds) {
            (Some(a), Some(b)) => Some((b - a).max(0.0)),
            _ => None,
        };
        Measured {
            read: delta(s0.read_bytes, s1.read_bytes),
            write: delta(s0.write_bytes, s1.write_bytes),
            cpu_source: if cpu_seconds.is_some() { "server" } else { "client" },
            cpu_seconds,
            disk: s1.disk_bytes,
            peak_rss: s1.peak_rss_bytes,
            stall,
            server: Some(s1.source.clone()),
        }
    }
}

/// How record numbers become pairs: the key scheme and the mix's value sizes.
#[derive(Clone, Copy)]
struct Shape<'a> {
    keys: KeyScheme,
    mix: &'a Mix,
}

impl Shape<'_> {
    /// Bytes of the live pairs: every record written, at the size it was last written with.
    fn live_bytes(&self, sizes: &[AtomicU8]) -> u64 {
        let mut k = [0u8; KEY_BYTES];
        let pair = |(n, c): (usize, u8)| (self.keys.write(n as u64, &mut k) + self.mix.value_bytes(c - 1)) as u64;
        sizes.iter().map(|c| c.load(Relaxed) & !BUSY).enumerate().filter(|&(_, c)| c > 0).map(pair).sum()
    }
}

/// Set in a record's size while a thread writes it.
const BUSY: u8 = 0x80;

/// Marks a record busy, waiting while another thread writes it; returns its size before.
fn hold(s: &AtomicU8) -> u8 {
    loop {
        let cur = s.load(Acquire);
        if cur & BUSY == 0 && s.compare_exchange_weak(cur, cur | BUSY, Acquire, Relaxed).is_ok() {
            return cur;
        }
        std::thread::yield_now();
    }
}

/// One client thread: issues its operations, timing each.
fn worker(
    engine: &dyn Engine,
    mut gen: OpGen,
    shape: Shape<'_>,
    sizes: &[AtomicU8],
    counter: &AtomicU64,
    stop: &AtomicBool,
    t0: Instant,
) -> Result<Worker, String> {
    // 1 ns .. 1 hour at 3 significant digits.
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|e| e.to_string())?;
    let pool = gen.value_pool();
    let (mut user_bytes, mut misses, mut slowest) = (0u64, 0u64, Vec::new());
    let mut kb = [0u8; KEY_BYTES];
    let put = |gen: &mut OpGen, n: u64, cat: u8, k: &[u8]| -> Result<u64, String> {
        let len = shape.mix.value_bytes(cat);
        let off = gen.value_offset(len);
        // Two threads writing one key must record its size in the order the engine applied
        // them, or Verify reports a loss that never happened: the key is held from the put
        // until its size is recorded.
        let held = sizes.get(n as usize).map(|s| (s, hold(s)));
        let r = engine.put(k, &pool[off..off + len]);
        if let Some((s, before)) = held {
            s.store(if r.is_ok() { cat + 1 } else { before }, Release);
        }
        r?;
        Ok((k.len() + len) as u64)
    };
    let written = |n: u64| sizes.get(n as usize).map_or(0, |s| s.load(Acquire) & !BUSY);
    while let Some(op) = gen.next() {
        if stop.load(Relaxed) {
            break;
        }
        // Verify checks the records written, whatever the phases before it made.
        if matches!(op, Op::Check(n) if written(n) == 0) {
            continue;
        }
        let klen = shape.keys.write(op.record(), &mut kb);
        let k = &kb[..klen];
        let t = Instant::now();
        match op {
            // The key is issued whether or not the pair exists.
            Op::Read(_) => {
                let len = engine.get(k)?;
                misses += u64::from(len.is_none());
                user_bytes += (klen + len.unwrap_or(0)) as u64;
            }
            Op::Update(n, c) | Op::Insert(n, c) => user_bytes += put(&mut gen, n, c, k)?,
            Op::Scan(_, len) => {
                let (pairs, bytes) = engine.scan(k, len)?;
                misses += u64::from(pairs == 0);
                user_bytes += klen as u64 + bytes;
            }
            Op::ReadModifyWrite(n, c) => {
                let len = engine.get(k)?;
                misses += u64::from(len.is_none());
                user_bytes += (klen + len.unwrap_or(0)) as u64;
                user_bytes += put(&mut gen, n, c, k)?;
            }
            Op::Check(n) => {
                let len = engine.get(k)?;
                // Lost: missing, or not the value last written.
                misses += u64::from(len != Some(shape.mix.value_bytes(written(n) - 1)));
                user_bytes += (klen + len.unwrap_or(0)) as u64;
            }
        }
        // One clock read per op: its end gives both its time and its second.
        let end = Instant::now();
        let took = (end - t).as_nanos() as u64;
        hist.saturating_record(took);
        let second = (end - t0).as_secs() as usize;
        if slowest.len() <= second {
            slowest.resize(second + 1, 0);
        }
        if let Some(m) = slowest.get_mut(second) {
            *m = (*m).max(took);
        }
        counter.fetch_add(1, Relaxed);
    }
    Ok(Worker { hist, slowest, user_bytes, misses, inserts: gen.inserts })
}
