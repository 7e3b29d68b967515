//! A client of a whole cluster: it reads the region map from any node (REGION_MAP), sends each
//! request to the primary of its key's region, and when the region changed hands (`NotLeader`,
//! a primary that stopped answering) reads the map again and retries, with backoff, for up to
//! [`ClientOptions::retry_for`]. Against a single node (which has no map) every request goes to
//! that node.
//!
//! Reads are retried after any failure. A write is retried only when it certainly did not run
//! (`NotLeader`, no connection could be opened): a write whose connection failed after it was
//! sent may have taken effect, and sending it again later could undo a newer write of another
//! client. It fails with `OutcomeUnknown` (the node ran it but its backups did not confirm
//! they hold it), `Closed`, `Io` or `Timeout`: its outcome is unknown.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use halyard_cluster::{ClusterFile, RegionSpec};
use halyard_proto::ErrorCode;

use crate::{Batch, Client, ClientOptions, Error, Result};

/// A cluster-aware client; clones share the map and the connections.
#[derive(Clone)]
pub struct ClusterClient {
    inner: Arc<Inner>,
}

struct Inner {
    seeds: Vec<String>,
    opts: ClientOptions,
    /// None: a single node (the first seed that answered).
    map: parking_lot::RwLock<Option<Arc<ClusterFile>>>,
    single: parking_lot::RwLock<Option<String>>,
    conns: parking_lot::Mutex<HashMap<String, Client>>,
    refresh: tokio::sync::Mutex<()>,
}

/// Whether a failed request may succeed at another node or a moment later, and may be sent
/// again: a read always, a write only if it certainly did not run.
fn retryable(e: &Error, read: bool) -> bool {
    match e {
        Error::Server { code, .. } => {
            // NotEnoughReplicas passes once the master has added a backup (Kafka's client
            // retries its counterpart too).
            matches!(
                code,
                ErrorCode::NotLeader
                    | ErrorCode::StaleEpoch
                    | ErrorCode::NoRegion
                    | ErrorCode::ShuttingDown
                    | ErrorCode::NotEnoughReplicas
            ) || (read && *code == ErrorCode::OutcomeUnknown)
        }
        Error::Io(_) | Error::Closed | Error::Timeout => read,
        _ => false,
    }
}

/// The longest pause between tries while a region changes hands (a handoff or a split lasts
/// tens of milliseconds): the doubling pauses meant for a node that does not answer would
/// overshoot the end of a handoff by up to their last step (a 150 ms handoff cost 310 ms).
const CHANGING_HANDS_PAUSE: Duration = Duration::from_millis(40);

/// Whether `e` says the region is changing hands (the node no longer or not yet leads it).
fn changing_hands(e: &Error) -> bool {
    matches!(e, Error::Server { code: ErrorCode::NotLeader | ErrorCode::StaleEpoch, .. })
}

/// The sum of the regions' epochs: epochs only grow, so the larger map is the newer.
fn age(f: &ClusterFile) -> u64 {
    f.regions.iter().map(|r| r.epoch).sum()
}

impl ClusterClient {
    /// Reads the region map from the first of `seeds` (native addresses of any nodes) that
    /// answers.
    pub async fn connect(seeds: &[impl AsRef<str>], opts: ClientOptions) -> Result<ClusterClient> {
        let inner = Inner {
            seeds: seeds.iter().map(|s| s.as_ref().to_string()).collect(),
            opts,
            map: parking_lot::RwLock::new(None),
            single: parking_lot::RwLock::new(None),
            conns: parking_lot::Mutex::new(HashMap::new()),
            refresh: tokio::sync::Mutex::new(()),
        };
        let c = ClusterClient { inner: Arc::new(inner) };
        c.refresh().await?;
        Ok(c)
    }

    /// The region map in use (None against a single node).
    pub fn map(&self) -> Option<Arc<ClusterFile>> {
        self.inner.map.read().clone()
    }

