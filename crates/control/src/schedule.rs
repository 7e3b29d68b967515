//! The master's placement decisions for a region whose group is whole (`master.rs` keeps
//! groups whole first): a node leaving on SIGTERM, an operator's transfer or move, a node
//! being drained, and the balancer, which evens out copies and primaries per node.
//!
//! Every decision is one [`Step`] the master carries out with the mechanisms it has (a new
//! backup is a learner fed a streaming full copy, then a backup; a primary moves by a planned
//! handoff; a copy leaves by a drop), each under a new epoch. A move is re-derived every tick
//! from the request (or the drain mark) and the region's group, so a master that dies half-way
//! leaves a state the next one continues from.
//!
//! **Limits** ([`Tally`]): a node takes at most one incoming full copy at a time and a primary
//! feeds at most one; the balancer starts at most one change a tick and only while no handoff
//! or copy is under way anywhere. **Targets** are chosen by power of two choices (Nova-LSM
//! §4.4): two eligible nodes sampled, the less loaded taken, so that many sources do not pile
//! onto one new node. **No oscillation**: the balancer acts only on a difference of two or more
//! (copies or primaries) between the most and least loaded eligible nodes, and leaves a region
//! whose primary role moved alone for a minute (`Tally::cooling`: its rates are a moment old,
//! and a region handed back and forth pays a handoff each time).

use crate::layout::{Intent, RegionRecord, Request};
use crate::view::View;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One step for one region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Finish (or drop) the change the region log holds under this key.
    Finish(String, Intent),
    /// Promote this backup (the primary is lost).
    Promote(String),
    /// The primary came back under a new lease and no backup holds the region: it leads again.
    Reconfirm,
    /// Remove these backups from the group (lost, leaving, moved away, or still copying when
    /// the primary was lost).
    Drop(Vec<String>),
    /// Take these backups out of the group (their node went away, left or stays silent),
    /// keeping their places for `replace_after`.
    Away(Vec<String>),
    /// Add this node as a backup (a learner first, fed a full copy).
    Add(String),
    /// Hand the primary role to this backup (a planned handoff).
    Transfer(String),
    /// Record this request (the balancer's move), carried out by later ticks.
    Schedule(Request),
    /// Split the region at this key (as region keys are written).
    Split(String),
    /// Merge this region (the one after it) into the region.
    Merge(u32),
}

/// What the steps planned so far in one tick commit nodes to, so that later regions of the
/// same tick see them.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Copies (primary or backup) per live node.
    pub loads: BTreeMap<String, usize>,
    /// Full copies each node is taking (it is a learner).
    pub incoming: BTreeMap<String, usize>,
    /// Full copies each primary is sending.
    pub outgoing: BTreeMap<String, usize>,
    /// Changes under way anywhere (intents, learners) or started this tick.
    pub busy: usize,
    /// Regions whose primary role moved a moment ago: the balancer leaves them alone.
    pub cooling: std::collections::HashSet<u32>,
    /// Regions a split made a moment ago: they do not merge (no split/merge flapping).
    pub fresh: std::collections::HashSet<u32>,
    /// The balancer's per-node sums, taken once per tick (the view does not change within it).
    sums: std::cell::OnceCell<Arc<Sums>>,
}

/// Per-node sums over every region of a view, for the balancer.
#[derive(Debug, Default)]
struct Sums {
    /// Bytes of the copies each node holds (primary or backup).
    bytes: BTreeMap<String, u64>,
    /// Regions each node leads.
    leads: BTreeMap<String, usize>,
    /// Requests a second the regions each node leads serve.
    heat: BTreeMap<String, u64>,
    /// The fewest requests a second of a region each node leads.
    coolest: BTreeMap<String, u64>,
}

impl Sums {
    fn of(view: &View) -> Sums {
        let mut s = Sums::default();
        for (x, _) in view.regions.values() {
            let (size, w) = (size(view, x), served(view, x));
            for n in std::iter::once(&x.spec.primary).chain(&x.spec.backups) {
                *s.bytes.entry(n.clone()).or_default() += size;
            }
            let p = &x.spec.primary;
            *s.leads.entry(p.clone()).or_default() += 1;
            *s.heat.entry(p.clone()).or_default() += w;
            let c = s.coolest.entry(p.clone()).or_insert(w);
            *c = (*c).min(w);
        }
        s
    }

    fn bytes(&self, n: &str) -> u64 {
        self.bytes.get(n).copied().unwrap_or(0)
    }

    fn leads(&self, n: &str) -> usize {
        self.leads.get(n).copied().unwrap_or(0)
    }

    fn heat(&self, n: &str) -> u64 {
        self.heat.get(n).copied().unwrap_or(0)
    }
}

impl Tally {
    /// The tally of `view` before any step of this tick.
    pub fn new(view: &View) -> Tally {
        let mut t = Tally {
            loads: view.live.keys().map(|n| (n.clone(), view.load_of(n))).collect(),
            busy: view.intents.len(),
            ..Tally::default()
        };
        for (r, _) in view.regions.values() {
            for l in &r.spec.learners {
                *t.incoming.entry(l.clone()).or_default() += 1;
                *t.outgoing.entry(r.spec.primary.clone()).or_default() += 1;
                t.busy += 1;
            }
        }
        t
    }

