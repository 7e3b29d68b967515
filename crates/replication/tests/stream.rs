//! A primary store streaming one region to a backup store over loopback TCP, in one process.
//! A backup acknowledges a write once the record is in its buffer and installs shipped SSTs
//! behind the receive path; what it reports (the `verify` dump) must still be everything it
//! acknowledged, with the primary's versions, the moment the last write is acknowledged.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Options};
use halyard_replication::{admin, Error, Hooks, Mode, Msg, NodeHooks, Replica, Shipper};
use std::sync::Arc;
use std::time::Duration;

struct NoRoleChanges;

impl NodeHooks for NoRoleChanges {
    fn promote(&self, _: u32, _: u64) -> halyard_replication::Result<(u64, u64)> {
        Err(Error::Rejected("no promotion in this test".into()))
    }
    fn host(&self, _: u32, _: u64, _: &[u8], _: Option<&[u8]>) -> halyard_replication::Result<()> {
        Err(Error::Rejected("no new regions in this test".into()))
    }
    fn add_backup(&self, _: u32, _: u64, _: &str, _: &str, _: &str) -> halyard_replication::Result<()> {
        Err(Error::Rejected("no new backups in this test".into()))
    }
}

fn pair(i: u32, round: u32) -> (Vec<u8>, Vec<u8>) {
    let k = format!("user{:06}", (i * 7919) % 3000).into_bytes();
    // Small, medium and large pairs under Options::tiny's thresholds.
    let len = [5usize, 20, 80, 150, 300, 900][((i + round) % 6) as usize];
    let mut v = format!("{round}-{i}-").into_bytes();
    v.resize(len, b'a' + (round % 26) as u8);
    (k, v)
}

/// A backup store of region 1 (Send-Index; with `two`, region 1 holds keys below "m" and
/// region 2 the rest) serving replication connections on loopback.
async fn start_backup(dir: &std::path::Path, opts: Options, two: bool) -> (Arc<Db>, String) {
    let backup = Arc::new(Db::open(dir.join("backup"), opts).expect("backup"));
    let replica = Replica::new(backup.clone(), dir.join("epochs"));
    match two {
        false => {
            backup.replication().create_backup_region(1, b"", None).expect("backup region");
        }
        true => {
            backup.replication().create_backup_region(1, b"", Some(b"m")).expect("backup region");
            backup.replication().create_backup_region(2, b"m", None).expect("backup region");
            replica.add_region(2, Mode::SendIndex, 1).expect("replica region");
        }
    }
    replica.add_region(1, Mode::SendIndex, 1).expect("replica region");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let hooks: Hooks = Arc::new(NoRoleChanges);
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let (r, h) = (replica.clone(), hooks.clone());
            tokio::spawn(async move {
                let _ = r.serve_connection(s, h).await;
            });
        }
    });
    (backup, addr)
}

