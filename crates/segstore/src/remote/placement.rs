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

/// Picks `want` distinct candidates (by index), given each candidate's load.
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
        sample.sort_by_key(|&(_, load)| load);
    }
    Some(sample.into_iter().take(want).map(|(i, _)| i).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_of_d_never_keeps_the_busiest_of_its_sample() {
        // Four nodes, two wanted: the sample is all four, so the two idle ones win.
        let c = [(0, 50), (1, 0), (2, 40), (3, 1)];
        for _ in 0..50 {
            let mut got = pick(&c, 2, Choice::PowerOfD).unwrap();
            got.sort_unstable();
            assert_eq!(got, vec![1, 3]);
        }
        assert!(pick(&c, 5, Choice::Random).is_none());
        let r = pick(&c, 4, Choice::Random).unwrap();
        assert_eq!(r.len(), 4);
    }
}