    fn load(&self, n: &str) -> usize {
        self.loads.get(n).copied().unwrap_or(0)
    }

    fn sums(&self, view: &View) -> Arc<Sums> {
        self.sums.get_or_init(|| Arc::new(Sums::of(view))).clone()
    }

    /// Records a new copy of a region led by `primary` on `node`.
    fn copy(&mut self, primary: &str, node: &str) {
        *self.loads.entry(node.to_string()).or_default() += 1;
        *self.incoming.entry(node.to_string()).or_default() += 1;
        *self.outgoing.entry(primary.to_string()).or_default() += 1;
        self.busy += 1;
    }

    /// Whether `primary` may send one more full copy to `node` now.
    fn may_copy(&self, primary: &str, node: &str) -> bool {
        self.incoming.get(node).copied().unwrap_or(0) == 0 && self.outgoing.get(primary).copied().unwrap_or(0) == 0
    }
}

/// Whether `node` may take new copies: live, not leaving, not drained, not removed.
pub fn eligible(view: &View, node: &str) -> bool {
    view.live.contains_key(node) && !view.leaving.contains(node) && !view.emptying(node)
}

/// Whether region `r` can be handed to `to`: a backup of its group that holds it and stays.
pub fn transfer_applies(view: &View, r: &RegionRecord, to: &str) -> bool {
    r.spec.backups.iter().any(|b| b == to) && view.holds(r, to) && !view.leaving.contains(to)
}

/// The backup of `r` that holds the most of its log among those that may lead it.
fn best_backup(view: &View, r: &RegionRecord) -> Option<String> {
    let s = &r.spec;
    let ok = |b: &&String| view.holds(r, b) && eligible(view, b);
    s.backups.iter().filter(ok).rev().max_by_key(|b| view.lsn(b, s.id)).cloned()
}

/// Power of two choices: of the eligible nodes outside `r`'s group that pass `fits`, two
/// picked at random (seeded by `seed`), the less loaded.
pub fn pick(view: &View, r: &RegionRecord, tally: &Tally, seed: u64, fits: impl Fn(&str) -> bool) -> Option<String> {
    let c: Vec<&String> = view.live.keys().filter(|n| eligible(view, n) && !r.spec.has_member(n) && fits(n)).collect();
    let (a, b) = match c.len() {
        0 => return None,
        1 => (0, 0),
        n => {
            let h = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(r.spec.id).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
            let a = (h % n as u64) as usize;
            let b = (a + 1 + ((h >> 32) % (n as u64 - 1)) as usize) % n;
            (a, b)
        }
    };
    let (x, y) = (c.get(a)?, c.get(b)?);
    Some(if tally.load(y) < tally.load(x) { (*y).clone() } else { (*x).clone() })
}

/// Whether region `r` can split at `at`: a key inside it, past its first.
pub fn split_applies(r: &RegionRecord, at: &str) -> bool {
    let k = halyard_cluster::key_bytes(at);
    r.spec.contains(&k) && k != r.spec.start_bytes()
}

/// The planned change region `r` needs next, if any (its group is whole): see the module
/// documentation. `seed` varies the balancer's samples from tick to tick.
pub fn planned(view: &View, r: &RegionRecord, tally: &mut Tally, seed: u64) -> Option<Step> {
    let spec = &r.spec;
    if view.leaving.contains(&spec.primary) {
        if let Some(b) = best_backup(view, r) {
            return Some(Step::Transfer(b));
        }
    }
    let leaving: Vec<String> = spec.backups.iter().filter(|b| view.leaving.contains(*b)).cloned().collect();
    if !leaving.is_empty() {
        return Some(Step::Away(leaving));
    }
    let leaving: Vec<String> = spec.learners.iter().filter(|b| view.leaving.contains(*b)).cloned().collect();
    if !leaving.is_empty() {
        return Some(Step::Drop(leaving));
    }
    for (_, q) in view.requests.iter().filter(|(_, q)| q.region() == spec.id) {
        let step = match q {
            Request::Transfer { to, .. } => transfer_applies(view, r, to).then(|| Step::Transfer(to.clone())),
            Request::Move { from, to, .. } => move_step(view, r, from, Some(to), tally, seed),
            Request::Split { at, .. } => split_applies(r, at).then(|| Step::Split(at.clone())),
            Request::Merge { .. } => {
                right_of(view, r).filter(|x| merge_applies(view, r, x)).map(|x| Step::Merge(x.spec.id))
            }
        };
        if step.is_some() {
            return step;
        }
    }
    // A region its primary finds past its size limit splits where the primary says it halves.
    let wanted = view.progress.get(&spec.primary).and_then(|p| p.splits.get(&spec.id));
    if let Some(at) = wanted.filter(|at| split_applies(r, at)) {
        return Some(Step::Split(at.clone()));
    }
    let drained: Vec<&String> = view.draining.iter().chain(&view.removed).filter(|n| r.spec.has_member(n)).collect();
    if let Some(from) = drained.first() {
        return move_step(view, r, from, None, tally, seed);
    }
    merge_step(view, r, tally).or_else(|| balance(view, r, tally, seed))
}

