//! Choosing the storage nodes of a new segment (or of a fragment that moves): power-of-d
//! (Nova-LSM §4.4) samples 2(ρ + 1) reachable nodes at random and keeps the ρ + 1 least busy;
//! random placement keeps the first ρ + 1 of the sample.

use rand::seq::SliceRandom;

/// How nodes are picked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Choice {
    /// Sample twice the nodes needed and keep the least busy.
    #[default]
    PowerOfD,
    /// Any nodes, at random.
    Random,
}

/// Picks `want` distinct candidates (by index), given each candidate's load. Power-of-d
/// prefers, in random order, the sampled nodes within twice the least load (nodes alike in
/// speed share the segments rather than the marginally fastest taking them all), then the
/// rest of the sample, least loaded first.
pub fn pick(candidates: &[(usize, u32)], want: usize, how: Choice) -> Option<Vec<usize>> {
    if candidates.len() < want {
        return None;
    }
    let mut rng = rand::thread_rng();
    let sample_size = match how {
        Choice::PowerOfD => (2 * want).min(candidates.len()),
        Choice::Random => want,
    };
    let mut sample: Vec<(usize, u32)> = candidates.choose_multiple(&mut rng, sample_size).copied().collect();
    if how == Choice::PowerOfD {
        let least = sample.iter().map(|&(_, l)| l).min().unwrap_or(0);
        let alike = |l: u32| l <= least.saturating_mul(2);
        // Stable: the random order of the sample stays among nodes alike.
        sample.sort_by_key(|&(_, l)| if alike(l) { 0 } else { l });
    }
    Some(sample.into_iter().take(want).map(|(i, _)| i).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_of_d_never_keeps_the_busiest_of_its_sample() {
        // Four nodes, two wanted: the sample is all four, so the two idle ones win.
        let c = [(0, 50), (1, 1), (2, 40), (3, 2)];
        for _ in 0..50 {
            let mut got = pick(&c, 2, Choice::PowerOfD).unwrap();
            got.sort_unstable();
            assert_eq!(got, vec![1, 3]);
        }
        assert!(pick(&c, 5, Choice::Random).is_none());
        let r = pick(&c, 4, Choice::Random).unwrap();
        assert_eq!(r.len(), 4);
    }

    #[test]
    fn nodes_alike_in_load_share_the_picks() {
        let c = [(0, 100), (1, 110), (2, 120), (3, 900)];
        let mut seen = [0; 4];
        for _ in 0..300 {
            for i in pick(&c, 2, Choice::PowerOfD).unwrap() {
                seen[i] += 1;
            }
        }
        assert_eq!(seen[3], 0, "the slow node is never picked");
        assert!(seen[..3].iter().all(|&n| n > 100), "the three alike share the picks: {seen:?}");
    }
}
