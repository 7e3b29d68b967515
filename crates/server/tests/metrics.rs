//! What /metrics exposes: every metric's sample names, type and label names (the names
//! scrapers and `halyard bench` read), in the OpenMetrics text form prometheus-client
//! writes (a counter's family is named without `_total`, its samples with it; `# EOF` last).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Options};
use halyard_server::cluster::ClusterNode;
use halyard_server::config::ServerConfig;
use halyard_server::keyspace::Keyspace;
use halyard_server::metrics::{self, Metrics};
use halyard_server::state::Shared;
use halyard_server::{commands, http};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// (sample name, its family's type, its label names sorted) of a node's metrics.
const NODE: &[(&str, &str, &[&str])] = &[
    ("halyard_connections_total", "counter", &[]),
    ("halyard_connections_rejected_total", "counter", &[]),
    ("halyard_protocol_errors_total", "counter", &[]),
    ("halyard_idle_timeouts_total", "counter", &[]),
    ("halyard_auth_failures_total", "counter", &[]),
    ("halyard_protected_mode_refusals_total", "counter", &[]),
    ("halyard_unknown_commands_total", "counter", &[]),
    ("halyard_network_received_bytes_total", "counter", &[]),
    ("halyard_network_sent_bytes_total", "counter", &[]),
    ("halyard_connected_clients", "gauge", &[]),
    ("halyard_commands_total", "counter", &["cmd"]),
    ("halyard_command_errors_total", "counter", &["cmd"]),
    ("halyard_command_duration_seconds_bucket", "histogram", &["cmd", "le"]),
    ("halyard_command_duration_seconds_sum", "histogram", &["cmd"]),
    ("halyard_command_duration_seconds_count", "histogram", &["cmd"]),
    ("halyard_native_requests_total", "counter", &[]),
    ("halyard_native_errors_total", "counter", &[]),
    ("halyard_native_bad_frames_total", "counter", &[]),
    ("halyard_cpu_user_seconds_total", "counter", &[]),
    ("halyard_cpu_system_seconds_total", "counter", &[]),
    ("halyard_cpu_us_per_request", "gauge", &[]),
    ("halyard_engine_device_read_bytes_total", "counter", &[]),
    ("halyard_engine_device_write_bytes_total", "counter", &[]),
    ("halyard_engine_device_write_bytes_by_purpose", "unknown", &["purpose"]),
    ("halyard_engine_device_read_bytes_by_purpose", "unknown", &["purpose"]),
    ("halyard_engine_user_bytes_total", "counter", &[]),
    ("halyard_engine_io_amplification", "gauge", &[]),
    ("halyard_engine_l0_bytes", "gauge", &[]),
    ("halyard_engine_level_bytes", "gauge", &["level"]),
    ("halyard_engine_level_ssts", "unknown", &["level"]),
    ("halyard_engine_stall_seconds_total", "counter", &[]),
    ("halyard_engine_compactions_total", "counter", &[]),
    ("halyard_engine_warmed_leaves_total", "counter", &[]),
    ("halyard_engine_compaction_cached_bytes_total", "counter", &[]),
    ("halyard_engine_l0_merge_parts_total", "counter", &[]),
    ("halyard_engine_l0_versions_dropped_total", "counter", &[]),
    ("halyard_engine_gc_segments_total", "counter", &[]),
    ("halyard_engine_gc_known_segments_total", "counter", &[]),
    ("halyard_engine_gc_bytes_moved_total", "counter", &[]),
    ("halyard_engine_cache_hit_ratio", "gauge", &[]),
    ("halyard_engine_space_allocated_bytes", "gauge", &[]),
    ("halyard_engine_open_seconds", "gauge", &[]),
    ("halyard_engine_open_read_bytes", "gauge", &[]),
    ("halyard_engine_partly_filled_log_segments", "gauge", &[]),
    ("halyard_engine_pinned_bytes", "gauge", &[]),
];

/// The same for replication (cluster mode).
const REPLICATION: &[(&str, &str, &[&str])] = &[
    ("halyard_replication_shipped_bytes_total", "counter", &[]),
    ("halyard_replication_shipped_frames_total", "counter", &[]),
    ("halyard_replication_shipped_image_bytes_total", "counter", &[]),
    ("halyard_replication_sent_bytes_total", "counter", &[]),
    ("halyard_replication_socket_received_bytes_total", "counter", &[]),
    ("halyard_replication_link_failures_total", "counter", &[]),
    ("halyard_replication_connections_total", "counter", &[]),
    ("halyard_replication_socket_writes_total", "counter", &[]),
    ("halyard_replication_catch_ups_total", "counter", &[]),
    ("halyard_replication_incremental_catch_ups_total", "counter", &[]),
    ("halyard_replication_copy_kept_bytes_total", "counter", &[]),
    ("halyard_replication_copy_named_bytes_total", "counter", &[]),
    ("halyard_replication_copy_duration_seconds_bucket", "histogram", &["le"]),
    ("halyard_replication_copy_duration_seconds_sum", "histogram", &[]),
    ("halyard_replication_copy_duration_seconds_count", "histogram", &[]),
    ("halyard_master_handoff_duration_seconds_bucket", "histogram", &["le"]),
    ("halyard_master_handoff_duration_seconds_count", "histogram", &[]),
    ("halyard_master_handoff_fence_seconds_bucket", "histogram", &["le"]),
    ("halyard_master_handoff_fence_seconds_count", "histogram", &[]),
    ("halyard_master_handoffs_rolled_back_total", "counter", &[]),
    ("halyard_replication_throttled_waits_total", "counter", &[]),
    ("halyard_replication_throttled_seconds_total", "counter", &[]),
    ("halyard_replication_stuck_links_total", "counter", &[]),
    ("halyard_replication_full_links", "gauge", &[]),
    ("halyard_replication_queued_bytes", "gauge", &["backup", "region"]),
    ("halyard_replication_received_bytes_total", "counter", &[]),
    ("halyard_replication_rejected_total", "counter", &[]),
    ("halyard_replication_unauthenticated_total", "counter", &[]),
    ("halyard_replication_acked_lsn", "gauge", &["backup", "live", "region"]),
];