/// The region that starts where `r` ends, if any.
pub fn right_of<'v>(view: &'v View, r: &RegionRecord) -> Option<&'v RegionRecord> {
    let end = r.spec.end.as_ref()?;
    view.regions.values().map(|(x, _)| x).find(|x| &x.spec.start == end)
}

/// Whether `right` can be merged into `r` now: one node leads both, the same nodes back both
/// up, no copy is being taken and no change of `right` is under way.
pub fn merge_applies(view: &View, r: &RegionRecord, right: &RegionRecord) -> bool {
    merge_blocker(view, r, right).is_none()
}

/// Why `right` cannot be merged into `r` now ([`merge_applies`]), if it cannot; `Ok` reasons
/// pass by themselves (a change or copy under way), `Err` ones need the operator.
pub fn merge_blocker(view: &View, r: &RegionRecord, right: &RegionRecord) -> Option<Result<String, String>> {
    let sorted = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort();
        v
    };
    let (a, b) = (&r.spec, &right.spec);
    if a.primary != b.primary || sorted(&a.backups) != sorted(&b.backups) {
        return Some(Err(format!(
            "regions {} (primary {}, backups {:?}) and {} (primary {}, backups {:?}) must have the same primary and backups: move one's copies first",
            a.id, a.primary, a.backups, b.id, b.primary, b.backups
        )));
    }
    if !a.learners.is_empty() || !b.learners.is_empty() {
        return Some(Ok("a copy is being taken".into()));
    }
    if !view.holds(right, &b.primary) || !view.holds(r, &a.primary) {
        return Some(Ok(format!("{} does not hold both regions under its current lease", a.primary)));
    }
    let this = |i: &Intent| matches!(i, Intent::Merge { region, right, .. } if *region == a.id && *right == b.id);
    if view.intents.iter().any(|(_, i)| (i.region() == b.id || i.region() == a.id) && !this(i)) {
        return Some(Ok("a change of one of them is under way".into()));
    }
    None
}

/// The backups of a merge of `x` into `r` that applied it: alive, their copy of `r` spanning
/// `x` by their progress record ([`crate::layout::Progress::absorbed`]). Read after the
/// primary's lease ran out, so these records (published every second) are newer than the merge.
pub fn merged_backups(view: &View, r: &RegionRecord, x: &RegionRecord) -> Vec<String> {
    let merged = |b: &&String| {
        view.holds(r, b) && view.progress.get(*b).is_some_and(|p| p.absorbed.get(&x.spec.id) == Some(&r.spec.id))
    };
    r.spec.backups.iter().filter(merged).cloned().collect()
}

/// Whether `r`'s primary finds it small and idle enough to merge (its `progress/` record).
fn cold(view: &View, r: &RegionRecord) -> bool {
    view.progress.get(&r.spec.primary).is_some_and(|p| p.cold.contains(&r.spec.id))
}

/// Merges `r` with the region after it when both are small and idle by their primaries' own
/// limits and the cluster merges (`cluster init --no-merge` turns it off): at once when the
/// two groups are the same nodes with the same primary. Otherwise the right one's group is
/// aligned with `r`'s first, one request at a time (carried out by later ticks): a copy moves
/// from a node only it uses to a node only `r` uses (within the copy limits), then its primary
/// role moves to `r`'s primary. One change at a time in the whole cluster, and never a region
/// a split made a moment ago ([`Tally::fresh`]).
fn merge_step(view: &View, r: &RegionRecord, tally: &mut Tally) -> Option<Step> {
    let on = view.config.as_ref().is_some_and(|c| c.merge);
    if !on || tally.busy > 0 || !view.requests.is_empty() || tally.fresh.contains(&r.spec.id) || !cold(view, r) {
        return None;
    }
    let right = right_of(view, r)?;
    if tally.fresh.contains(&right.spec.id) || !cold(view, right) {
        return None;
    }
    if merge_applies(view, r, right) {
        tally.busy += 1;
        tracing::info!(region = r.spec.id, right = right.spec.id, "merging two small idle regions");
        return Some(Step::Merge(right.spec.id));
    }
    let members = |s: &halyard_cluster::RegionSpec| -> std::collections::BTreeSet<String> {
        std::iter::once(&s.primary).chain(&s.backups).cloned().collect()
    };
    let (mine, theirs) = (members(&r.spec), members(&right.spec));
    if mine != theirs {
        let from = theirs.difference(&mine).next()?;
        let to = mine.difference(&theirs).find(|n| eligible(view, n) && tally.may_copy(&right.spec.primary, n))?;
        if !right.spec.learners.is_empty() {
            return None;
        }
        tally.copy(&right.spec.primary, to);
        tracing::info!(region = right.spec.id, from = %from, to = %to, "aligning a small idle region's group with its left neighbour's for a merge");
        return Some(Step::Schedule(Request::Move { region: right.spec.id, from: from.clone(), to: to.clone() }));
    }
    if right.spec.primary != r.spec.primary && transfer_applies(view, right, &r.spec.primary) {
        tally.busy += 1;
        tracing::info!(region = right.spec.id, to = %r.spec.primary, "aligning a small idle region with its left neighbour's primary for a merge");
        return Some(Step::Schedule(Request::Transfer { region: right.spec.id, to: r.spec.primary.clone() }));
    }
    None
}