    async fn client(&self, addr: &str) -> Result<Client> {
        if let Some(c) = self.inner.conns.lock().get(addr) {
            return Ok(c.clone());
        }
        let c = Client::connect(addr, self.inner.opts.clone()).await?;
        self.inner.conns.lock().insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// Reads the map again from the seeds and the nodes it names; keeps the newest.
    pub async fn refresh(&self) -> Result<()> {
        let _one = self.inner.refresh.lock().await;
        let mut asked: Vec<String> = self.inner.seeds.clone();
        if let Some(m) = self.map() {
            asked.extend(m.nodes.iter().map(|n| n.native.clone()).filter(|a| !self.inner.seeds.contains(a)));
        }
        let mut best: Option<ClusterFile> = None;
        let mut last = Error::Protocol("no node to ask for the region map".into());
        for addr in asked {
            let answer = match self.client(&addr).await {
                Ok(c) => c.region_map().await,
                Err(e) => Err(e),
            };
            match answer {
                Ok(json) => match serde_json::from_slice::<ClusterFile>(&json) {
                    Ok(f) if best.as_ref().is_none_or(|b| age(&f) > age(b)) => best = Some(f),
                    Ok(_) => {}
                    Err(e) => last = Error::Protocol(format!("region map from {addr}: {e}")),
                },
                Err(Error::Server { code: ErrorCode::UnknownOp, .. }) if best.is_none() => {
                    *self.inner.single.write() = Some(addr);
                    *self.inner.map.write() = None;
                    return Ok(());
                }
                Err(e) => {
                    self.inner.conns.lock().remove(&addr);
                    last = e;
                }
            }
        }
        match best {
            Some(f) => {
                *self.inner.map.write() = Some(Arc::new(f));
                Ok(())
            }
            None if self.map().is_some() || self.inner.single.read().is_some() => Ok(()),
            None => Err(last),
        }
    }

    /// Where `key`'s requests go: the region (None for a single node) and its primary's address.
    fn locate(&self, key: &[u8]) -> Result<(Option<RegionSpec>, String)> {
        if let Some(m) = self.map() {
            let r = m.region_for(key).ok_or_else(|| Error::Server {
                code: ErrorCode::NoRegion,
                message: "no region of the cluster covers this key".into(),
            })?;
            let addr = m.node(&r.primary).map(|n| n.native.clone()).unwrap_or_default();
            return Ok((Some(r.clone()), addr));
        }
        let single = self.inner.single.read().clone();
        single.map(|a| (None, a)).ok_or_else(|| Error::Protocol("not connected".into()))
    }

    /// Runs `f` at the primary of `key`'s region, retrying where the region changed hands
    /// (a write only while it certainly did not run).
    async fn at<T, F, Fut>(&self, key: &[u8], read: bool, f: F) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + self.inner.opts.retry_for;
        let max = Duration::from_millis(500);
        let mut pauses = backon::BackoffBuilder::build(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(10))
                .with_max_delay(max)
                .without_max_times(),
        )
        .peekable();
        loop {
            // A key no region covers yet (a map read before the cluster was set up), or a
            // connection that cannot be opened: nothing was sent, retry whatever the request.
            let (addr, (r, sent)) = match self.locate(key) {
                Ok((region, addr)) => {
                    let r = match self.client(&addr).await {
                        // Sent for the region's epoch in this map: a node that moved on refuses.
                        Ok(c) => (f(region.map_or(c.clone(), |r| c.routed(r.id, r.epoch))).await, true),
                        Err(e) => (Err(e), false),
                    };
                    (addr, r)
                }
                Err(e) => (String::new(), (Err(e), false)),
            };
            match r {
                Err(e)
                    if retryable(&e, read || !sent) && Instant::now() + *pauses.peek().unwrap_or(&max) < deadline =>
                {
                    if matches!(e, Error::Io(_) | Error::Closed | Error::Timeout) {
                        self.inner.conns.lock().remove(&addr);
                    }
                    let pause = pauses.next().unwrap_or(max);
                    tokio::time::sleep(if changing_hands(&e) { pause.min(CHANGING_HANDS_PAUSE) } else { pause }).await;
                    let _ = self.refresh().await;
                }
                r => return r,
            }
        }
    }

    /// The value of `key`, or `None`.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        self.at(key, true, |c| async move { c.get(key).await }).await
    }

    /// Writes `key`.
    pub async fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        self.at(key, false, |c| async move { c.put(key, value).await }).await
    }

    /// Deletes `key` (no error if absent).
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        self.at(key, false, |c| async move { c.delete(key).await }).await
    }

    /// Deletes every key of `[start, end)`: one delete per region the range reaches, each
    /// atomic on its own (the ranges of regions the map does not know yet are not reached).
    pub async fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        let (start, end) = (start.as_ref(), end.as_ref());
        let parts: Vec<(Vec<u8>, Vec<u8>)> = match self.map() {
            None => vec![(start.to_vec(), end.to_vec())],
            Some(map) => map
                .regions
                .iter()
                .map(|r| {
                    let from = start.max(r.start_bytes().as_slice()).to_vec();
                    let to = r.end_bytes().map_or(end.to_vec(), |e| end.min(e.as_slice()).to_vec());
                    (from, to)
                })
                .filter(|(from, to)| from < to)
                .collect(),
        };
        for (from, to) in &parts {
            let (f, t) = (from.as_slice(), to.as_slice());
            self.at(f, false, |c| async move { c.delete_range(f, t).await }).await?;
        }
        Ok(())
    }

    /// Applies all of `batch` atomically; its keys must lie in one region
    /// ([`Error::CrossRegion`] otherwise).
    pub async fn write_batch(&self, batch: &Batch) -> Result<()> {
        let Some(first) = batch.ops.first().map(|o| o.0.clone()) else { return Ok(()) };
        // A map that covers no region for the batch yet (read from a node that had not read
        // the cluster's, or before the cluster was set up) is read again, as `at` does.
        let deadline = Instant::now() + self.inner.opts.retry_for;
        let located = loop {
            match self.locate(&first) {
                Err(Error::Server { code: ErrorCode::NoRegion, .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let _ = self.refresh().await;
                }
                r => break r?,
            }
        };
        if let (Some(r), _) = located {
            for (k, _) in &batch.ops {
                if !r.contains(k) {
                    let other = self.locate(k)?.0.map_or(0, |o| o.id);
                    return Err(Error::CrossRegion(r.id, other));
                }
            }
        }
        self.at(&first, false, |c| async move { c.write_batch(batch).await }).await
    }

    /// Every pair between `start` and `end` in key order (descending if `reverse`), region after
    /// region. Each region's part is read at its primary, page by page: writes landing meanwhile
    /// may or may not be seen.
    pub async fn scan_all(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.scan(start, end, 0, reverse).await
    }

    /// At most `limit` pairs (0: all) between `start` and `end` in key order, across regions.
    pub async fn scan(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let want = if limit == 0 { usize::MAX } else { limit };
        let parts: Vec<(Vec<u8>, OwnedBound, OwnedBound)> = match self.map() {
            None => vec![(Vec::new(), start.map(<[u8]>::to_vec), end.map(<[u8]>::to_vec))],
            Some(map) => {
                let mut regions: Vec<&RegionSpec> = map.regions.iter().filter(|r| overlaps(r, start, end)).collect();
                regions.sort_by_key(|r| r.start_bytes());
                if reverse {
                    regions.reverse();
                }
                regions.into_iter().map(|r| (r.start_bytes(), clamp(r, start, end).0, clamp(r, start, end).1)).collect()
            }
        };
        let mut out = Vec::new();
        for (probe, mut lo, mut hi) in parts {
            loop {
                let left = u32::try_from(want - out.len()).unwrap_or(u32::MAX).min(self.inner.opts.scan_page_pairs);
                let (l, h) = (as_ref(&lo), as_ref(&hi));
                let page = self.at(&probe, true, |c| async move { c.scan(l, h, left, reverse).await }).await?;
                out.extend(page.pairs);
                match page.resume {
                    Some(k) if out.len() < want => match reverse {
                        false => lo = Bound::Excluded(k),
                        true => hi = Bound::Excluded(k),
                    },
                    _ => break,
                }
            }
            if out.len() >= want {
                break;
            }
        }
        out.truncate(want);
        Ok(out)
    }
}