/// A primary store of region 1 (`Options::tiny`) and a Send-Index backup of it serving on
/// loopback ([`start_backup`]): the primary, the backup store and its address.
async fn primary_and_backup(dir: &std::path::Path) -> (Arc<Db>, Arc<Db>, String) {
    let opts = Options { default_region: false, ..Options::tiny() };
    let primary = Arc::new(Db::open(dir.join("primary"), opts.clone()).expect("primary"));
    primary.create_region(1, b"", None).expect("region");
    let (backup, addr) = start_backup(dir, opts, false).await;
    (primary, backup, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backup_holds_every_acknowledged_write_when_the_ack_arrives() {
    let dir = tempfile::tempdir().expect("dir");
    let (primary, _backup, addr) = primary_and_backup(dir.path()).await;

    let shipper = Shipper::new(Duration::from_secs(20));
    shipper.set_db(&primary);
    primary.replication().set_ship_listener(Some(shipper.clone()));
    let stream = shipper.add_region(1, 1, Mode::SendIndex, &[("backup".to_string(), addr.clone())], false);
    shipper.start(&stream, None);

    let region = primary.region(1).expect("region handle");
    for round in 0..6u32 {
        let r = region.clone();
        let last = tokio::task::spawn_blocking(move || {
            let mut last = 0;
            for i in 0..3000 {
                let (k, v) = pair(i, round);
                last = r.put(&k, &v).expect("put");
            }
            last
        })
        .await
        .expect("writer");
        shipper.wait_acked(1, last).await;
        let link = &shipper.links(1)[0];
        assert!(link.is_live() && link.acked() >= last, "round {round}: the backup did not acknowledge LSN {last}");
        assert_backup_holds(&shipper, &region, &addr, &format!("round {round}")).await;
    }
    let s = primary.stats();
    assert!(s.compactions > 0, "the primary must have compacted (and shipped SSTs) during the test");
    assert!(shipper.stats.image_bytes.load(std::sync::atomic::Ordering::Relaxed) > 0, "no index images were shipped");
}

/// Asserts that the backup at `addr` holds what the primary's `region` holds, keys, versions
/// and values. No waiting for the backup's installs: the dump itself must account for them.
/// The primary's large-log GC re-appends live pairs under new LSNs at any time, so the
/// comparison holds for a moment in which the primary wrote nothing.
async fn assert_backup_holds(shipper: &Shipper, region: &halyard_engine::RegionHandle, addr: &str, when: &str) {
    let id = region.id();
    let mut attempts = 0;
    loop {
        let lsn = region.lsn();
        shipper.wait_acked(id, lsn).await;
        let want: Vec<(Vec<u8>, u64, Vec<u8>)> = region.scan_versions(..).map(|x| x.expect("primary scan")).collect();
        let got = admin::dump(addr, id).await.expect("dump of the backup");
        if region.lsn() != lsn && attempts < 50 {
            attempts += 1;
            continue;
        }
        assert_eq!(got.len(), want.len(), "{when}: number of keys of region {id} on the backup");
        if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
            let show = |x: &(Vec<u8>, u64, Vec<u8>)| (String::from_utf8_lossy(&x.0).into_owned(), x.1, x.2.len());
            panic!(
                "{when} (primary at LSN {lsn}): region {id} on the backup differs from the primary at entry {i}: backup {:?}, primary {:?}",
                show(&got[i]),
                show(&want[i])
            );
        }
        return;
    }
}

/// A primary's split reaches its backup in the region's stream: the backup splits at the same
/// LSN, the child's stream starts aligned (no copy) and both regions go on streaming writes,
/// compactions and GC; the backup holds what the primary holds in each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_reaches_the_backup_in_the_stream_and_both_halves_stream_on() {
    let dir = tempfile::tempdir().expect("dir");
    let (primary, backup, addr) = primary_and_backup(dir.path()).await;
    let shipper = Shipper::new(Duration::from_secs(20));
    shipper.set_db(&primary);
    primary.replication().set_ship_listener(Some(shipper.clone()));
    let stream = shipper.add_region(1, 1, Mode::SendIndex, &[("backup".to_string(), addr.clone())], false);
    shipper.start(&stream, None);
    let write = |round: u32| {
        let p = primary.clone();
        tokio::task::spawn_blocking(move || {
            for i in 0..3000 {
                let (k, v) = pair(i, round);
                p.put(&k, &v).expect("put");
            }
        })
    };
    for round in 0..3 {
        write(round).await.expect("writer");
    }
    // The split with a writer going on.
    let copies = || shipper.stats.catch_ups.load(std::sync::atomic::Ordering::Relaxed);
    let before = copies();
    let writer = write(3);
    let p = primary.clone();
    tokio::task::spawn_blocking(move || p.split_region(1, b"user001500", 2).map(drop))
        .await
        .expect("split")
        .expect("split");
    writer.await.expect("writer");
    for round in 4..7 {
        write(round).await.expect("writer");
    }
    for id in [1, 2] {
        let region = primary.region(id).expect("region");
        assert_backup_holds(&shipper, &region, &addr, "after the split").await;
    }
    assert_eq!(copies(), before, "the child's stream must start aligned, without a copy");
    let ranges = |db: &Db| db.regions().into_iter().map(|r| (r.id, r.start, r.end)).collect::<Vec<_>>();
    assert_eq!(ranges(&backup), ranges(&primary), "the backup's regions");
}

