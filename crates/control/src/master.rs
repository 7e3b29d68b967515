//! The master: one node, elected through etcd, that keeps every region's group whole.
//!
//! Each tick it reads the cluster ([`View`]) and, region by region, takes the first step that
//! applies ([`plan`]): finish a change the region log holds; assign an unassigned region;
//! replace a lost primary (promote the first backup that still holds the region under the
//! lease it was given it with, the existing promotion: L0 rebuilt from the replicated logs);
//! drop lost backups; add a backup while the group is short of `replicas`. Every write is an
//! etcd transaction comparing the master's term and the region record's revision, so a
//! deposed master, or one acting on an old read, changes nothing. Steps that need a node's
//! help (a promotion, a new backup's full copy) are logged in the region log first, and a new
//! master finishes them.
//!
//! The only failure signal is etcd's: a node key deleted with its lease, or a member whose
//! lease in the map is not its node's live lease.

use crate::etcd::{Compare, CompareOp, Txn, TxnOp};
use crate::layout::{Intent, RegionRecord, Report, Request};
use crate::schedule::{merge_applies, planned, stale_requests, transfer_applies, Tally};
use crate::session::Session;
use crate::view::View;
use crate::{Error, Result};
use halyard_cluster::RegionSpec;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// How often the master reads the cluster.
pub const TICK: Duration = Duration::from_millis(100);

/// Longest a promotion request may take (the new primary rebuilds its L0).
const PROMOTE_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest a primary may take to fence a region it hands off: it first writes its L0 into L1
/// (still serving), then fences and waits for its backups' acknowledgements.
const HANDOFF_TIMEOUT: Duration = Duration::from_secs(60);

/// The master's election key and its create revision: the term every write compares.
#[derive(Clone, Debug)]
struct Term {
    key: Vec<u8>,
    rev: i64,
}

pub use crate::schedule::Step;

/// The first step region `r` needs, if any; `loads` counts each live node's regions and is
/// raised for a node the step adds.
pub fn plan(view: &View, r: &RegionRecord, replicas: usize, tally: &mut Tally) -> Option<Step> {
    let spec = &r.spec;
    if spec.primary.is_empty() {
        return None;
    }
    let primary_holds = view.holds(r, &spec.primary);
    // The right side of a merge under way waits for it, also when its primary is lost: the
    // merge's own step then finishes it (its backups merged) or rolls it back.
    if view.intents.iter().any(|(_, i)| matches!(i, Intent::Merge { right, .. } if *right == spec.id)) {
        return None;
    }
    if let Some((key, i)) = view.intents.iter().find(|(_, i)| i.region() == spec.id) {
        // A copy from a lost primary is dropped below instead of finished.
        if primary_holds || !matches!(i, Intent::AddBackup { .. }) {
            return Some(Step::Finish(key.clone(), i.clone()));
        }
    }
    if !primary_holds {
        let learners = view.learners(spec.id);
        if !learners.is_empty() {
            return Some(Step::Drop(learners));
        }
        // The backup holding the most of the log (by the nodes' progress records; under
        // `last-write` every backup holds every acknowledged write, so this keeps the most of
        // what was not acknowledged yet). Ties go to the group's order.
        let holding = spec.backups.iter().filter(|b| view.holds(r, b));
        if let Some(b) = holding.rev().max_by_key(|b| view.lsn(b, spec.id)) {
            return Some(Step::Promote(b.clone()));
        }
        if view.live.contains_key(&spec.primary) {
            return Some(Step::Reconfirm);
        }
        return None;
    }
    let lost: Vec<String> = spec.learners.iter().filter(|b| !view.holds(r, b)).cloned().collect();
    if !lost.is_empty() {
        return Some(Step::Drop(lost));
    }
    let away: Vec<String> = spec.backups.iter().filter(|b| !view.holds(r, b)).cloned().collect();
    if !away.is_empty() {
        return Some(Step::Away(away));
    }
    let silent: Vec<String> = current_reports(view, r).map(|(_, rep)| rep.node.clone()).collect();
    if !silent.is_empty() {
        return Some(Step::Away(silent));
    }
    let gone: Vec<String> = spec.away.keys().filter(|n| view.emptying(n)).cloned().collect();
    if !gone.is_empty() {
        return Some(Step::Drop(gone));
    }
    if spec.backups.len() + spec.learners.len() + 1 < replicas {
        if let Some(step) = refill(view, r, tally) {
            return Some(step);
        }
    }
    planned(view, r, tally, view.revision as u64)
}

/// A new member for a group short of copies: a member that went away and is back rejoins
/// first; while another's place is kept (`replace_after`), nothing; then the least loaded
/// eligible node outside the group.
fn refill(view: &View, r: &RegionRecord, tally: &mut Tally) -> Option<Step> {
    let spec = &r.spec;
    let back = spec.away.keys().find(|n| crate::schedule::eligible(view, n) && !view.leaving.contains(*n));
    if let Some(n) = back {
        tally.busy += 1;
        return Some(Step::Add(n.clone()));
    }
    if spec.away.values().any(|at| !expired(view, *at)) {
        return None;
    }
    let pick = view
        .live
        .keys()
        .filter(|n| !spec.has_member(n) && crate::schedule::eligible(view, n))
        .min_by_key(|n| tally.loads.get(*n).copied().unwrap_or(0))
        .cloned()?;
    *tally.loads.entry(pick.clone()).or_default() += 1;
    tally.busy += 1;
    Some(Step::Add(pick))
}

/// The reports that still apply to region `r`: made by its primary, at its epoch, about one of
/// its backups.
fn current_reports<'v>(view: &'v View, r: &'v RegionRecord) -> impl Iterator<Item = &'v (String, Report)> + 'v {
    let s = &r.spec;
    view.reports.iter().filter(move |(_, rep)| {
        rep.region == s.id && rep.epoch == s.epoch && rep.by == s.primary && s.backups.contains(&rep.node)
    })
}

