//! INFO's text: Redis' sections and field names (those clients, exporters and Redis' own tests
//! read), filled from what Halyard measures, and a `halyard` section of the store's own.
//!
//! Where Halyard has no such thing the field says what it is in Halyard: no RDB or AOF (every
//! write goes to the store's log, `halyard_sync` says how soon it is durable), no eviction
//! (`maxmemory:0`, `noeviction`), no lazy expiry counter (`expired_keys:0`). With no allocator
//! statistics, `used_memory` is the process' resident memory (as `used_memory_rss`, so the
//! fragmentation ratio is 1), its peak the most INFO saw since the last CONFIG RESETSTAT
//! (within the process' resident peak); `halyard_store_memory` is what the store holds in memory
//! (cache, L0, pinned filters and index nodes, bypass slots).

use crate::metrics::{cpu_seconds, rss_bytes};
use crate::state::Shared;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

/// Every section, in order (`all` and `everything`).
const ALL: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "commandstats",
    "errorstats",
    "cluster",
    "keyspace",
    "halyard",
];

/// The sections of [`ALL`] that INFO with no argument (or `default`) leaves out.
const NOT_DEFAULT: &[&str] = &["commandstats"];

/// The sections INFO with no argument gives.
fn default_sections() -> Vec<&'static str> {
    ALL.iter().copied().filter(|s| !NOT_DEFAULT.contains(s)).collect()
}

/// Which of [`ALL`] the arguments (lower case, none: the default sections) ask for. Unknown
/// names ask for nothing, as in Redis.
fn wanted(args: &[String]) -> Vec<&'static str> {
    if args.is_empty() {
        return default_sections();
    }
    let has = |s: &str| args.iter().any(|a| a == s);
    let every = has("all") || has("everything");
    ALL.iter().copied().filter(|s| every || (has("default") && !NOT_DEFAULT.contains(s)) || has(s)).collect()
}

/// INFO's text for `args` (section names, lower case).
pub fn info(sh: &Shared, args: &[String]) -> String {
    let mut o = String::new();
    for s in wanted(args) {
        let _ = match s {
            "server" => server(sh, &mut o),
            "clients" => clients(sh, &mut o),
            "memory" => memory(sh, &mut o),
            "persistence" => persistence(sh, &mut o),
            "stats" => stats(sh, &mut o),
            "replication" => replication(sh, &mut o),
            "cpu" => cpu(&mut o),
            "commandstats" => commandstats(sh, &mut o),
            "errorstats" => errorstats(sh, &mut o),
            "cluster" => write!(o, "# Cluster\r\ncluster_enabled:{}\r\n", u8::from(sh.cluster.get().is_some())),
            "keyspace" => keyspace(sh, &mut o),
            _ => halyard(sh, &mut o),
        };
        o.push_str("\r\n");
    }
    o
}

fn unix_now() -> std::time::Duration {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
}

fn server(sh: &Shared, o: &mut String) -> std::fmt::Result {
    let up = sh.started.elapsed().as_secs();
    let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default();
    write!(
        o,
        "# Server\r\nredis_version:7.0.0\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_build_id:0\r\nhalyard_version:{}\r\nredis_mode:standalone\r\nos:{}\r\narch_bits:64\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{}\r\nuptime_in_seconds:{up}\r\nuptime_in_days:{}\r\nhz:10\r\nexecutable:{exe}\r\nconfig_file:\r\n",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::process::id(),
        sh.settings.run_id,
        sh.settings.port.load(Relaxed),
        unix_now().as_micros(),
        up / 86_400,
    )
}

fn clients(sh: &Shared, o: &mut String) -> std::fmt::Result {
    write!(
        o,
        "# Clients\r\nconnected_clients:{}\r\ncluster_connections:0\r\nmaxclients:{}\r\nblocked_clients:{}\r\ntracking_clients:0\r\npubsub_clients:0\r\n",
        sh.connected.load(Relaxed),
        sh.settings.max_clients.load(Relaxed),
        sh.waiters.blocked(),
    )
}

/// Bytes as Redis' `*_human` fields give them (`1.50M`).
pub fn human(bytes: u64) -> String {
    let units = ["K", "M", "G", "T", "P"];
    let mut v = bytes as f64;
    if v < 1024.0 {
        return format!("{bytes}B");
    }
    let mut unit = "K";
    for u in units {
        v /= 1024.0;
        unit = u;
        if v < 1024.0 {
            break;
        }
    }
    format!("{v:.2}{unit}")
}

fn memory(sh: &Shared, o: &mut String) -> std::fmt::Result {
    let s = sh.ks.db.stats();
    let pinned: u64 = s.levels.iter().map(|l| l.pinned_bytes).sum();
    let store = s.cache_bytes + s.l0_bytes + pinned + s.bypass_bytes;
    let (rss, rss_peak) = rss_bytes();
    let peak = sh.metrics.memory_peak.fetch_max(rss, Relaxed).max(rss).min(rss_peak.max(rss));
    write!(
        o,
        "# Memory\r\nused_memory:{rss}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\nused_memory_rss_human:{}\r\nused_memory_peak:{peak}\r\nused_memory_peak_human:{}\r\nhalyard_store_memory:{store}\r\nhalyard_cache_bytes:{}\r\nhalyard_l0_bytes:{}\r\nmaxmemory:0\r\nmaxmemory_human:0B\r\nmaxmemory_policy:noeviction\r\nmem_fragmentation_ratio:1.00\r\nmem_allocator:libc\r\nnumber_of_cached_scripts:{}\r\n",
        human(rss),
        human(rss),
        human(peak),
        s.cache_bytes,
        s.l0_bytes,
        sh.scripts.bodies.lock().len(),
    )
}