/// The next step of moving `r`'s copy off `from` (onto `to`, or a node [`pick`]s): add the
/// target as a learner, hand the primary role to a backup if `from` leads, drop `from`.
fn move_step(
    view: &View,
    r: &RegionRecord,
    from: &str,
    to: Option<&String>,
    tally: &mut Tally,
    seed: u64,
) -> Option<Step> {
    let spec = &r.spec;
    // A source that led and handed off is out of the group with its place kept (away): the
    // move still drops it, so that the place is not kept for a copy that moved.
    let holds_place = spec.has_member(from) || spec.away.contains_key(from);
    if !holds_place || !spec.learners.is_empty() {
        return None; // done, or a new copy is still being taken
    }
    let replicas = view.config.as_ref().map_or(1, |c| c.replicas);
    let others = std::iter::once(&spec.primary).chain(&spec.backups).filter(|n| *n != from && view.holds(r, n)).count();
    let missing = match to {
        Some(t) => spec.primary != *t && !spec.backups.contains(t),
        None => others < replicas,
    };
    if missing {
        let t = match to {
            Some(t) => eligible(view, t).then(|| t.clone())?,
            None => pick(view, r, tally, seed, |n| tally.may_copy(&spec.primary, n))?,
        };
        if !tally.may_copy(&spec.primary, &t) {
            return None;
        }
        tally.copy(&spec.primary, &t);
        return Some(Step::Add(t));
    }
    if spec.primary == from {
        let b = to.filter(|t| transfer_applies(view, r, t)).cloned().or_else(|| best_backup(view, r))?;
        tally.busy += 1;
        return Some(Step::Transfer(b));
    }
    Some(Step::Drop(vec![from.to_string()]))
}

/// The balancer's step for `r`, if the cluster is uneven and quiet: schedule a move of one of
/// `r`'s copies off the most loaded eligible node (a request, carried out by later ticks), or
/// hand `r`'s primary role to a backup on a node that leads two or more fewer regions.
fn balance(view: &View, r: &RegionRecord, tally: &mut Tally, seed: u64) -> Option<Step> {
    if tally.busy > 0 || !view.requests.is_empty() || view.config.as_ref().is_some_and(|c| !c.balance) {
        return None;
    }
    if tally.cooling.contains(&r.spec.id) {
        return None;
    }
    let spec = &r.spec;
    let nodes: Vec<&String> = view.live.keys().filter(|n| eligible(view, n)).collect();
    let (max, min) = (nodes.iter().map(|n| tally.load(n)).max()?, nodes.iter().map(|n| tally.load(n)).min()?);
    let group: Vec<&String> = std::iter::once(&spec.primary).chain(&spec.backups).collect();
    if max >= min + 2 {
        if let Some(from) = group.iter().find(|n| eligible(view, n) && tally.load(n) == max) {
            let to = pick(view, r, tally, seed, |n| tally.load(n) + 2 <= max)?;
            tally.busy += 1;
            tracing::info!(region = spec.id, from = %from, to = %to, "balancing copies: {max} on the busiest node, {min} on the idlest");
            return Some(Step::Schedule(Request::Move { region: spec.id, from: from.to_string(), to }));
        }
    }
    if let Some(step) = hot_step(view, r, tally) {
        return Some(step);
    }
    let sums = tally.sums(view);
    let leads = |n: &str| sums.leads(n);
    let (mine, fewest) = (leads(&spec.primary), nodes.iter().map(|n| leads(n)).min()?);
    // By count, the coolest regions move (the hot ones are `hot_step`'s).
    let cooler = sums.coolest.get(&spec.primary).is_some_and(|c| *c < served(view, r));
    if mine >= fewest + 2 && !cooler {
        let to = spec
            .backups
            .iter()
            .filter(|b| transfer_applies(view, r, b) && eligible(view, b))
            .min_by_key(|b| leads(b))?;
        if leads(to) + 2 <= mine {
            tally.busy += 1;
            tracing::info!(region = spec.id, from = %spec.primary, to = %to, "balancing primaries: {mine} led by the busiest node");
            return Some(Step::Transfer(to.clone()));
        }
    }
    bytes_step(view, r, tally, &nodes)
}

/// Nodes whose copies' bytes differ by less than this are even by bytes.
const BYTES_MIN_GAP: u64 = 64 << 20;

/// The bytes of `r` as its primary last published them (0: not known yet).
fn size(view: &View, r: &RegionRecord) -> u64 {
    view.progress.get(&r.spec.primary).and_then(|p| p.sizes.get(&r.spec.id)).copied().unwrap_or(0)
}