/// Reports that no longer apply (an older epoch, another primary, a node no longer a backup).
fn stale_reports(view: &View) -> Vec<String> {
    view.reports
        .iter()
        .filter(|(key, rep)| {
            view.regions.get(&rep.region).is_none_or(|(r, _)| !current_reports(view, r).any(|(k, _)| k == key))
        })
        .map(|(k, _)| k.clone())
        .collect()
}

/// Groups for the unassigned regions once `replicas` nodes are live: primaries spread over
/// the least loaded nodes, backups after them.
pub fn assign(view: &View, replicas: usize, tally: &mut Tally) -> Vec<(RegionRecord, i64)> {
    let want = replicas.max(1);
    if view.live.len() < want {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut leads: BTreeMap<String, usize> = BTreeMap::new();
    for (r, _) in view.regions.values() {
        *leads.entry(r.spec.primary.clone()).or_default() += 1;
    }
    for (r, rev) in view.regions.values().filter(|(r, _)| r.spec.primary.is_empty()) {
        let mut nodes: Vec<&String> = view.live.keys().filter(|n| crate::schedule::eligible(view, n)).collect();
        nodes.sort_by_key(|n| tally.loads.get(*n).copied().unwrap_or(0));
        nodes.truncate(want);
        // Of the least loaded nodes, the one leading the fewest regions leads this one.
        if let Some(i) =
            (0..nodes.len()).min_by_key(|&i| nodes.get(i).map_or(0, |n| leads.get(*n).copied().unwrap_or(0)))
        {
            nodes.swap(0, i);
        }
        let group: Vec<String> = nodes.into_iter().cloned().collect();
        if let Some(p) = group.first() {
            *leads.entry(p.clone()).or_default() += 1;
        }
        let mut spec = r.spec.clone();
        for n in &group {
            *tally.loads.entry(n.clone()).or_default() += 1;
            if let Some(rec) = view.live.get(n) {
                spec.leases.insert(n.clone(), rec.lease);
            }
        }
        let Some((first, rest)) = group.split_first() else { continue };
        spec.primary = first.clone();
        spec.backups = rest.to_vec();
        spec.epoch += 1;
        out.push((RegionRecord { spec, version: r.version }, *rev));
    }
    out
}

/// The region once `node` leads it at `epoch`: the old primary leaves the group, its place
/// kept (it rejoins first once its node is back).
fn promoted(spec: &RegionSpec, node: &str, epoch: u64, now_ms: u64) -> RegionSpec {
    let mut s = spec.clone();
    s.leases.remove(&s.primary);
    if !s.primary.is_empty() {
        s.away.insert(s.primary.clone(), now_ms);
    }
    s.away.remove(node);
    s.backups.retain(|b| b != node);
    s.learners.retain(|b| b != node);
    s.primary = node.to_string();
    s.epoch = s.epoch.max(epoch);
    s
}

/// Milliseconds since the Unix epoch, as the region records' `away` times count them.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Whether a place kept since `at` (ms) is past the cluster's `replace_after`.
fn expired(view: &View, at: u64) -> bool {
    let after = view.config.as_ref().map_or(crate::layout::DEFAULT_REPLACE_AFTER_SECS, |c| c.replace_after_secs);
    now_ms().saturating_sub(at) >= after.saturating_mul(1000)
}

/// The master of a cluster, run by every node; it acts only while elected.
pub struct Master {
    session: Arc<Session>,
    busy: Mutex<HashSet<u32>>,
    stats: Arc<crate::stats::MasterStats>,
    /// The highest region id this master handed to a split: regions are worked on at once,
    /// and two splits of one tick see the same view.
    last_id: Mutex<u32>,
    /// When each region's primary role last moved: the balancer leaves it alone for
    /// [`BALANCE_COOLDOWN`] (its rates are a moment old, and moving it back and forth costs
    /// every move a handoff).
    moved: Mutex<BTreeMap<u32, std::time::Instant>>,
    /// When each region was last split (both halves): neither merges for [`MERGE_AFTER_SPLIT`].
    split_at: Mutex<BTreeMap<u32, std::time::Instant>>,
}

/// How long the balancer leaves a region alone after its primary role moved.
const BALANCE_COOLDOWN: Duration = Duration::from_secs(60);

/// How long the halves of a split stay apart before they may merge (a load split's halves
/// are idle once the load moved on: merging them at once would split them again).
const MERGE_AFTER_SPLIT: Duration = Duration::from_secs(300);

impl Master {
    /// Campaigns for the master role with the session's lease and, while elected, keeps the
    /// regions' groups whole, recording its handoffs in `stats`. Runs until the process ends.
    pub async fn run(session: Arc<Session>, stats: Arc<crate::stats::MasterStats>) {
        let m = Arc::new(Master {
            session,
            busy: Mutex::new(HashSet::new()),
            stats,
            last_id: Mutex::new(0),
            moved: Mutex::new(BTreeMap::new()),
            split_at: Mutex::new(BTreeMap::new()),
        });
        loop {
            let Some(lease) = m.session.holds() else {
                tokio::time::sleep(TICK).await;
                continue;
            };
            let Some(term) = m.campaign(lease).await else {
                tokio::time::sleep(TICK).await;
                continue;
            };
            tracing::info!(node = m.session.name(), term = term.rev, "elected master");
            while m.session.holds() == Some(lease) {
                match tokio::time::timeout(m.session.ttl(), m.clone().tick(&term)).await {
                    Ok(Ok(true)) => {}
                    Ok(Ok(false)) => break,
                    Ok(Err(e)) => tracing::warn!("master: {e}"),
                    Err(_) => tracing::warn!("master: reading the cluster timed out"),
                }
                tokio::time::sleep(TICK).await;
            }
            tracing::warn!(node = m.session.name(), "no longer master");
        }
    }

    /// Waits to be elected under `lease`; None if the lease lapses first or etcd fails.
    async fn campaign(&self, lease: i64) -> Option<Term> {
        let mut c = self.session.client();
        let name = self.session.name().to_string();
        let won = tokio::select! {
            r = c.campaign(self.session.layout().election(), name, lease) => r,
            _ = self.session.lease_changed(lease) => return None,
        };
        match won {
            Ok(mut r) => r.take_leader().map(|k| Term { key: k.key().to_vec(), rev: k.rev() }),
            Err(e) => {
                tracing::warn!("campaign for master failed: {e}");
                None
            }
        }
    }

    /// One pass over the cluster; false once another node leads.
    async fn tick(self: Arc<Self>, term: &Term) -> Result<bool> {
        let mut c = self.session.client();
        let view = Arc::new(View::load(&mut c, self.session.layout()).await?);
        if view.candidates.first().map(|c| c.1.as_bytes()) != Some(term.key.as_slice()) {
            return Ok(false);
        }
        let replicas = view.config.as_ref().map_or(1, |c| c.replicas);
        let mut tally = Tally::new(&view);
        {
            let mut moved = self.moved.lock();
            moved.retain(|_, at| at.elapsed() < BALANCE_COOLDOWN);
            tally.cooling = moved.keys().copied().collect();
            let mut split = self.split_at.lock();
            split.retain(|_, at| at.elapsed() < MERGE_AFTER_SPLIT);
            tally.fresh = split.keys().copied().collect();
        }
        let mut stale_keys = stale_reports(&view);
        for k in stale_requests(&view) {
            tracing::info!(request = %k, "request carried out or no longer applicable (no such region, or the target is not a live member): removed");
            stale_keys.push(k);
        }
        let stale: Vec<TxnOp> = stale_keys.iter().map(|k| TxnOp::delete(k.as_str(), None)).collect();
        if !stale.is_empty() {
            self.commit(term, None, stale).await?;
        }
        for (r, rev) in assign(&view, replicas, &mut tally) {
            tracing::info!(region = r.spec.id, primary = %r.spec.primary, backups = ?r.spec.backups, "assigning region");
            self.commit(term, Some((r.spec.id, rev)), vec![self.put_region(&r)]).await?;
        }
        for (r, rev) in view.regions.values() {
            let id = r.spec.id;
            if self.busy.lock().contains(&id) {
                continue;
            }
            let Some(step) = plan(&view, r, replicas, &mut tally) else { continue };
            self.busy.lock().insert(id);
            let (me, view, r, rev, term) = (self.clone(), view.clone(), r.clone(), *rev, term.clone());
            tokio::spawn(async move {
                tracing::info!(region = id, ?step, "master step");
                if let Err(e) = me.carry(&term, &view, &r, rev, step).await {
                    tracing::warn!(region = id, "master step failed: {e}; retrying on a later tick");
                }
                me.busy.lock().remove(&id);
            });
        }
        Ok(true)
    }

    fn put_region(&self, r: &RegionRecord) -> TxnOp {
        TxnOp::put(self.session.layout().region(r.spec.id), serde_json::to_vec(r).unwrap_or_default(), None)
    }

    fn with_spec(r: &RegionRecord, spec: RegionSpec) -> RegionRecord {
        RegionRecord { spec, version: r.version }
    }

    /// Runs `ops` if this master's term still holds and (with `region`) the region's record is
    /// still at the revision the decision was made on; false if not.
    async fn commit(&self, term: &Term, region: Option<(u32, i64)>, ops: Vec<TxnOp>) -> Result<bool> {
        self.commit_if(term, region, Vec::new(), ops).await
    }

    /// [`Self::commit`], also requiring `more`.
    async fn commit_if(
        &self,
        term: &Term,
        region: Option<(u32, i64)>,
        more: Vec<Compare>,
        ops: Vec<TxnOp>,
    ) -> Result<bool> {
        let mut cmp = vec![Compare::create_revision(term.key.clone(), CompareOp::Equal, term.rev)];
        if let Some((id, rev)) = region {
            cmp.push(Compare::mod_revision(self.session.layout().region(id), CompareOp::Equal, rev));
        }
        cmp.extend(more);
        let mut c = self.session.client();
        let r = tokio::time::timeout(self.session.ttl(), c.txn(Txn::new().when(cmp).and_then(ops)))
            .await
            .map_err(|_| Error::Invalid("etcd did not answer a transaction in time".into()))??;
        Ok(r.succeeded())
    }

    /// A comparison that holds while region `id` has no record.
    fn absent(&self, id: u32) -> Compare {
        Compare::create_revision(self.session.layout().region(id), CompareOp::Equal, 0)
    }

    /// The transaction of a step that only rewrites the region record (or puts a request):
    /// Away, Drop, Reconfirm, Schedule; None for the steps that need a node's help.
    fn regroup(&self, view: &View, r: &RegionRecord, step: &Step) -> Option<Vec<TxnOp>> {
        let spec = &r.spec;
        let mut s = spec.clone();
        s.epoch += 1;
        match step {
            Step::Away(nodes) => {
                s.backups.retain(|b| !nodes.contains(b));
                s.leases.retain(|n, _| !nodes.contains(n));
                s.away.extend(nodes.iter().map(|n| (n.clone(), now_ms())));
                tracing::info!(
                    region = spec.id,
                    ?nodes,
                    "backups out of the group, their places kept for replace_after"
                );
                Some(vec![self.put_region(&Self::with_spec(r, s))])
            }
            Step::Drop(nodes) => {
                s.away.retain(|n, _| !nodes.contains(n));
                s.backups.retain(|b| !nodes.contains(b));
                s.learners.retain(|b| !nodes.contains(b));
                s.leases.retain(|n, _| !nodes.contains(n));
                let mut ops = vec![self.put_region(&Self::with_spec(r, s))];
                for (key, i) in &view.intents {
                    if matches!(i, Intent::AddBackup { region, node, .. } if *region == spec.id && nodes.contains(node))
                    {
                        ops.push(TxnOp::delete(key.as_str(), None));
                    }
                }
                Some(ops)
            }
            Step::Reconfirm => {
                let lease = view.live.get(&s.primary).map_or(0, |n| n.lease);
                s.leases.insert(s.primary.clone(), lease);
                Some(vec![self.put_region(&Self::with_spec(r, s))])
            }
            Step::Schedule(q) => {
                let key = self.session.layout().request(q.region());
                Some(vec![TxnOp::put(key, serde_json::to_vec(q).unwrap_or_default(), None)])
            }
            _ => None,
        }
    }

    async fn carry(&self, term: &Term, view: &View, r: &RegionRecord, rev: i64, step: Step) -> Result<()> {
        let spec = &r.spec;
        let at = Some((spec.id, rev));
        if let Some(ops) = self.regroup(view, r, &step) {
            self.commit(term, at, ops).await?;
            return Ok(());
        }
        match step {
            Step::Promote(node) => {
                let epoch = spec.epoch + 1;
                let key = self.session.layout().log(view.revision, spec.id);
                let intent = Intent::Promote { region: spec.id, node: node.clone(), epoch };
                let put = TxnOp::put(key.as_str(), serde_json::to_vec(&intent).unwrap_or_default(), None);
                if self.commit(term, at, vec![put]).await? {
                    self.promote(term, view, r, rev, &key, (&node, epoch), 0).await?;
                }
            }
            Step::Add(node) => {
                let mut s = spec.clone();
                let lease = view.live.get(&node).map_or(0, |n| n.lease);
                // The node's own place, or a copy made elsewhere once the places kept expired.
                s.away.remove(&node);
                s.away.retain(|_, at| !expired(view, *at));
                s.learners.push(node.clone());
                s.leases.insert(node.clone(), lease);
                s.epoch += 1;
                let epoch = s.epoch;
                let key = self.session.layout().log(view.revision, spec.id);
                let intent = Intent::AddBackup { region: spec.id, node: node.clone(), epoch };
                let ops = vec![
                    self.put_region(&Self::with_spec(r, s.clone())),
                    TxnOp::put(key.as_str(), serde_json::to_vec(&intent).unwrap_or_default(), None),
                ];
                if self.commit(term, at, ops).await? {
                    self.copied(term, view, &s, &key, &node).await?;
                }
            }
            Step::Finish(key, Intent::Promote { node, epoch, .. }) => {
                if spec.epoch >= epoch || !view.holds(r, &node) {
                    // Done already, or the node is lost too (a later tick picks another).
                    self.commit(term, None, vec![TxnOp::delete(key.as_str(), None)]).await?;
                } else {
                    self.promote(term, view, r, rev, &key, (&node, epoch), 0).await?;
                }
            }
            Step::Transfer(to) => {
                self.moved.lock().insert(spec.id, std::time::Instant::now());
                let epoch = spec.epoch + 1;
                let key = self.session.layout().log(view.revision, spec.id);
                let intent = Intent::Transfer { region: spec.id, from: spec.primary.clone(), to: to.clone(), epoch };
                let mut ops = vec![TxnOp::put(key.as_str(), serde_json::to_vec(&intent).unwrap_or_default(), None)];
                for (k, q) in &view.requests {
                    if matches!(q, Request::Transfer { region, .. } if *region == spec.id) {
                        ops.push(TxnOp::delete(k.as_str(), None));
                    }
                }
                if self.commit(term, at, ops).await? {
                    self.transfer(term, view, r, rev, &key, &to, epoch).await?;
                }
            }
            Step::Finish(key, Intent::Transfer { from, to, epoch, .. }) => {
                if spec.epoch >= epoch || spec.primary != from || !view.holds(r, &from) {
                    // Done, or the primary was lost meanwhile (a failover takes over).
                    self.commit(term, None, vec![TxnOp::delete(key.as_str(), None)]).await?;
                } else if !transfer_applies(view, r, &to) {
                    self.roll_back(term, r, rev, &key, 0).await?;
                } else {
                    self.transfer(term, view, r, rev, &key, &to, epoch).await?;
                }
            }
            Step::Finish(key, Intent::AddBackup { node, .. }) => {
                if !spec.learners.contains(&node) || !view.holds(r, &node) {
                    self.commit(term, None, vec![TxnOp::delete(key.as_str(), None)]).await?;
                } else {
                    self.copied(term, view, spec, &key, &node).await?;
                }
            }
            Step::Split(at) => self.begin_split(term, view, r, rev, &at).await?,
            Step::Finish(key, Intent::Split { at, child, epoch, .. }) => {
                if spec.epoch > epoch || !view.holds(r, &spec.primary) {
                    // Done, or its primary was lost: a failover decides (the split is dropped).
                    self.commit(term, None, vec![TxnOp::delete(key.as_str(), None)]).await?;
                } else {
                    self.split(term, view, r, rev, &key, (&at, child)).await?;
                }
            }
            Step::Merge(right) => self.begin_merge(term, view, (r, rev), right).await?,
            Step::Finish(key, Intent::Merge { epoch, right, right_epoch, .. }) => {
                self.finish_merge(term, view, (r, rev), &key, (epoch, right, right_epoch)).await?
            }
            Step::Away(_) | Step::Drop(_) | Step::Reconfirm | Step::Schedule(_) => {}
        }
        Ok(())
    }

    /// Asks `node` to lead the region at `epoch`, then records it and ends the log entry. A
    /// node whose last LSN falls short of `min_lsn` (a handoff's fenced LSN; 0 after a failure)
    /// is not recorded: the handoff is rolled back.
    #[expect(clippy::too_many_arguments, reason = "the pieces of one promotion, all needed by its last step")]
    async fn promote(
        &self,
        term: &Term,
        view: &View,
        r: &RegionRecord,
        rev: i64,
        key: &str,
        (node, epoch): (&str, u64),
        min_lsn: u64,
    ) -> Result<()> {
        let addr = view.members.get(node).map(|m| m.replication.clone()).unwrap_or_default();
        let ask = halyard_admin::promote(&addr, r.spec.id, epoch);
        let (lsn, dropped) = tokio::time::timeout(PROMOTE_TIMEOUT, ask)
            .await
            .map_err(|_| Error::Invalid(format!("{node} did not finish its promotion within {PROMOTE_TIMEOUT:?}")))??;
        if lsn < min_lsn {
            // A handoff's target that lacks writes the fenced primary acknowledged must not be
            // named: the old primary, which holds them all, leads again at an epoch above the
            // target's (which then serves nothing and takes a copy as a backup).
            tracing::error!(
                region = r.spec.id,
                node,
                lsn,
                fenced = min_lsn,
                "the promoted backup lacks acknowledged writes; rolling the handoff back"
            );
            self.stats.handoffs_rolled_back.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.roll_back(term, r, rev, key, epoch + 1).await?;
            return Err(Error::Invalid(format!(
                "handoff of region {} rolled back: {node} holds LSN {lsn}, the primary fenced at {min_lsn}",
                r.spec.id
            )));
        }
        let s = promoted(&r.spec, node, epoch, now_ms());
        let ops = vec![self.put_region(&Self::with_spec(r, s)), TxnOp::delete(key, None)];
        self.commit(term, Some((r.spec.id, rev)), ops).await?;
        tracing::info!(region = r.spec.id, node, epoch, last_lsn = lsn, dropped, "promoted");
        Ok(())
    }

    /// A planned handoff: the primary fences the region (and its backups acknowledge its last
    /// LSN), then `to` is promoted at `epoch` and the map names it, ending the log entry. If
    /// the primary cannot fence, the handoff is rolled back. A promotion without an answer is
    /// tried again by a later tick (the target may have begun to lead); one the target refuses,
    /// or whose target reports less than the fenced LSN, is rolled back at an epoch above the
    /// target's.
    #[expect(clippy::too_many_arguments, reason = "the pieces of one handoff, all needed by its last step")]
    async fn transfer(
        &self,
        term: &Term,
        view: &View,
        r: &RegionRecord,
        rev: i64,
        key: &str,
        to: &str,
        epoch: u64,
    ) -> Result<()> {
        let spec = &r.spec;
        let t0 = std::time::Instant::now();
        let addr = view.members.get(&spec.primary).map(|m| m.replication.clone()).unwrap_or_default();
        let fenced = tokio::time::timeout(HANDOFF_TIMEOUT, halyard_admin::handoff(&addr, spec.id, spec.epoch)).await;
        let lsn = match fenced {
            Ok(Ok(lsn)) => lsn,
            Ok(Err(e)) => return self.failed_handoff(term, r, rev, key, &e.to_string()).await,
            Err(_) => return self.failed_handoff(term, r, rev, key, "no answer in time").await,
        };
        let fenced_in = t0.elapsed();
        match self.promote(term, view, r, rev, key, (to, epoch), lsn).await {
            // The target refused to lead (a copy that cannot, or an earlier attempt that fenced
            // it at this epoch and failed): asking again would be refused for ever. The old
            // primary, fenced with every acknowledged write, leads again above the target's
            // epoch; the target serves nothing the map does not name it for.
            Err(Error::Admin(halyard_admin::Error::Rejected(why))) => {
                tracing::warn!(region = spec.id, to, "the handoff's target refused to lead: {why}; rolling back");
                self.stats.handoffs_rolled_back.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.roll_back(term, r, rev, key, epoch + 1).await?;
                return Err(Error::Invalid(format!("handoff of region {} rolled back: {to} refused to lead", spec.id)));
            }
            done => done?,
        }
        self.stats.fence_seconds.observe(fenced_in.as_secs_f64());
        self.stats.handoff_seconds.observe(t0.elapsed().as_secs_f64());
        tracing::info!(region = spec.id, from = %spec.primary, to, epoch, last_lsn = lsn, ?fenced_in, took = ?t0.elapsed(), "handed off");
        Ok(())
    }

    /// Logs a split of `r` at `at` (taking the operator's request) with a fresh id for the new
    /// region, above every region's and every pending split's, then carries it out.
    async fn begin_split(&self, term: &Term, view: &View, r: &RegionRecord, rev: i64, at: &str) -> Result<()> {
        let spec = &r.spec;
        let pending = view.intents.iter().filter_map(|(_, i)| match i {
            Intent::Split { child, .. } => Some(*child),
            _ => None,
        });
        let child = {
            let mut last = self.last_id.lock();
            *last = view.regions.keys().copied().chain(pending).max().unwrap_or(0).max(*last) + 1;
            *last
        };
        let key = self.session.layout().log(view.revision, spec.id);
        let intent = Intent::Split { region: spec.id, at: at.to_string(), child, epoch: spec.epoch };
        let ops = vec![
            TxnOp::put(key.as_str(), serde_json::to_vec(&intent).unwrap_or_default(), None),
            TxnOp::delete(self.session.layout().request(spec.id), None),
        ];
        if self.commit_if(term, Some((spec.id, rev)), vec![self.absent(child)], ops).await? {
            self.split(term, view, r, rev, &key, (at, child)).await?;
        }
        Ok(())
    }

    /// A split: the primary fences the region and splits its store at `at` into `child` (its
    /// backups follow in the stream), then one transaction narrows the region and creates the
    /// child with the same group, both at the next epoch and version (which ends the fence),
    /// and ends the log entry. A split that fails is asked again by a later tick: the primary
    /// may have split already, and the region stays fenced until the map moves on.
    async fn split(
        &self,
        term: &Term,
        view: &View,
        r: &RegionRecord,
        rev: i64,
        key: &str,
        (at, child): (&str, u32),
    ) -> Result<()> {
        let spec = &r.spec;
        let t0 = std::time::Instant::now();
        let addr = view.members.get(&spec.primary).map(|m| m.replication.clone()).unwrap_or_default();
        let ask = halyard_admin::split(&addr, spec.id, spec.epoch, halyard_cluster::key_bytes(at), child);
        let lsn = tokio::time::timeout(HANDOFF_TIMEOUT, ask)
            .await
            .map_err(|_| Error::Invalid(format!("{} did not split region {} in time", spec.primary, spec.id)))??;
        let (mut left, mut right) = (spec.clone(), spec.clone());
        left.end = Some(at.to_string());
        right.id = child;
        right.start = at.to_string();
        for s in [&mut left, &mut right] {
            s.epoch += 1;
        }
        let version = r.version + 1;
        let ops = vec![
            self.put_region(&RegionRecord { spec: left, version }),
            self.put_region(&RegionRecord { spec: right, version }),
            TxnOp::delete(key, None),
        ];
        // The child's record must not exist: a second split given the same id would overwrite
        // it, and the map would then leave a gap.
        if self.commit_if(term, Some((spec.id, rev)), vec![self.absent(child)], ops).await? {
            self.stats.splits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let now = std::time::Instant::now();
            self.split_at.lock().extend([(spec.id, now), (child, now)]);
            tracing::info!(region = spec.id, child, at, last_lsn = lsn, took = ?t0.elapsed(), "split");
        }
        Ok(())
    }

    /// Logs a merge of region `right` into `r` (taking the operator's request), then carries
    /// it out.
    async fn begin_merge(&self, term: &Term, view: &View, (r, rev): (&RegionRecord, i64), right: u32) -> Result<()> {
        let spec = &r.spec;
        let Some((x, xrev)) = view.regions.get(&right) else { return Ok(()) };
        let key = self.session.layout().log(view.revision, spec.id);
        let intent = Intent::Merge { region: spec.id, epoch: spec.epoch, right, right_epoch: x.spec.epoch };
        let ops = vec![
            TxnOp::put(key.as_str(), serde_json::to_vec(&intent).unwrap_or_default(), None),
            TxnOp::delete(self.session.layout().request(spec.id), None),
        ];
        if self.commit_if(term, Some((spec.id, rev)), vec![self.at_rev(right, *xrev)], ops).await? {
            self.merge(term, view, (r, rev), (x, *xrev), &key).await?;
        }
        Ok(())
    }

    /// A merge a master logged (the log entry `key`: `r` at `epoch`, `right` at `right_epoch`)
    /// and did not finish: asked of the primary again while both regions are as they were,
    /// else rolled back (a failover changed the group meanwhile): both fences end.
    async fn finish_merge(
        &self,
        term: &Term,
        view: &View,
        (r, rev): (&RegionRecord, i64),
        key: &str,
        (epoch, right, right_epoch): (u64, u32, u64),
    ) -> Result<()> {
        let same = |x: &RegionRecord| r.spec.epoch == epoch && x.spec.epoch == right_epoch;
        match view.regions.get(&right) {
            Some((x, xrev)) if same(x) && merge_applies(view, r, x) => {
                self.merge(term, view, (r, rev), (x, *xrev), key).await
            }
            // The primary was lost after it merged its store and shipped the merge to these
            // backups (their copy of `r` spans `x`): the map follows them, with only them as
            // `r`'s backups (one still holding the two apart takes a fresh copy later), and the
            // failover promotes one. Rolling back would ask them to lead a region they no
            // longer hold apart, and narrowing their copies to the map would drop `x`'s keys.
            Some((x, xrev)) if same(x) && !view.holds(r, &r.spec.primary) => {
                let merged = crate::schedule::merged_backups(view, r, x);
                if merged.is_empty() {
                    return self.unfence(term, (r, rev), Some(&(x.clone(), *xrev)), key).await;
                }
                let mut s = r.spec.clone();
                s.epoch = r.spec.epoch.max(x.spec.epoch) + 1;
                s.backups = merged;
                if self.commit_merge(term, (r, rev), (x, *xrev), key, s).await? {
                    tracing::warn!(
                        region = r.spec.id,
                        right = x.spec.id,
                        "merge finished without its lost primary: its backups had merged"
                    );
                }
                Ok(())
            }
            found => self.unfence(term, (r, rev), found, key).await,
        }
    }

    /// A merge of `x` into `r` (see [`Intent::Merge`]): the primary fences both and merges its
    /// store, then one transaction widens `r` over `x` at an epoch above both and deletes `x`'s
    /// record and the log entry. A merge the primary refuses (a region it cannot clean up yet)
    /// is rolled back: both serve again at a higher epoch. One without an answer is asked again
    /// by a later tick (the primary may have merged already; both stay fenced until then).
    async fn merge(
        &self,
        term: &Term,
        view: &View,
        (r, rev): (&RegionRecord, i64),
        (x, xrev): (&RegionRecord, i64),
        key: &str,
    ) -> Result<()> {
        let (spec, t0) = (&r.spec, std::time::Instant::now());
        let addr = view.members.get(&spec.primary).map(|m| m.replication.clone()).unwrap_or_default();
        let merged_epoch = spec.epoch.max(x.spec.epoch) + 1;
        let ask = halyard_admin::merge(&addr, (spec.id, spec.epoch), (x.spec.id, x.spec.epoch), merged_epoch);
        let lsn = match tokio::time::timeout(HANDOFF_TIMEOUT, ask).await {
            Ok(Ok(lsn)) => lsn,
            Ok(Err(halyard_admin::Error::Rejected(why))) => {
                tracing::warn!(
                    region = spec.id,
                    right = x.spec.id,
                    "the primary refused the merge: {why}; rolling back"
                );
                self.unfence(term, (r, rev), Some(&(x.clone(), xrev)), key).await?;
                return Err(Error::Invalid(format!(
                    "merge of regions {} and {} rolled back: {why}",
                    spec.id, x.spec.id
                )));
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => return Err(Error::Invalid(format!("{} did not merge in time", spec.primary))),
        };
        let mut s = spec.clone();
        s.epoch = merged_epoch;
        if self.commit_merge(term, (r, rev), (x, xrev), key, s).await? {
            tracing::info!(region = spec.id, right = x.spec.id, last_lsn = lsn, took = ?t0.elapsed(), "merged");
        }
        Ok(())
    }

    /// The merge's transaction: `merged` (the left region's spec at its new epoch) widened
    /// over `x` at the next `version`, `x`'s record and the log entry `key` deleted, while both
    /// records are as read. Whether it committed.
    async fn commit_merge(
        &self,
        term: &Term,
        (r, rev): (&RegionRecord, i64),
        (x, xrev): (&RegionRecord, i64),
        key: &str,
        mut merged: halyard_cluster::RegionSpec,
    ) -> Result<bool> {
        merged.end = x.spec.end.clone();
        let version = r.version.max(x.version) + 1;
        let ops = vec![
            self.put_region(&RegionRecord { spec: merged, version }),
            TxnOp::delete(self.session.layout().region(x.spec.id), None),
            TxnOp::delete(key, None),
        ];
        let done = self.commit_if(term, Some((r.spec.id, rev)), vec![self.at_rev(x.spec.id, xrev)], ops).await?;
        if done {
            self.stats.merges.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(done)
    }

    /// Ends a merge that will not happen: each of the two regions still at its record's
    /// revision serves again at a higher epoch (ending its fence), and the log entry goes.
    async fn unfence(
        &self,
        term: &Term,
        (r, rev): (&RegionRecord, i64),
        x: Option<&(RegionRecord, i64)>,
        key: &str,
    ) -> Result<()> {
        let mut s = r.spec.clone();
        s.epoch += 1;
        let mut ops = vec![self.put_region(&Self::with_spec(r, s)), TxnOp::delete(key, None)];
        let mut more = Vec::new();
        if let Some((x, xrev)) = x {
            let mut s = x.spec.clone();
            s.epoch += 1;
            ops.push(self.put_region(&Self::with_spec(x, s)));
            more.push(self.at_rev(x.spec.id, *xrev));
        }
        self.commit_if(term, Some((r.spec.id, rev)), more, ops).await?;
        Ok(())
    }

    /// A comparison that holds while region `id`'s record is at revision `rev`.
    fn at_rev(&self, id: u32, rev: i64) -> Compare {
        Compare::mod_revision(self.session.layout().region(id), CompareOp::Equal, rev)
    }

    async fn failed_handoff(&self, term: &Term, r: &RegionRecord, rev: i64, key: &str, why: &str) -> Result<()> {
        tracing::warn!(region = r.spec.id, primary = %r.spec.primary, "the primary did not fence the region for a handoff: {why}; rolling back");
        self.stats.handoffs_rolled_back.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.roll_back(term, r, rev, key, 0).await?;
        Err(Error::Invalid(format!("handoff of region {} rolled back: {why}", r.spec.id)))
    }

    /// Ends a handoff without a new primary: a new epoch names the old one again (which ends
    /// its fence).
    async fn roll_back(&self, term: &Term, r: &RegionRecord, rev: i64, key: &str, epoch: u64) -> Result<()> {
        let mut s = r.spec.clone();
        s.epoch = epoch.max(s.epoch + 1);
        let ops = vec![self.put_region(&Self::with_spec(r, s)), TxnOp::delete(key, None)];
        self.commit(term, Some((r.spec.id, rev)), ops).await?;
        Ok(())
    }

    /// Returns once `node` no longer holds its learner's place in `region` (its lease changed or
    /// ended, or the map moved on): the copy it was taking cannot make it a backup any more, and
    /// the next tick decides anew. Checks the map twice a second.
    async fn learner_lost(&self, region: u32, node: &str) -> String {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            let mut c = self.session.client();
            let Ok(now) = View::load(&mut c, self.session.layout()).await else { continue };
            match now.regions.get(&region) {
                Some((r, _)) if r.spec.learners.iter().any(|l| l == node) && now.holds(r, node) => {}
                _ => {
                    return format!(
                        "{node} no longer holds its place as a learner of region {region}; its copy is given up"
                    )
                }
            }
        }
    }

    /// Waits until the primary has sent learner `node` its full copy of the region, then makes
    /// it a backup (a new epoch: writes wait for it from then on, and it may be promoted) and
    /// ends the log entry, in one transaction.
    async fn copied(&self, term: &Term, view: &View, spec: &RegionSpec, key: &str, node: &str) -> Result<()> {
        let addr = |n: &str| view.members.get(n).cloned().unwrap_or_default();
        let (p, b) = (addr(&spec.primary), addr(node));
        let ask = halyard_admin::add_backup(&p.replication, spec.id, spec.epoch, node, &b.native, &b.replication);
        tokio::select! {
            done = ask => done?,
            why = self.learner_lost(spec.id, node) => return Err(Error::Invalid(why)),
        }
        // The copy took a while: decide on the region as it is now.
        let mut c = self.session.client();
        let now = View::load(&mut c, self.session.layout()).await?;
        let Some((r, rev)) = now.regions.get(&spec.id) else { return Ok(()) };
        let mut ops = vec![TxnOp::delete(key, None)];
        if r.spec.learners.iter().any(|l| l == node) {
            let mut s = r.spec.clone();
            s.learners.retain(|l| l != node);
            s.backups.push(node.to_string());
            s.epoch += 1;
            ops.push(self.put_region(&Self::with_spec(r, s)));
        }
        if self.commit(term, Some((spec.id, *rev)), ops).await? {
            tracing::info!(region = spec.id, node, "the new backup holds its full copy");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::NodeRecord;

    fn view(live: &[(&str, i64)], r: RegionSpec) -> (View, RegionRecord) {
        let mut v = View::default();
        for (n, lease) in live {
            v.live.insert(n.to_string(), NodeRecord { name: n.to_string(), lease: *lease, ..Default::default() });
        }
        let rec = RegionRecord { spec: r, version: 1 };
        v.regions.insert(rec.spec.id, (rec.clone(), 5));
        (v, rec)
    }

    fn spec(primary: &str, backups: &[&str], leases: &[(&str, i64)]) -> RegionSpec {
        RegionSpec {
            id: 1,
            start: String::new(),
            end: None,
            primary: primary.into(),
            backups: backups.iter().map(|b| b.to_string()).collect(),
            epoch: 3,
            leases: leases.iter().map(|(n, l)| (n.to_string(), *l)).collect(),
            learners: Vec::new(),
            away: Default::default(),
        }
    }

    #[test]
    fn lost_primary_promotes_a_backup_that_still_holds() {
        // n2 restarted (new lease 22): it holds nothing; n3 does.
        let s = spec("n1", &["n2", "n3"], &[("n1", 1), ("n2", 2), ("n3", 3)]);
        let (v, r) = view(&[("n2", 22), ("n3", 3)], s);
        assert_eq!(plan(&v, &r, 3, &mut Tally::default()), Some(Step::Promote("n3".into())));
        let p = promoted(&r.spec, "n3", 4, 0);
        assert_eq!((p.primary.as_str(), p.backups.clone(), p.epoch), ("n3", vec!["n2".to_string()], 4));
        assert!(!p.leases.contains_key("n1"));
    }

    #[test]
    fn the_backup_with_the_most_log_is_promoted() {
        let s = spec("n1", &["n2", "n3"], &[("n1", 1), ("n2", 2), ("n3", 3)]);
        let (mut v, r) = view(&[("n2", 2), ("n3", 3)], s);
        assert_eq!(plan(&v, &r, 3, &mut Tally::default()), Some(Step::Promote("n2".into())), "a tie: group order");
        for (node, lsn) in [("n2", 40), ("n3", 41)] {
            v.progress.entry(node.into()).or_default().lsn.insert(1, lsn);
        }
        assert_eq!(plan(&v, &r, 3, &mut Tally::default()), Some(Step::Promote("n3".into())));
    }

    #[test]
    fn a_learner_is_dropped_before_promotion_and_never_promoted() {
        let mut s = spec("n1", &[], &[("n1", 1), ("n2", 2)]);
        s.learners = vec!["n2".into()];
        let (mut v, r) = view(&[("n2", 2)], s);
        v.intents.push(("k".into(), Intent::AddBackup { region: 1, node: "n2".into(), epoch: 3 }));
        assert_eq!(plan(&v, &r, 2, &mut Tally::default()), Some(Step::Drop(vec!["n2".into()])));
        // A learner whose primary holds is taking its copy: nothing more is added meanwhile.
        let (v2, r2) = view(&[("n1", 1), ("n2", 2)], r.spec.clone());
        assert_eq!(plan(&v2, &r2, 2, &mut Tally::default()), None);
    }

    #[test]
    fn returning_only_copy_leads_again_and_short_groups_grow() {
        let s = spec("n1", &[], &[("n1", 1)]);
        let (v, r) = view(&[("n1", 11), ("n2", 2)], s.clone());
        assert_eq!(plan(&v, &r, 2, &mut Tally::default()), Some(Step::Reconfirm));
        let (v, r) = view(&[("n1", 1), ("n2", 2)], s);
        assert_eq!(plan(&v, &r, 2, &mut Tally::default()), Some(Step::Add("n2".into())));
        assert_eq!(plan(&v, &r, 1, &mut Tally::default()), None);
    }

    #[test]
    fn a_place_kept_for_replace_after_waits_for_its_node_then_goes_elsewhere() {
        let mut s = spec("n1", &[], &[("n1", 1)]);
        s.away.insert("n2".into(), now_ms());
        // n2 is down, its place fresh: no copy on n3 meanwhile.
        let (mut v, r) = view(&[("n1", 1), ("n3", 3)], s.clone());
        v.config =
            Some(crate::ClusterConfig { replicas: 2, format: 1, replace_after_secs: 60, balance: true, merge: true });
        assert_eq!(plan(&v, &r, 2, &mut Tally::default()), None);
        // n2 back (a new lease): it rejoins first.
        v.live.insert("n2".into(), crate::NodeRecord { name: "n2".into(), lease: 22, ..Default::default() });
        assert_eq!(plan(&v, &r, 2, &mut Tally::default()), Some(Step::Add("n2".into())));
        // The place expired and n2 is still down: the copy goes elsewhere.
        v.live.remove("n2");
        v.config =
            Some(crate::ClusterConfig { replicas: 2, format: 1, replace_after_secs: 0, balance: true, merge: true });
        assert_eq!(plan(&v, &r, 2, &mut Tally::default()), Some(Step::Add("n3".into())));
        // A promotion keeps the old primary's place.
        let p = promoted(&r.spec, "n3", 9, 1234);
        assert_eq!(p.away.get("n1"), Some(&1234));
    }

    #[test]
    fn a_backup_its_primary_reports_is_dropped_and_stale_reports_go() {
        let s = spec("n1", &["n2", "n3"], &[("n1", 1), ("n2", 2), ("n3", 3)]);
        let (mut v, r) = view(&[("n1", 1), ("n2", 2), ("n3", 3)], s);
        let rep = |node: &str, epoch, by: &str| Report { region: 1, node: node.into(), epoch, by: by.into() };
        v.reports.push(("a".into(), rep("n3", 3, "n1")));
        v.reports.push(("b".into(), rep("n2", 2, "n1"))); // an older epoch
        v.reports.push(("c".into(), rep("n2", 3, "n3"))); // not the primary's
        assert_eq!(plan(&v, &r, 3, &mut Tally::default()), Some(Step::Away(vec!["n3".into()])));
        assert_eq!(stale_reports(&v), vec!["b".to_string(), "c".to_string()]);
    }

    #[test]
    fn lost_backups_go_away_and_unassigned_regions_spread() {
        let s = spec("n1", &["n2"], &[("n1", 1), ("n2", 2)]);
        let (v, r) = view(&[("n1", 1)], s);
        assert_eq!(plan(&v, &r, 2, &mut Tally::default()), Some(Step::Away(vec!["n2".into()])));
        let mut s = spec("", &[], &[]);
        let (mut v, _) = view(&[("n1", 1), ("n2", 2), ("n3", 3)], s.clone());
        s.id = 2;
        v.regions.insert(2, (RegionRecord { spec: s, version: 1 }, 6));
        let got = assign(&v, 2, &mut Tally::default());
        assert_eq!(got.len(), 2);
        assert_ne!(got[0].0.spec.primary, got[1].0.spec.primary);
        assert_eq!(got[0].0.spec.leases.len(), 2);
        // Three regions over three nodes with every copy on every node: one primary each.
        let mut s3 = spec("", &[], &[]);
        let (mut v, _) = view(&[("n1", 1), ("n2", 2), ("n3", 3)], s3.clone());
        for id in 2..=3 {
            s3.id = id;
            v.regions.insert(id, (RegionRecord { spec: s3.clone(), version: 1 }, 6));
        }
        let got = assign(&v, 3, &mut Tally::default());
        let mut primaries: Vec<&str> = got.iter().map(|(r, _)| r.spec.primary.as_str()).collect();
        primaries.sort();
        assert_eq!(primaries, ["n1", "n2", "n3"]);
    }
}