type OwnedBound = Bound<Vec<u8>>;

fn as_ref(b: &OwnedBound) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Whether the region holds any key of the range.
fn overlaps(r: &RegionSpec, start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    let (rs, re) = (r.start_bytes(), r.end_bytes());
    let below_end = match end {
        Bound::Included(e) => rs.as_slice() <= e,
        Bound::Excluded(e) => rs.as_slice() < e,
        Bound::Unbounded => true,
    };
    let above_start = match (start, &re) {
        (_, None) | (Bound::Unbounded, _) => true,
        (Bound::Included(s) | Bound::Excluded(s), Some(re)) => s < re.as_slice(),
    };
    below_end && above_start
}

/// The range cut to the region's keys.
fn clamp(r: &RegionSpec, start: Bound<&[u8]>, end: Bound<&[u8]>) -> (OwnedBound, OwnedBound) {
    let rs = r.start_bytes();
    let lo = match start {
        Bound::Included(s) | Bound::Excluded(s) if s >= rs.as_slice() => start.map(<[u8]>::to_vec),
        _ => Bound::Included(rs),
    };
    let hi = match (end, r.end_bytes()) {
        (Bound::Unbounded, Some(re)) => Bound::Excluded(re),
        (Bound::Included(e) | Bound::Excluded(e), Some(re)) if e >= re.as_slice() => Bound::Excluded(re),
        (e, _) => e.map(<[u8]>::to_vec),
    };
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(start: &str, end: Option<&str>) -> RegionSpec {
        RegionSpec {
            id: 1,
            start: start.into(),
            end: end.map(str::to_string),
            primary: "n1".into(),
            backups: vec![],
            epoch: 1,
            leases: Default::default(),
            learners: Vec::new(),
            away: Default::default(),
        }
    }

    #[test]
    fn ranges_are_cut_to_regions() {
        let r = region("b", Some("d"));
        assert!(overlaps(&r, Bound::Included(b"a"), Bound::Excluded(b"c")));
        assert!(!overlaps(&r, Bound::Included(b"d"), Bound::Unbounded));
        assert!(!overlaps(&r, Bound::Unbounded, Bound::Excluded(b"b")));
        assert!(overlaps(&r, Bound::Unbounded, Bound::Included(b"b")));
        assert_eq!(
            clamp(&r, Bound::Included(b"a"), Bound::Unbounded),
            (Bound::Included(b"b".to_vec()), Bound::Excluded(b"d".to_vec()))
        );
        assert_eq!(
            clamp(&r, Bound::Excluded(b"bb"), Bound::Included(b"c")),
            (Bound::Excluded(b"bb".to_vec()), Bound::Included(b"c".to_vec()))
        );
        let last = region("x", None);
        assert_eq!(
            clamp(&last, Bound::Unbounded, Bound::Unbounded),
            (Bound::Included(b"x".to_vec()), Bound::Unbounded)
        );
    }
}