/// A primary that reconnects while its old connection is still open (half-open after a
/// network fault) gets a second stream at the same epoch: only the newest may apply, or two
/// job queues would install into one region out of order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_newest_stream_of_a_region_applies() {
    use halyard_replication::wire::{read_msg, VERSION};
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().expect("dir");
    let opts = Options { default_region: false, ..Options::tiny() };
    let (_backup, addr) = start_backup(dir.path(), opts, false).await;
    let hello =
        Msg::Hello { version: VERSION, epoch: 1, region: 1, mode: Mode::SendIndex, inventory: true, absorb: None };
    let mut conns = Vec::new();
    for _ in 0..2 {
        let mut c = tokio::net::TcpStream::connect(&addr).await.expect("connect");
        c.write_all(&hello.encode()).await.expect("hello");
        let m = read_msg(&mut c).await.expect("reply to hello");
        assert!(matches!(m, Msg::HelloOk { region: 1, .. }), "{m:?}");
        conns.push(c);
    }
    let (old, new) = conns.split_at_mut(1);
    old[0].write_all(&append(1, 1, 1).encode()).await.expect("append on the old stream");
    match read_msg(&mut old[0]).await.expect("reply on the old stream") {
        Msg::Reject { reason, .. } => assert!(reason.contains("newer stream"), "{reason}"),
        m => panic!("the old stream's append was answered with {m:?}, not refused"),
    }
    new[0].write_all(&append(1, 1, 1).encode()).await.expect("append on the new stream");
    let m = read_msg(&mut new[0]).await.expect("reply on the new stream");
    assert!(matches!(m, Msg::Ack { region: 1, lsn: 1 }), "{m:?}");
}

fn append(region: u32, epoch: u64, lsn: u64) -> Msg {
    Msg::Append { epoch, region, log: 0, seg: 5, salt: 7, offset: 0, last_lsn: lsn, commit: 0, bytes: vec![0xAB; 64] }
}