/// Bytes, once copies are even by count: a copy of `r` moves from the node holding the most
/// bytes to one holding the fewest when they differ by at least `BYTES_MIN_GAP` and a fifth of
/// the larger, and `r` is the largest region there that fits in half the gap (so the two never
/// trade places: no oscillation) and is at least an eighth of it (a few moves close it). The
/// target holds fewer copies than the source, so the counts stay as even as they were (with
/// every node at the same count, nothing moves by bytes).
fn bytes_step(view: &View, r: &RegionRecord, tally: &mut Tally, nodes: &[&String]) -> Option<Step> {
    let (spec, sums) = (&r.spec, tally.sums(view));
    let from = nodes.iter().copied().max_by_key(|n| (sums.bytes(n), std::cmp::Reverse(n.as_str())))?;
    let on_from = |x: &RegionRecord| x.spec.primary == *from || x.spec.backups.contains(from);
    if !on_from(r) {
        return None;
    }
    let (big, s) = (sums.bytes(from), size(view, r));
    let fits = |n: &str| !spec.has_member(n) && tally.load(n) < tally.load(from);
    let to = nodes.iter().copied().filter(|n| fits(n)).min_by_key(|n| (sums.bytes(n), n.as_str()))?;
    let gap = big - sums.bytes(to).min(big);
    if gap < BYTES_MIN_GAP || gap < big / 5 || s == 0 || s > gap / 2 || s < gap / 8 {
        return None;
    }
    let fits_gap = |x: &RegionRecord| size(view, x) > s && size(view, x) <= gap / 2;
    let larger = view.regions.values().any(|(x, _)| on_from(x) && !x.spec.has_member(to) && fits_gap(x));
    if larger {
        return None;
    }
    tally.busy += 1;
    tracing::info!(region = spec.id, from = %from, to = %to, bytes = s, "balancing bytes: {big} on the fullest node, {gap} more than on the emptiest");
    Some(Step::Schedule(Request::Move { region: spec.id, from: from.to_string(), to: to.to_string() }))
}

/// A node must serve at least this many requests a second before its primaries move for heat.
const HOT_MIN_OPS: u64 = 200;

/// The requests a second region `r` serves, as its primary last published them (its writes a
/// second, from a node that publishes no request counts).
fn served(view: &View, r: &RegionRecord) -> u64 {
    let Some(p) = view.progress.get(&r.spec.primary) else { return 0 };
    p.ops.get(&r.spec.id).or_else(|| p.writes.get(&r.spec.id)).copied().unwrap_or(0)
}

/// Hot regions first: when `r`'s primary serves at least 1.5 times the requests of `r`'s coolest
/// backup node, and `r` is the hottest region it leads whose move lowers the hotter of the two
/// nodes (the backup, once leading `r`, stays cooler than the primary was), `r`'s primary role
/// goes to that backup. A region hotter than the gap stays: moving it only moves the heat.
fn hot_step(view: &View, r: &RegionRecord, tally: &mut Tally) -> Option<Step> {
    let (spec, sums) = (&r.spec, tally.sums(view));
    let (hot, w) = (sums.heat(&spec.primary), served(view, r));
    let to = spec
        .backups
        .iter()
        .filter(|b| transfer_applies(view, r, b) && eligible(view, b))
        .min_by_key(|b| sums.heat(b))?;
    let cool = sums.heat(to);
    if w == 0 || hot < HOT_MIN_OPS || hot.saturating_mul(2) < cool.saturating_mul(3) || cool + w >= hot {
        return None;
    }
    let fits = |x: &RegionRecord| served(view, x) + cool < hot;
    let hotter = view.regions.values().any(|(x, _)| x.spec.primary == spec.primary && served(view, x) > w && fits(x));
    if hotter {
        return None;
    }
    tally.busy += 1;
    tracing::info!(region = spec.id, from = %spec.primary, to = %to, ops_per_sec = w, "balancing hot primaries: {hot} requests/s against {cool}");
    Some(Step::Transfer(to.clone()))
}