/// Sample name -> the sets of label names its samples carry.
type Samples<'a> = BTreeMap<&'a str, BTreeSet<Vec<&'a str>>>;

/// The `# TYPE` lines (family -> type) and the samples.
fn parse(text: &str) -> (BTreeMap<&str, &str>, Samples<'_>) {
    let (mut types, mut samples) = (BTreeMap::new(), Samples::new());
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let (family, ty) = t.split_once(' ').expect("TYPE line");
            assert!(types.insert(family, ty).is_none(), "{family} declared twice");
        } else if !line.starts_with('#') {
            let series = line.rsplit_once(' ').expect("a sample has a value").0;
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let mut keys: Vec<&str> = labels.split(',').filter_map(|l| Some(l.split_once('=')?.0)).collect();
            keys.sort_unstable();
            samples.entry(name).or_default().insert(keys);
        }
    }
    (types, samples)
}

/// Every metric of `expected` is in `text` under its name, type and labels.
fn check(text: &str, expected: &[(&str, &str, &[&str])]) {
    let (types, samples) = parse(text);
    for &(name, ty, labels) in expected {
        let family = match ty {
            "counter" => name.strip_suffix("_total").expect("a counter's samples end in _total"),
            "histogram" => name.rsplit_once('_').expect("histogram sample").0,
            _ => name,
        };
        assert_eq!(types.get(family).copied(), Some(ty), "the type of {family}");
        let seen = samples.get(name).unwrap_or_else(|| panic!("no {name} in\n{text}"));
        assert!(seen.iter().all(|l| l == labels), "{name}: labels {seen:?}, expected {labels:?}");
    }
    assert!(text.ends_with("\n# EOF\n"), "OpenMetrics text ends with # EOF");
}

fn open(dir: &std::path::Path, clustered: bool) -> Arc<Db> {
    let opts = Options { direct_io: false, cache_bytes: 8 << 20, ..Options::default() };
    let opts = Options { default_region: opts.default_region && !clustered, resume_logs: !clustered, ..opts };
    Arc::new(Db::open(dir, opts).expect("open store"))
}

#[test]
fn node_metrics_keep_their_names_types_and_labels() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path(), false);
    let ks = Keyspace::new(db.clone()).expect("keyspace");
    let sh = Arc::new(Shared::new(ks, None, Metrics::new(&commands::names())));
    let mut sess = sh.session("127.0.0.1:1".into());
    for i in 0..32 {
        commands::execute(&sh, &mut sess, &[b"SET", format!("k{i}").as_bytes(), b"v"]);
    }
    commands::execute(&sh, &mut sess, &[b"NOSUCH"]);
    db.flush().expect("flush");
    let text = metrics::encode(&http::registry(sh.clone(), None)).expect("encode");
    check(&text, NODE);
    assert!(text.contains("\nhalyard_commands_total{cmd=\"set\"} 32\n"), "{text}");
    assert!(text.contains("\nhalyard_unknown_commands_total 1\n"), "{text}");
    // One SET in 16 is timed; the +Inf bucket holds them all.
    assert!(text.contains("\nhalyard_command_duration_seconds_count{cmd=\"set\"} 2\n"), "{text}");
    assert!(text.contains("\nhalyard_command_duration_seconds_bucket{le=\"+Inf\",cmd=\"set\"} 2\n"), "{text}");
    assert!(!text.contains("duration_seconds_count{cmd=\"get\"}"), "histograms only of commands called");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_metrics_add_replication_to_the_same_registry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cluster.toml");
    std::fs::write(
        &file,
        "[[nodes]]\nname = \"n1\"\nnative = \"127.0.0.1:1\"\nreplication = \"127.0.0.1:1\"\n\n\
         [[nodes]]\nname = \"n2\"\nnative = \"127.0.0.1:1\"\nreplication = \"127.0.0.1:1\"\n\n\
         [[regions]]\nid = 1\nstart = \"\"\nprimary = \"n1\"\nbackups = [\"n2\"]\nepoch = 1\n",
    )
    .expect("write the cluster file");
    let data = dir.path().join("data");
    let cfg =
        ServerConfig { dir: data.clone(), cluster_file: Some(file), node: Some("n1".into()), ..Default::default() };
    let db = open(&data, true);
    let node = ClusterNode::start(&cfg, db.clone()).expect("start the cluster node");
    let ks = Keyspace::new(db).expect("keyspace");
    let sh = Arc::new(Shared::new(ks, None, Metrics::new(&commands::names())));
    let text = metrics::encode(&http::registry(sh, Some(node))).expect("encode");
    assert!(text.contains("\nhalyard_connections_total 0\n"), "the node's metrics too: {text}");
    check(&text, REPLICATION);
    assert!(text.contains("\nhalyard_replication_acked_lsn{region=\"1\",backup=\"n2\",live=\""), "{text}");
}
