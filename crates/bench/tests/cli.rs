//! Runs the `halyard-bench` binary on tiny workloads and checks the JSON report.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use serde_json::Value;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_halyard-bench");

/// Every engine this build can run.
fn engines() -> &'static str {
    if cfg!(feature = "rocksdb") {
        "halyard,rocksdb,blobdb"
    } else {
        "halyard"
    }
}

fn bench(dir: &std::path::Path, extra: &[&str]) -> (std::process::Output, Option<Value>) {
    let json = dir.join("out.json");
    let out = Command::new(BIN)
        .args(["--dir", dir.join("data").to_str().unwrap(), "--json", json.to_str().unwrap(), "--quiet"])
        .args(["--records", "2000", "--ops", "2000", "--threads", "2", "--cache-mb", "8", "--l0-mb", "1"])
        .args(extra)
        .output()
        .expect("run halyard-bench");
    let doc = std::fs::read_to_string(&json).ok().filter(|s| !s.is_empty()).map(|s| serde_json::from_str(&s).unwrap());
    (out, doc)
}

fn num(v: &Value, field: &str) -> f64 {
    v[field].as_f64().unwrap_or_else(|| panic!("{field} missing or not a number in {v}"))
}

#[test]
fn tiny_run_reports_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("plot.svg");
    let (out, doc) = bench(
        dir.path(),
        &[
            "--engines",
            engines(),
            "--workloads",
            "load-a,run-a,run-b,run-c,run-d,run-e,run-f",
            "--mix",
            "SD,custom:0,50,50",
            "--plot",
            svg.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ops/s") && stdout.contains("halyard configuration"), "{stdout}");
    let doc = doc.expect("json written");
    assert_eq!(doc["config"]["records"], 2000);
    assert!(doc["config"]["engine_settings"]["halyard"]["cache_bytes"].is_string());
    let results = doc["results"].as_array().unwrap();
    let n_engines = engines().split(',').count();
    assert_eq!(results.len(), 7 * 2 * n_engines);
    for r in results {
        for f in ["engine", "mix", "workload"] {
            assert!(r[f].is_string(), "{f} in {r}");
        }
        assert_eq!(num(r, "ops"), 2000.0, "{r}");
        assert!(num(r, "seconds") > 0.0 && num(r, "ops_per_sec") > 0.0);
        let l = &r["latency_us"];
        let (p50, p99, p999, max) = (num(l, "p50"), num(l, "p99"), num(l, "p999"), num(l, "max"));
        assert!(0.0 < p50 && p50 <= p99 && p99 <= p999 && p999 <= max * 1.001, "{l}");
        assert!(num(r, "user_bytes") > 0.0);
        num(r, "device_read_bytes");
        num(r, "device_write_bytes");
        let io = num(r, "io_amplification");
        assert!(io.is_finite() && io >= 0.0);
        let space = num(r, "space_amplification");
        assert!(space > 0.0 && space < 1000.0, "{r}");
        assert!(num(r, "cpu_us_per_op") > 0.0);
        assert!(num(r, "throughput_cv") >= 0.0);
        assert!(num(r, "stall_seconds") >= 0.0);
        assert!(num(r, "peak_rss_bytes") > 1e6);
    }
    // Loading 2000 pairs writes at least their bytes to the device.
    let load = results.iter().find(|r| r["workload"] == "load-a" && r["engine"] == "halyard").unwrap();
    assert!(num(load, "user_bytes") >= 2000.0 * 33.0);
    let ratios = doc["ratios"].as_array().unwrap();
    if n_engines > 1 {
        let r = ratios
            .iter()
            .find(|r| r["baseline"] == "rocksdb" && r["workload"] == "run-c" && r["metric"] == "ops_per_sec")
            .expect("ratio of run-c ops/s over rocksdb");
        assert_eq!(r["engine"], "halyard");
        assert!(num(r, "value") > 0.0);
    } else {
        assert!(ratios.is_empty());
    }
    assert!(doc["failures"].as_array().unwrap().is_empty());
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.starts_with("<svg") || svg.contains("<svg"), "not an SVG");
    // The data directories are removed unless --keep.
    assert_eq!(std::fs::read_dir(dir.path().join("data")).unwrap().count(), 0);
}

#[test]
fn bad_arguments_exit_non_zero_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    for (args, says) in [
        (&["--engines", "halyard,leveldb"][..], "leveldb"),
        (&["--mix", "custom:50,40,5"][..], "summing to 100"),
        (&["--workloads", "run-q"][..], "run-q"),
        (&["--threads", "0"][..], "--threads"),
        (&["--seed", "many"][..], "many"),
    ] {
        let (out, doc) = bench(dir.path(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(doc.is_none(), "{args:?} wrote a report");
    }
}

#[test]
fn a_failing_engine_is_reported_and_the_others_still_written() {
    let dir = tempfile::tempdir().unwrap();
    let (out, doc) = bench(dir.path(), &["--engines", "faulty,halyard", "--workloads", "load-a,run-a"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("faulty") && stderr.contains("injected failure"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAILED"));
    let doc = doc.expect("json written despite the failure");
    let failures = doc["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0]["engine"], "faulty");
    assert_eq!(failures[0]["workload"], "load-a");
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r["engine"] == "halyard"));
}

#[test]
fn ycsb_cxx_run_reopens_between_phases_and_verifies_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let (out, doc) = bench(
        dir.path(),
        &[
            "--engines",
            engines(),
            "--workloads",
            "load-a,run-a,run-c,run-e,verify",
            "--mix",
            "ycsb-cxx-sd",
            "--keys",
            "fnv",
            "--dist",
            "zipfian,run-a=uniform",
            "--update-rmw",
            "--reopen-between-phases",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("reopen between phases") && stdout.contains("ops/s over open..close"), "{stdout}");
    let doc = doc.expect("json written");
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 5 * engines().split(',').count());
    for r in results {
        let x = &r["reopen"];
        assert!(num(x, "open_seconds") > 0.0 && num(x, "close_seconds") > 0.0, "{r}");
        let around = num(x, "ops_per_sec_open_to_close");
        assert!(around > 0.0 && around < num(r, "ops_per_sec"), "{r}");
        match r["workload"].as_str().unwrap() {
            // Every key is read back after the last reopen, at its last written size: load-a's
            // 2000 and run-e's inserts (5% of 2000 operations).
            // Halyard loses none; a baseline's misses are reported, not asserted (a CI run once
            // saw RocksDB's BlobDB miss one key after a reopen, before the bench recorded a key's
            // size in the order its writers' puts were applied).
            "verify" if r["engine"] != "halyard" && num(r, "misses") != 0.0 => {
                eprintln!("baseline {} missed keys after its reopen: {r}", r["engine"]);
            }
            "verify" if r["engine"] != "halyard" => {}
            "verify" => {
                assert_eq!(num(r, "misses"), 0.0, "{r}");
                assert!((2050.0..2150.0).contains(&num(r, "ops")), "{r}");
            }
            // A read-modify-write reads the pair it updates: Run A reads all 2000 keys' worth.
            "run-a" => assert!(num(r, "user_bytes") > 2000.0 * 19.0, "{r}"),
            _ => {}
        }
        // YCSB-CXX's sd mix: 6 of every 10 values are 5 B, 2 are 100 B, 2 are 2000 B; keys
        // are about 19.4 B. Live bytes after the load: 2000 * (19.4 + 423) within 2%.
        if r["workload"] == "load-a" {
            let live = num(r, "live_bytes");
            assert!((live - 2000.0 * 442.4).abs() < 2000.0 * 442.4 * 0.02, "{live}");
        }
    }
}