/// Requests that cannot be carried out or are done: dropped by the master (a transfer to a
/// node that is not a live backup; a move off a node no longer in the group, or onto a node
/// that is not live).
pub fn stale_requests(view: &View) -> Vec<String> {
    let busy = |id: u32| view.intents.iter().any(|(_, i)| i.region() == id);
    view.requests
        .iter()
        .filter(|(_, q)| {
            let Some((r, _)) = view.regions.get(&q.region()) else { return true };
            if busy(q.region()) {
                return false;
            }
            match q {
                Request::Transfer { to, .. } => !transfer_applies(view, r, to),
                Request::Move { from, to, .. } => {
                    !(r.spec.has_member(from) || r.spec.away.contains_key(from)) || !view.live.contains_key(to)
                }
                Request::Split { at, .. } => !split_applies(r, at),
                Request::Merge { .. } => !right_of(view, r).is_some_and(|x| merge_applies(view, r, x)),
            }
        })
        .map(|(k, _)| k.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{ClusterConfig, NodeRecord};
    use halyard_cluster::RegionSpec;

    /// Nodes n1..=n<live>, each under lease = its number; regions given as (primary, backups,
    /// learners), every member holding under its node's lease.
    fn cluster(live: usize, replicas: usize, regions: &[(&str, &[&str], &[&str])]) -> View {
        let mut v = View {
            config: Some(ClusterConfig { replicas, format: 1, replace_after_secs: 60, balance: true, merge: true }),
            revision: 7,
            ..View::default()
        };
        for i in 1..=live {
            let n = format!("n{i}");
            v.live.insert(n.clone(), NodeRecord { name: n, lease: i as i64, ..Default::default() });
        }
        for (i, (p, b, l)) in regions.iter().enumerate() {
            let names = std::iter::once(p).chain(b.iter()).chain(l.iter());
            let spec = RegionSpec {
                id: i as u32 + 1,
                start: String::new(),
                end: None,
                primary: p.to_string(),
                backups: b.iter().map(|x| x.to_string()).collect(),
                epoch: 3,
                leases: names.map(|n| (n.to_string(), n[1..].parse().unwrap())).collect(),
                learners: l.iter().map(|x| x.to_string()).collect(),
                away: Default::default(),
            };
            v.regions.insert(spec.id, (RegionRecord { spec, version: 1 }, 5));
        }
        v
    }

    fn step(v: &View, id: u32) -> Option<Step> {
        planned(v, &v.regions[&id].0, &mut Tally::new(v), 1)
    }

    fn request(v: &mut View, q: Request) {
        v.requests.push(("k".into(), q));
    }

    #[test]
    fn a_split_request_splits_a_whole_group_at_a_key_inside_the_region() {
        let mut v = cluster(3, 3, &[("n1", &["n2", "n3"], &[])]);
        request(&mut v, Request::Split { region: 1, at: "m".into() });
        assert_eq!(step(&v, 1), Some(Step::Split("m".into())));
        assert!(stale_requests(&v).is_empty());
        // The region's own first key cannot cut it: the request is stale.
        let mut v = cluster(3, 3, &[("n1", &["n2", "n3"], &[])]);
        let first = v.regions[&1].0.spec.start.clone();
        request(&mut v, Request::Split { region: 1, at: first });
        assert_eq!(step(&v, 1), None);
        assert_eq!(stale_requests(&v).len(), 1);
    }

    #[test]
    fn a_move_adds_the_target_hands_off_then_drops_the_source() {
        let mv = Request::Move { region: 1, from: "n1".into(), to: "n3".into() };
        let mut v = cluster(3, 2, &[("n1", &["n2"], &[])]);
        request(&mut v, mv.clone());
        assert_eq!(step(&v, 1), Some(Step::Add("n3".into())));
        let mut v = cluster(3, 2, &[("n1", &["n2"], &["n3"])]);
        request(&mut v, mv.clone());
        assert_eq!(step(&v, 1), None, "waits while the learner takes its copy");
        let mut v = cluster(3, 2, &[("n1", &["n2", "n3"], &[])]);
        request(&mut v, mv.clone());
        assert_eq!(step(&v, 1), Some(Step::Transfer("n3".into())), "the source led: the target takes over");
        let mut v = cluster(3, 2, &[("n3", &["n2", "n1"], &[])]);
        request(&mut v, mv.clone());
        assert_eq!(step(&v, 1), Some(Step::Drop(vec!["n1".into()])));
        // One copy: the source led, handed off to the target and is out of the group with its
        // place kept; the move drops that place too.
        let mut v = cluster(3, 1, &[("n3", &[], &[])]);
        v.regions.get_mut(&1).unwrap().0.spec.away.insert("n1".into(), 5);
        request(&mut v, mv.clone());
        assert!(stale_requests(&v).is_empty(), "the source still holds a place");
        assert_eq!(step(&v, 1), Some(Step::Drop(vec!["n1".into()])));
        let mut v = cluster(3, 2, &[("n3", &["n2"], &[])]);
        request(&mut v, mv);
        assert_eq!(stale_requests(&v), vec!["k".to_string()], "done: the request goes");
    }

    #[test]
    fn a_drained_node_is_emptied_onto_nodes_power_of_two_picks() {
        let mut v = cluster(4, 2, &[("n1", &["n2"], &[]), ("n2", &["n1"], &[])]);
        v.draining.insert("n1".into());
        let Some(Step::Add(to)) = step(&v, 1) else { panic!("{:?}", step(&v, 1)) };
        assert!(to == "n3" || to == "n4", "{to}");
        // One incoming copy per node and one outgoing per primary: region 2 waits for region 1's.
        let mut t = Tally::new(&v);
        assert!(matches!(planned(&v, &v.regions[&1].0, &mut t, 1), Some(Step::Add(_))));
        let second = planned(&v, &v.regions[&2].0, &mut t, 1);
        assert!(!matches!(&second, Some(Step::Add(n)) if *n == to), "{second:?}");
        let mut v = cluster(4, 2, &[("n1", &["n2", "n3"], &[])]);
        v.draining.insert("n1".into());
        assert_eq!(
            step(&v, 1),
            Some(Step::Transfer("n2".into())),
            "n1 led and the group holds 2 others: a tie goes to group order"
        );
    }

    #[test]
    fn the_balancer_evens_copies_and_primaries_and_leaves_a_balanced_cluster_alone() {
        let even = cluster(3, 2, &[("n1", &["n2"], &[]), ("n2", &["n3"], &[]), ("n3", &["n1"], &[])]);
        for id in 1..=3 {
            assert_eq!(step(&even, id), None, "a balanced cluster moves nothing");
        }
        // n4 joined with nothing: three copies on each of n1..n3 against none.
        let v = cluster(4, 3, &[("n1", &["n2", "n3"], &[]), ("n2", &["n3", "n1"], &[]), ("n3", &["n1", "n2"], &[])]);
        match step(&v, 1) {
            Some(Step::Schedule(Request::Move { region: 1, to, .. })) => assert_eq!(to, "n4"),
            s => panic!("{s:?}"),
        }
        // Primaries: n1 leads three, n2 none.
        let v = cluster(2, 2, &[("n1", &["n2"], &[]), ("n1", &["n2"], &[]), ("n1", &["n2"], &[])]);
        assert_eq!(step(&v, 1), Some(Step::Transfer("n2".into())));
        // A node back from a restart, its places still kept (away): nothing moves onto it.
        let mut v = cluster(3, 2, &[("n1", &["n2"], &[]), ("n2", &["n1"], &[]), ("n1", &["n2"], &[])]);
        for id in 1..=3 {
            v.regions.get_mut(&id).unwrap().0.spec.away.insert("n3".into(), 5);
        }
        assert_eq!(step(&v, 1), None, "moved a region onto a node about to take its places back");
        // Heat: the region whose move evens two nodes' writes goes first; one that would only
        // carry the heat over stays.
        let mut v = cluster(2, 2, &[("n1", &["n2"], &[]), ("n2", &["n1"], &[]), ("n1", &["n2"], &[])]);
        let writes = |v: &mut View, node: &str, w: &[(u32, u64)]| {
            v.progress.entry(node.to_string()).or_default().writes = w.iter().copied().collect();
        };
        writes(&mut v, "n1", &[(1, 5000), (3, 3000)]);
        writes(&mut v, "n2", &[(2, 100)]);
        assert_eq!(step(&v, 1), Some(Step::Transfer("n2".into())), "the hottest region that fits moves");
        assert_eq!(step(&v, 3), None, "a cooler one waits for the hottest");
        let mut cooling = Tally::new(&v);
        cooling.cooling.insert(1);
        assert_eq!(planned(&v, &v.regions[&1].0, &mut cooling, 1), None, "a region just moved is left alone");
        writes(&mut v, "n1", &[(1, 5000)]);
        assert_eq!(step(&v, 1), None, "moving the only hot region would only move the heat");
        // Nothing while a change is under way.
        let v = cluster(2, 2, &[("n1", &["n2"], &[]), ("n1", &["n2"], &[]), ("n1", &["n2"], &[])]);
        let mut v = v;
        v.intents.push(("x".into(), Intent::Promote { region: 9, node: "n2".into(), epoch: 1 }));
        assert_eq!(step(&v, 1), None);
    }

    #[test]
    fn copies_even_by_count_are_evened_by_bytes_without_trading_places() {
        const MB: u64 = 1 << 20;
        let sized = |regions: &[(&str, u64)]| {
            let groups: Vec<(&str, &[&str], &[&str])> = regions.iter().map(|(p, _)| (*p, &[][..], &[][..])).collect();
            let mut v = cluster(3, 1, &groups);
            for (i, (p, bytes)) in regions.iter().enumerate() {
                v.progress.entry(p.to_string()).or_default().sizes.insert(i as u32 + 1, *bytes);
            }
            v
        };
        // n1 holds 700 MB in two copies, n2 and n3 100 MB in one: the 100 MB region moves to
        // the emptiest node (the 600 MB one would only carry the gap over).
        let v = sized(&[("n1", 600 * MB), ("n1", 100 * MB), ("n2", 100 * MB), ("n3", 100 * MB)]);
        assert_eq!(step(&v, 2), Some(Step::Schedule(Request::Move { region: 2, from: "n1".into(), to: "n2".into() })));
        assert_eq!(step(&v, 1), None, "a region over half the gap stays");
        assert_eq!(step(&v, 3), None, "only copies on the fullest node move");
        // Once moved: n1 600 MB in one copy, n2 200 MB in two; n1 holds fewer copies than n2,
        // so nothing moves back.
        let v = sized(&[("n1", 600 * MB), ("n2", 100 * MB), ("n2", 100 * MB), ("n3", 100 * MB)]);
        for id in 1..=4 {
            assert_eq!(step(&v, id), None, "region {id} moved after the bytes were as even as counts allow");
        }
        // Every node at the same count: moving by bytes would unbalance the counts.
        let v = sized(&[("n1", 600 * MB), ("n2", 100 * MB), ("n3", 100 * MB)]);
        assert!((1..=3).all(|id| step(&v, id).is_none()));
        // Small gaps are even enough; unknown sizes move nothing.
        let v = sized(&[("n1", 40 * MB), ("n1", 20 * MB), ("n2", 10 * MB), ("n3", 10 * MB)]);
        assert!((1..=4).all(|id| step(&v, id).is_none()), "a gap under 64 MiB");
        let v = sized(&[("n1", 0), ("n1", 0), ("n2", 0), ("n3", 0)]);
        assert!((1..=4).all(|id| step(&v, id).is_none()));
    }
}

#[cfg(test)]
mod merge_tests {
    use super::*;
    use crate::layout::{ClusterConfig, NodeRecord, Progress};
    use halyard_cluster::RegionSpec;

    /// Nodes n1, n2 (leases 1, 2); regions 1.. cut at "b", "c", ... with the given primaries,
    /// the other node their backup; `cold` the regions their primaries report small and idle.
    fn cluster(primaries: &[&str], cold: &[u32]) -> View {
        let mut v = View {
            // The balancer would even the primaries out first.
            config: Some(ClusterConfig { replicas: 2, format: 1, replace_after_secs: 60, balance: false, merge: true }),
            ..View::default()
        };
        for n in ["n1", "n2"] {
            v.live
                .insert(n.into(), NodeRecord { name: n.into(), lease: n[1..].parse().unwrap(), ..Default::default() });
        }
        let cut = |i: usize| (i > 0).then(|| ((b'a' + i as u8) as char).to_string());
        for (i, p) in primaries.iter().enumerate() {
            let backup = if *p == "n1" { "n2" } else { "n1" };
            let spec = RegionSpec {
                id: i as u32 + 1,
                start: cut(i).unwrap_or_default(),
                end: if i + 1 < primaries.len() { cut(i + 1) } else { None },
                primary: p.to_string(),
                backups: vec![backup.into()],
                epoch: 3,
                leases: [("n1".to_string(), 1), ("n2".to_string(), 2)].into_iter().collect(),
                learners: Vec::new(),
                away: Default::default(),
            };
            v.regions.insert(spec.id, (RegionRecord { spec, version: 1 }, 5));
        }
        for n in ["n1", "n2"] {
            let led = |id: &u32| v.regions[id].0.spec.primary == n;
            let p = Progress { cold: cold.iter().copied().filter(led).collect(), ..Progress::default() };
            v.progress.insert(n.into(), p);
        }
        v
    }

    fn step(v: &View, id: u32, fresh: &[u32]) -> Option<Step> {
        let mut t = Tally::new(v);
        t.fresh = fresh.iter().copied().collect();
        planned(v, &v.regions[&id].0, &mut t, 1)
    }

    #[test]
    fn small_idle_neighbours_of_one_group_merge() {
        let v = cluster(&["n1", "n1"], &[1, 2]);
        assert_eq!(step(&v, 1, &[]), Some(Step::Merge(2)));
        // The last region has nothing after it.
        assert_eq!(step(&v, 2, &[]), None);
    }

    #[test]
    fn a_busy_or_large_region_or_a_fresh_split_half_does_not_merge() {
        assert_eq!(step(&cluster(&["n1", "n1"], &[1]), 1, &[]), None, "region 2 is not cold");
        assert_eq!(step(&cluster(&["n1", "n1"], &[1, 2]), 1, &[2]), None, "region 2 was split a moment ago");
        let mut v = cluster(&["n1", "n1"], &[1, 2]);
        if let Some(c) = v.config.as_mut() {
            c.merge = false;
        }
        assert_eq!(step(&v, 1, &[]), None, "cluster init --no-merge");
    }

    #[test]
    fn a_copy_of_the_right_neighbour_moves_onto_the_left_ones_group_first() {
        let mut v = cluster(&["n1", "n1"], &[1, 2]);
        v.live.insert("n3".into(), NodeRecord { name: "n3".into(), lease: 3, ..Default::default() });
        if let Some((r, _)) = v.regions.get_mut(&2) {
            r.spec.backups = vec!["n3".into()];
            r.spec.leases.insert("n3".into(), 3);
        }
        let want = Request::Move { region: 2, from: "n3".into(), to: "n2".into() };
        assert_eq!(step(&v, 1, &[]), Some(Step::Schedule(want)));
    }

    #[test]
    fn a_merge_whose_primary_was_lost_finishes_by_the_backups_that_joined_their_copies() {
        let mut v = cluster(&["n1", "n1"], &[1, 2]);
        let merge = Intent::Merge { region: 1, epoch: 3, right: 2, right_epoch: 3 };
        v.intents.push(("log/1".into(), merge.clone()));
        v.live.remove("n1");
        let (r, x) = (v.regions[&1].0.clone(), v.regions[&2].0.clone());
        assert!(merged_backups(&v, &r, &x).is_empty(), "n2 holds the two apart: the merge rolls back");
        if let Some(p) = v.progress.get_mut("n2") {
            p.absorbed.insert(2, 1);
        }
        assert_eq!(merged_backups(&v, &r, &x), vec!["n2".to_string()]);
        // The right region waits for the merge's own step rather than failing over alone.
        let mut t = Tally::new(&v);
        assert_eq!(crate::master::plan(&v, &x, 2, &mut t), None);
        assert_eq!(crate::master::plan(&v, &r, 2, &mut t), Some(Step::Finish("log/1".into(), merge)));
        // A copy joined into another region than the merge's left one does not count.
        if let Some(p) = v.progress.get_mut("n2") {
            p.absorbed.insert(2, 7);
        }
        assert!(merged_backups(&v, &r, &x).is_empty());
    }

    #[test]
    fn the_right_neighbours_primary_role_moves_next_to_the_left_one_first() {
        let v = cluster(&["n1", "n2"], &[1, 2]);
        assert_eq!(step(&v, 1, &[]), Some(Step::Schedule(Request::Transfer { region: 2, to: "n1".into() })));
        let (r, x) = (&v.regions[&1].0, &v.regions[&2].0);
        assert!(matches!(merge_blocker(&v, r, x), Some(Err(_))), "an operator's merge says to align the groups");
    }
}