/// One connection carries the streams of many regions: the appends of both arrive in one
/// write and are acknowledged together, and one region's refused stream (a message of an older
/// epoch, a Hello for a region this node does not back) ends that stream alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_carries_many_regions_and_a_refusal_ends_one() {
    use halyard_replication::wire::{decode_frame, read_msg, VERSION};
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().expect("dir");
    let opts = Options { default_region: false, ..Options::tiny() };
    let (_backup, addr) = start_backup(dir.path(), opts, true).await;
    let mut c = tokio::net::TcpStream::connect(&addr).await.expect("connect");
    let mut hellos = Vec::new();
    for region in [1, 2, 9] {
        hellos.extend(
            Msg::Hello { version: VERSION, epoch: 2, region, mode: Mode::SendIndex, inventory: false, absorb: None }
                .encode(),
        );
    }
    c.write_all(&hellos).await.expect("hellos");
    let mut answers = std::collections::BTreeMap::new();
    for _ in 0..3 {
        match read_msg(&mut c).await.expect("reply to hello") {
            Msg::HelloOk { region, .. } => answers.insert(region, "ok".to_string()),
            Msg::Reject { region, reason } => answers.insert(region, reason),
            m => panic!("{m:?} in reply to a hello"),
        };
    }
    assert_eq!(answers[&1], "ok");
    assert_eq!(answers[&2], "ok");
    assert!(answers[&9].contains("not a backup of region 9"), "{:?}", answers[&9]);

    // Both regions' appends in one write: each is acknowledged.
    let both = [append(1, 2, 1).encode(), append(2, 2, 1).encode(), append(1, 2, 2).encode()].concat();
    c.write_all(&both).await.expect("appends");
    let mut acked = std::collections::BTreeMap::new();
    while acked.get(&1) != Some(&2) || !acked.contains_key(&2) {
        if let Msg::Ack { region, lsn } = read_msg(&mut c).await.expect("ack") {
            acked.insert(region, lsn);
        }
    }
    assert_eq!(acked[&1], 2, "region 1 acknowledges its highest LSN");
    assert_eq!(acked[&2], 1);

    // A message of an older epoch ends region 2's stream; region 1 goes on.
    let mixed = [append(2, 1, 2).encode(), append(2, 2, 3).encode(), append(1, 2, 3).encode()].concat();
    c.write_all(&mixed).await.expect("appends");
    let (mut refused, mut acks) = (None, Vec::new());
    while refused.is_none() || acks.is_empty() {
        match read_msg(&mut c).await.expect("answer") {
            Msg::Reject { region, reason } => refused = Some((region, reason)),
            Msg::Ack { region, lsn } => acks.push((region, lsn)),
            m => panic!("unexpected {m:?}"),
        }
    }
    let (region, reason) = refused.expect("a reject");
    assert_eq!(region, 2);
    assert!(reason.contains("below the region's 2"), "{reason}");
    assert_eq!(acks, vec![(1, 3)], "region 2's later append must not be acknowledged once its stream ended");

    // Region 2 opens again on the same connection and streams.
    c.write_all(
        &Msg::Hello { version: VERSION, epoch: 2, region: 2, mode: Mode::SendIndex, inventory: false, absorb: None }
            .encode(),
    )
    .await
    .expect("hello");
    assert!(matches!(read_msg(&mut c).await.expect("hello reply"), Msg::HelloOk { region: 2, .. }));
    c.write_all(&append(2, 2, 4).encode()).await.expect("append");
    assert!(matches!(read_msg(&mut c).await.expect("ack"), Msg::Ack { region: 2, lsn: 4 }));
    // Nothing else is pending on the connection.
    let mut rest = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_millis(200), tokio::io::AsyncReadExt::read(&mut c, &mut rest)).await;
    if let Ok(Ok(n)) = n {
        panic!("unexpected bytes after the last ack: {:?}", decode_frame(&rest[..n]));
    }
}

/// A backup node that answers its first Hello and then reads nothing until `go` turns true (a
/// backup that stopped keeping up); from then on it reads and discards what arrives. Its
/// receive buffer is small, so the kernel holds little of the stream for it.
async fn stalled_backup(go: tokio::sync::watch::Receiver<bool>) -> String {
    use halyard_replication::wire::read_msg;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
    sock.set_recv_buffer_size(4096).expect("receive buffer");
    sock.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let listener = sock.listen(8).expect("listen");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        match read_msg(&mut s).await.expect("hello") {
            Msg::Hello { region, .. } => {
                s.write_all(&Msg::HelloOk { region, lsn: 0, held: Default::default(), named: false }.encode())
                    .await
                    .expect("hello ok");
            }
            m => panic!("{m:?} instead of a Hello"),
        }
        let mut go = go;
        let _ = go.wait_for(|g| *g).await;
        let mut buf = vec![0u8; 1 << 20];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    });
    addr
}

