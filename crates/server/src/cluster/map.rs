//! The region map as requests search it: the map's regions with their bounds decoded once,
//! sorted by start key, found by binary search (`ClusterFile::region_for` scans and decodes
//! every region's bounds on each call).

use super::load::LoadTable;
use halyard_cluster::ClusterFile;

/// One region as requests look it up.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) id: u32,
    pub(crate) epoch: u64,
    pub(crate) start: Vec<u8>,
    pub(crate) end: Option<Vec<u8>>,
    /// This node is the primary in the map.
    pub(crate) mine: bool,
    /// The lease this node holds the region under, in the map (etcd mode).
    pub(crate) lease: Option<i64>,
    pub(crate) primary: String,
    /// The primary's native address ("" when the map names none).
    pub(crate) native: String,
    /// Copies the group holds, the primary counted.
    pub(crate) copies: usize,
    /// This node fenced the region for a planned handoff at this epoch or a later one: it
    /// serves it no more until a map with a higher epoch names it again.
    pub(crate) fenced: bool,
    /// The region's request counters, when this node is its primary (`load.rs`).
    pub(crate) load: Option<std::sync::Arc<super::load::RegionLoad>>,
}

/// Regions this node fenced for a planned handoff, with the epoch each was fenced at.
pub(crate) type Fences = std::collections::HashMap<u32, u64>;

/// The map's regions by start key.
#[derive(Debug, Default)]
pub(crate) struct RegionMap {
    pub(crate) entries: Vec<Entry>,
}

impl RegionMap {
    /// The map of `file` as node `me`, which fenced `fences` and counts the load of the
    /// regions it leads in `loads`, sees it.
    pub(crate) fn new(file: &ClusterFile, me: &str, fences: &Fences, loads: &LoadTable) -> RegionMap {
        let mut entries: Vec<Entry> = file
            .regions
            .iter()
            .map(|r| Entry {
                id: r.id,
                epoch: r.epoch,
                start: r.start_bytes(),
                end: r.end_bytes(),
                mine: r.primary == me,
                lease: r.leases.get(me).copied(),
                primary: r.primary.clone(),
                native: file.node(&r.primary).map(|n| n.native.clone()).unwrap_or_default(),
                copies: r.backups.len() + 1,
                fenced: fences.get(&r.id).is_some_and(|&at| at >= r.epoch),
                load: (r.primary == me).then(|| loads.of(r.id, &r.start_bytes(), r.end_bytes().as_deref())),
            })
            .collect();
        entries.sort_by(|a, b| a.start.cmp(&b.start));
        RegionMap { entries }
    }

    /// The region holding `key`.
    pub(crate) fn find(&self, key: &[u8]) -> Option<&Entry> {
        let i = self.entries.partition_point(|e| e.start.as_slice() <= key).checked_sub(1)?;
        self.entries.get(i).filter(|e| e.end.as_deref().is_none_or(|end| key < end))
    }

    pub(crate) fn by_id(&self, id: u32) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }
}

/// Where a key lies: its region, and whether this node serves it now.
#[derive(Clone, Copy, Debug)]
pub struct Located {
    /// The region's id.
    pub id: u32,
    /// This node leads the region and may serve it now.
    pub local: bool,
}

/// Why a node does not serve region `e`, for the client.
pub(crate) fn refusal(e: &Entry) -> String {
    if e.mine {
        return format!(
            "region {} (epoch {}): this node's lease lapsed or the region is changing hands; refresh the region map and retry",
            e.id, e.epoch
        );
    }
    let addr = if e.native.is_empty() { "?" } else { e.native.as_str() };
    format!("region {} is led by {} at {addr}", e.id, e.primary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(cuts: &[&str]) -> ClusterFile {
        let mut text = String::from("[[nodes]]\nname = \"n1\"\nnative = \"a:1\"\nreplication = \"a:2\"\n");
        let mut starts = vec![""];
        starts.extend_from_slice(cuts);
        for (i, s) in starts.iter().enumerate() {
            text.push_str(&format!("[[regions]]\nid = {}\nstart = \"{s}\"\nprimary = \"n1\"\n", i + 1));
            if let Some(end) = starts.get(i + 1) {
                text.push_str(&format!("end = \"{end}\"\n"));
            }
        }
        toml::from_str(&text).unwrap()
    }

    /// The binary search finds the region `ClusterFile::region_for`'s scan finds, for keys at,
    /// just before and just after every bound.
    #[test]
    fn the_search_agrees_with_the_scan() {
        let f = file(&["b", "d", "m", "hex:ff00"]);
        let map = RegionMap::new(&f, "n1", &Fences::new(), &LoadTable::default());
        let keys: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"a".to_vec(),
            b"b".to_vec(),
            b"b\x00".to_vec(),
            b"c\xff".to_vec(),
            b"d".to_vec(),
            b"l".to_vec(),
            b"m".to_vec(),
            b"z".to_vec(),
            vec![0xff],
            vec![0xff, 0],
            vec![0xff, 0, 1],
        ];
        for k in keys {
            let want = f.region_for(&k).map(|r| r.id);
            assert_eq!(map.find(&k).map(|e| e.id), want, "key {k:?}");
        }
    }
}