fn persistence(sh: &Shared, o: &mut String) -> std::fmt::Result {
    let sync = match sh.ks.db.options().sync {
        halyard_engine::SyncMode::None => "none",
        halyard_engine::SyncMode::Group => "group",
        halyard_engine::SyncMode::Always => "always",
    };
    write!(
        o,
        "# Persistence\r\nloading:0\r\nasync_loading:0\r\nrdb_changes_since_last_save:0\r\nrdb_bgsave_in_progress:0\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:ok\r\naof_enabled:0\r\naof_rewrite_in_progress:0\r\nhalyard_sync:{sync}\r\nhalyard_syncs:{}\r\n",
        unix_now().as_secs(),
        sh.ks.db.stats().syncs,
    )
}

fn stats(sh: &Shared, o: &mut String) -> std::fmt::Result {
    let m = &sh.metrics;
    let since = m.since_reset();
    write!(
        o,
        "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nrejected_connections:{}\r\nexpired_keys:0\r\nevicted_keys:0\r\npubsub_channels:0\r\npubsub_patterns:0\r\ntotal_error_replies:{}\r\n",
        since.connections,
        since.commands,
        m.ops_per_sec().round() as u64,
        since.bytes_in,
        since.bytes_out,
        since.rejected_connections,
        m.errors.lock().values().sum::<u64>(),
    )
}

fn replication(sh: &Shared, o: &mut String) -> std::fmt::Result {
    let offset: u64 = sh.ks.db.regions().iter().filter(|r| !r.backup).map(|r| r.lsn).sum();
    let mut lines = String::new();
    let mut n = 0;
    if let Some(c) = sh.cluster.get() {
        for region in c.led_regions() {
            for l in c.shipper.links(region) {
                let state = if l.is_live() { "online" } else { "wait_bgsave" };
                let _ =
                    write!(lines, "slave{n}:node={},region={region},state={state},offset={}\r\n", l.node, l.acked());
                n += 1;
            }
        }
    }
    write!(
        o,
        "# Replication\r\nrole:master\r\nconnected_slaves:{n}\r\n{lines}master_failover_state:no-failover\r\nmaster_replid:{}\r\nmaster_repl_offset:{offset}\r\n",
        sh.settings.run_id
    )
}

fn cpu(o: &mut String) -> std::fmt::Result {
    let (user, sys) = cpu_seconds();
    write!(
        o,
        "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:0.000000\r\nused_cpu_user_children:0.000000\r\n"
    )
}

/// Per command since the last CONFIG RESETSTAT. `usec` is estimated from the sampled
/// latencies (one call in 16 per connection is timed).
fn commandstats(sh: &Shared, o: &mut String) -> std::fmt::Result {
    o.push_str("# Commandstats\r\n");
    for (name, c) in &sh.metrics.commands {
        let s = c.since_reset();
        if s.calls == 0 && s.rejected == 0 {
            continue;
        }
        let per = if s.calls == 0 { 0.0 } else { s.usec as f64 / s.calls as f64 };
        write!(
            o,
            "cmdstat_{name}:calls={},usec={},usec_per_call={per:.2},rejected_calls={},failed_calls={}\r\n",
            s.calls, s.usec, s.rejected, s.failed
        )?;
    }
    Ok(())
}

fn errorstats(sh: &Shared, o: &mut String) -> std::fmt::Result {
    o.push_str("# Errorstats\r\n");
    for (code, n) in sh.metrics.errors.lock().iter() {
        write!(o, "errorstat_{code}:count={n}\r\n")?;
    }
    Ok(())
}

fn keyspace(sh: &Shared, o: &mut String) -> std::fmt::Result {
    o.push_str("# Keyspace\r\n");
    for (i, ks) in sh.databases() {
        let (n, e) = ks.count_with_expiring().unwrap_or((0, 0));
        if n > 0 {
            write!(o, "db{i}:keys={n},expires={e},avg_ttl=0\r\n")?;
        }
    }
    Ok(())
}

fn halyard(sh: &Shared, o: &mut String) -> std::fmt::Result {
    let s = sh.ks.db.stats();
    let levels: Vec<String> = s.levels.iter().map(|l| l.ssts.to_string()).collect();
    write!(
        o,
        "# Halyard\r\ndevice_read_bytes:{}\r\ndevice_write_bytes:{}\r\nuser_bytes_written:{}\r\nio_amplification:{:.3}\r\nl0_bytes:{}\r\nlevel_ssts:{}\r\nstall_seconds:{:.3}\r\ncompactions:{}\r\ngc_segments:{}\r\ncache_hit_rate:{:.4}\r\nspace_allocated_bytes:{}\r\ndirect_io:{}\r\n",
        s.device_read_bytes,
        s.device_write_bytes,
        s.user_bytes_written,
        s.io_amplification(),
        s.l0_bytes,
        levels.join(","),
        s.stall_seconds,
        s.compactions,
        s.gc_segments,
        s.cache_hit_rate(),
        s.space_allocated_bytes,
        s.direct_io as u8
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_by_name() {
        let w = |a: &[&str]| wanted(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(w(&[]), default_sections());
        assert_eq!(w(&["all"]), ALL);
        assert_eq!(w(&["clients", "server"]), ["server", "clients"]);
        assert_eq!(w(&["nosuch"]), Vec::<&str>::new());
        assert!(w(&["default", "commandstats"]).contains(&"commandstats"));
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(1000), "1000B");
        assert_eq!(human(1536), "1.50K");
        assert_eq!(human(3 << 20), "3.00M");
    }
}