/// A primary whose region 1 (fresh, Build-Index so that only log frames are shipped) streams
/// to `addr` with link queues of `limit` bytes, and a writer thread that waits for room before
/// each of `n` puts of 900-byte values; returns the shipper, the region handle and the count
/// of puts done so far.
fn throttled_writer(
    dir: &std::path::Path,
    addr: &str,
    limit: u64,
    ack_timeout: Duration,
    n: u64,
) -> (Arc<Shipper>, std::thread::JoinHandle<()>, Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let opts = Options { default_region: false, ..Options::tiny() };
    let primary = Arc::new(Db::open(dir.join("primary"), opts).expect("primary"));
    primary.create_region(1, b"", None).expect("region");
    let shipper = Shipper::with_queue_limit(ack_timeout, limit);
    shipper.set_db(&primary);
    primary.replication().set_ship_listener(Some(shipper.clone()));
    let stream = shipper.add_region(1, 1, Mode::BuildIndex, &[("backup".to_string(), addr.to_string())], true);
    shipper.start(&stream, None);
    let done = Arc::new(AtomicU64::new(0));
    let (s, d, rt) = (shipper.clone(), done.clone(), tokio::runtime::Handle::current());
    let writer = std::thread::spawn(move || {
        let region = primary.region(1).expect("region handle");
        for i in 0..n {
            rt.block_on(s.wait_room(Some(1)));
            let k = format!("user{:08}", i % 5000).into_bytes();
            region.put(&k, &[b'v'; 900]).expect("put");
            d.fetch_add(1, Relaxed);
        }
    });
    (shipper, writer, done)
}

/// A backup that stops reading: the primary's queue for it stops at the bound (memory stays
/// bounded), writers wait for room (counted in the stats) instead of queueing more, and they
/// resume once the backup reads again; the link, draining, is never failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_backup_stops_the_queue_at_its_bound_and_writers_wait() {
    use std::sync::atomic::Ordering::Relaxed;
    const LIMIT: u64 = 256 << 10;
    // The put that found room ships about a kilobyte, and the store's own log appends (GC
    // moving live values) do not wait for room.
    const SLACK: u64 = 64 << 10;
    let dir = tempfile::tempdir().expect("dir");
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let addr = stalled_backup(go_rx).await;
    // 20,000 puts: about 20 MB of frames, far more than the sockets' buffers and the queue hold.
    let n = 20_000;
    let (shipper, writer, done) = throttled_writer(dir.path(), &addr, LIMIT, Duration::from_secs(60), n);
    let link = shipper.links(1).remove(0);

    // The writer stalls: the queue is at its bound and no put completes for a while.
    let t0 = std::time::Instant::now();
    let mut max_queued = 0;
    let stalled_at = loop {
        max_queued = max_queued.max(link.queued_bytes());
        let before = done.load(Relaxed);
        tokio::time::sleep(Duration::from_millis(300)).await;
        max_queued = max_queued.max(link.queued_bytes());
        let after = done.load(Relaxed);
        if after == before && after < n {
            break after;
        }
        assert!(after < n, "all {n} puts went through although the backup read nothing");
        assert!(t0.elapsed() < Duration::from_secs(60), "the writer never stalled ({after} puts)");
    };
    assert!(link.is_full(), "the writer stalled with {} bytes queued", link.queued_bytes());
    assert!(max_queued <= LIMIT + SLACK, "the queue grew to {max_queued} bytes, past its bound of {LIMIT}");
    // Still stalled a while later, and the link still counts: writers wait, nothing is dropped.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(done.load(Relaxed), stalled_at, "puts went on while the queue was full");
    assert!(link.is_live());
    assert!(link.queued_bytes() <= LIMIT + SLACK);

    // The backup reads again: the writer finishes.
    go_tx.send(true).expect("go");
    let t1 = std::time::Instant::now();
    while !writer.is_finished() {
        assert!(t1.elapsed() < Duration::from_secs(120), "the writer did not resume ({} puts)", done.load(Relaxed));
        max_queued = max_queued.max(link.queued_bytes());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    writer.join().expect("writer");
    assert_eq!(done.load(Relaxed), n);
    assert!(max_queued <= LIMIT + SLACK, "the queue grew to {max_queued} bytes, past its bound of {LIMIT}");
    let st = &shipper.stats;
    assert!(st.throttled_waits.load(Relaxed) > 0, "no wait was counted");
    assert!(st.throttled_micros.load(Relaxed) >= 500_000, "the stall's time was not counted");
    assert_eq!(st.broken_links.load(Relaxed), 0, "the draining link was failed");
    assert_eq!(st.stuck_links.load(Relaxed), 0);
    assert!(link.is_live());
}

/// A backup that never reads again does not hold writers forever: once its queue has been
/// full, without draining, for the ack timeout, the link fails (to catch up later) and the
/// writers go on without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_that_stopped_reading_is_dropped_after_the_ack_timeout() {
    use std::sync::atomic::Ordering::Relaxed;
    let dir = tempfile::tempdir().expect("dir");
    let (_go_tx, go_rx) = tokio::sync::watch::channel(false);
    let addr = stalled_backup(go_rx).await;
    let n = 20_000;
    let (shipper, writer, done) = throttled_writer(dir.path(), &addr, 256 << 10, Duration::from_millis(500), n);
    let t0 = std::time::Instant::now();
    while !writer.is_finished() {
        assert!(t0.elapsed() < Duration::from_secs(60), "writers are still held ({} puts)", done.load(Relaxed));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    writer.join().expect("writer");
    assert_eq!(done.load(Relaxed), n);
    let st = &shipper.stats;
    assert!(st.stuck_links.load(Relaxed) >= 1, "the stuck link was not failed");
    assert!(st.throttled_waits.load(Relaxed) > 0);
}

/// A new backup's full copy is read segment by segment after a capture that does not wait for
/// it: writes go on (and are acknowledged) while the copy streams at its rate, and the backup
/// ends holding exactly what the primary holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_copy_streams_at_its_rate_while_writes_go_on() {
    let dir = tempfile::tempdir().expect("dir");
    let opts = Options { default_region: false, ..Options::tiny() };
    let primary = Arc::new(Db::open(dir.path().join("primary"), opts.clone()).expect("primary"));
    primary.create_region(1, b"", None).expect("region");
    let region = primary.region(1).expect("region handle");
    let r = region.clone();
    tokio::task::spawn_blocking(move || {
        for round in 0..8u32 {
            for i in 0..3000 {
                let (k, v) = pair(i, round);
                r.put(&k, &v).expect("put");
            }
        }
    })
    .await
    .expect("load");
    primary.compact().expect("compact");
    // And a log tail: the copy's first pieces carry it.
    for i in 0..500 {
        region.put(&pair(i, 99).0, &pair(i, 99).1).expect("put");
    }
    let (_backup, addr) = start_backup(dir.path(), opts, false).await;
    let shipper = Shipper::new(Duration::from_secs(20));
    let rate = 1u64 << 20;
    shipper.set_copy_rate(rate);
    shipper.set_db(&primary);
    primary.replication().set_ship_listener(Some(shipper.clone()));
    let t0 = std::time::Instant::now();
    let stream = shipper.add_region(1, 1, Mode::SendIndex, &[("backup".to_string(), addr.clone())], false);
    shipper.start(&stream, None);
    let link = shipper.links(1)[0].clone();
    let total = loop {
        if let Some((_, total)) = link.copy_progress() {
            break total;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(total > rate, "the region must take a while to copy: {total} bytes");
    // Writes during the copy: each is acknowledged by the primary while the copy streams. The
    // backup acknowledges nothing until the whole copy arrived (its `Copied`).
    let mut during = 0;
    let mut last = 0;
    for round in 8..40u32 {
        if link.copy_progress().is_some_and(|(done, total)| done < total / 2) {
            assert_eq!(link.acked(), 0, "the backup acknowledged an LSN half-way through its copy");
        }
        let r = region.clone();
        last = tokio::task::spawn_blocking(move || {
            (0..200).map(|i| r.put(&pair(i, round).0, &pair(i, round).1).expect("put")).max()
        })
        .await
        .expect("writer")
        .unwrap_or(0);
        if link.copy_progress().is_some() {
            during += 1;
        }
    }
    assert!(during > 0, "no write finished while the copy streamed");
    while link.copy_progress().is_some() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = t0.elapsed();
    // The copy cannot be faster than its rate (a lower bound holds on any machine).
    assert!(took.as_secs_f64() >= 0.9 * total as f64 / rate as f64, "{total} bytes copied in {took:?} at {rate} B/s");
    shipper.wait_acked(1, last).await;
    loop {
        let lsn = region.lsn();
        shipper.wait_acked(1, lsn).await;
        let want: Vec<(Vec<u8>, u64, Vec<u8>)> = region.scan_versions(..).map(|x| x.expect("scan")).collect();
        let got = admin::dump(&addr, 1).await.expect("dump of the backup");
        if region.lsn() != lsn {
            continue; // GC re-appended pairs meanwhile: compare at a quiet moment.
        }
        assert_eq!(got.len(), want.len(), "number of keys on the backup");
        assert!(got == want, "the backup's copy differs from the primary");
        break;
    }
    let copied = shipper.stats.copy_bytes.load(std::sync::atomic::Ordering::Relaxed);
    // Sealed log segments are estimated by their fill and sent up to their last valid record.
    assert!(copied <= total && copied >= total / 2, "{copied} bytes read of an estimated {total}");
}

/// A new primary whose levels the backup does not share (the old primary's last compaction
/// never reached the backup): the backup refuses its Remap instead of following it with
/// diverged levels, and the new primary's next session aligns it with an incremental copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remap_onto_levels_the_backup_lacks_is_refused_and_an_incremental_copy_aligns_it() {
    use std::sync::atomic::Ordering::Relaxed;
    let dir = tempfile::tempdir().expect("dir");
    let (primary, _backup, addr) = primary_and_backup(dir.path()).await;
    let backups = [("backup".to_string(), addr.clone())];
    let old = Shipper::new(Duration::from_secs(20));
    old.set_db(&primary);
    primary.replication().set_ship_listener(Some(old.clone()));
    let stream = old.add_region(1, 1, Mode::SendIndex, &backups, false);
    old.start(&stream, None);
    let write = |round: u32| {
        let p = primary.clone();
        tokio::task::spawn_blocking(move || {
            for i in 0..3000 {
                let (k, v) = pair(i, round);
                p.put(&k, &v).expect("put");
            }
            p.compact().expect("compact");
        })
    };
    for round in 0..2 {
        write(round).await.expect("writer");
    }
    let region = primary.region(1).expect("region");
    assert_backup_holds(&old, &region, &addr, "before the primary changes").await;
    // The old primary's stream ends; the store writes and compacts on unseen by the backup.
    old.remove_region(1);
    write(2).await.expect("writer");
    // The same store leads at epoch 2, as a promoted backup would (its segments are the old
    // primary's, so its maps are the identity).
    let new = Shipper::new(Duration::from_secs(20));
    new.set_db(&primary);
    primary.replication().set_ship_listener(Some(new.clone()));
    let mut log = Vec::new();
    for kind in [halyard_engine::LogKind::L0, halyard_engine::LogKind::Large] {
        let segs = primary.replication().log_segments(1, kind).expect("log");
        log.extend(segs.into_iter().map(|(seg, salt)| (seg, salt, seg)));
    }
    let levels = primary.replication().levels_digest(1).expect("digest").expect("a primary's digest");
    let remap = Msg::Remap { epoch: 2, region: 1, last_lsn: region.lsn(), tails: vec![], log, index: vec![], levels };
    let stream = new.add_region(1, 2, Mode::SendIndex, &backups, true);
    new.start(&stream, Some(remap));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while new.stats.incremental_catch_ups.load(Relaxed) == 0 {
        assert!(std::time::Instant::now() < deadline, "the backup was never caught up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(new.stats.catch_ups.load(Relaxed), 0, "what the backup shares with the primary is kept");
    write(3).await.expect("writer");
    assert_backup_holds(&new, &region, &addr, "after the incremental copy").await;
}
