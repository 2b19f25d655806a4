//! Which shard (provisioner replica) owns which bundle: a consistent-hash ring with bounded
//! loads (Mirrokni, Thorup and Zadimoghaddam), as the sharder computes it.
//!
//! Each shard has many points on the ring; a bundle belongs to the first shard clockwise from
//! its own hash that still has room. Room is capped at [`LOAD_FACTOR`] times an even share, so
//! no shard holds much more than its share, and a shard that joins or leaves moves about
//! `1/N` of the bundles: those whose first point changed, plus the few a full shard passes on.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// Points per shard: enough that shares differ by a few percent, few enough to stay cheap.
const POINTS_PER_SHARD: usize = 128;

/// The most a shard holds, as a multiple of an even share (rounded up). The ring places the
/// 256 slots, each about 1/256 of the bundles: with a bound of 1.25 one shard held 36 % of the
/// bundles with three shards, where an exact bound keeps each at its share of the slots and, for
/// so few keys, moves no more when a shard joins or leaves (a join moved 72 slots of 256 from
/// three shards to four, 64 of them to the new one).
pub const LOAD_FACTOR: f64 = 1.0;

/// A ring over a set of shards.
#[derive(Debug, Clone)]
pub struct Ring {
    shards: Vec<String>,
    /// Points sorted by hash, each naming its shard by index into `shards`.
    points: Vec<(u64, usize)>,
}

impl Ring {
    /// A ring over `shards` (duplicates count once).
    pub fn new<I, S>(shards: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut shards: Vec<String> = shards.into_iter().map(Into::into).collect();
        shards.sort();
        shards.dedup();
        let mut points: Vec<(u64, usize)> = shards
            .iter()
            .enumerate()
            .flat_map(|(index, shard)| {
                (0..POINTS_PER_SHARD).map(move |point| (hash(&format!("{shard}#{point}")), index))
            })
            .collect();
        points.sort_unstable();
        Self { shards, points }
    }

    /// The most bundles one shard takes when `bundles` are spread over the ring.
    pub fn capacity(&self, bundles: usize) -> usize {
        if self.shards.is_empty() {
            return 0;
        }
        let share = bundles as f64 / self.shards.len() as f64;
        ((share * LOAD_FACTOR).ceil() as usize).max(1)
    }

    /// The shard of every bundle: each goes to the first shard clockwise from its hash with
    /// room left. Bundles are placed in the order of their hashes (then names), so the answer
    /// depends only on the sets of shards and bundles. Empty when there are no shards.
    pub fn assign<'a>(&self, bundles: &[&'a str]) -> BTreeMap<&'a str, &str> {
        let mut assigned = BTreeMap::new();
        if self.shards.is_empty() {
            return assigned;
        }
        let capacity = self.capacity(bundles.len());
        let mut load = vec![0usize; self.shards.len()];
        let mut ordered: Vec<(u64, &'a str)> = bundles.iter().map(|b| (hash(b), *b)).collect();
        ordered.sort_unstable();
        ordered.dedup();
        for (h, bundle) in ordered {
            let start = self.points.partition_point(|(point, _)| *point < h);
            // Total room is at least the number of bundles, so some point has room.
            let found = (0..self.points.len())
                .map(|step| self.points[(start + step) % self.points.len()].1)
                .find(|&shard| load[shard] < capacity);
            if let Some(shard) = found {
                load[shard] += 1;
                assigned.insert(bundle, self.shards[shard].as_str());
            }
        }
        assigned
    }
}

/// A stable 64-bit hash (the same on every replica and release).
fn hash(text: &str) -> u64 {
    let digest = Sha256::digest(text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn names(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("bundle-{i}")).collect()
    }

    fn loads<'a>(assigned: &BTreeMap<&str, &'a str>) -> HashMap<&'a str, usize> {
        let mut loads = HashMap::new();
        for shard in assigned.values() {
            *loads.entry(*shard).or_default() += 1;
        }
        loads
    }

    fn moved(before: &BTreeMap<&str, &str>, after: &BTreeMap<&str, &str>) -> usize {
        before
            .iter()
            .filter(|(b, s)| after.get(*b) != Some(*s))
            .count()
    }

    #[test]
    fn every_bundle_gets_a_shard_and_none_holds_more_than_its_bound() {
        let bundles = names(10_000);
        let refs: Vec<&str> = bundles.iter().map(String::as_str).collect();
        for shards in [1, 2, 3, 5, 7] {
            let ring = Ring::new((0..shards).map(|i| format!("replica-{i}")));
            let assigned = ring.assign(&refs);
            assert_eq!(assigned.len(), refs.len(), "{shards} shards");
            let capacity = ring.capacity(refs.len());
            assert!(capacity as f64 <= LOAD_FACTOR * 10_000.0 / shards as f64 + 1.0);
            for (shard, load) in loads(&assigned) {
                assert!(load <= capacity, "{shard} holds {load} > {capacity}");
            }
        }
    }

    #[test]
    fn no_shards_assign_nothing_and_one_shard_takes_all() {
        assert!(
            Ring::new(Vec::<String>::new())
                .assign(&["a", "b"])
                .is_empty()
        );
        let ring = Ring::new(["only"]);
        let assigned = ring.assign(&["a", "b", "c"]);
        assert!(assigned.values().all(|s| *s == "only"));
        assert_eq!(assigned.len(), 3);
    }

    #[test]
    fn the_answer_depends_only_on_the_sets() {
        let (first, second) = (Ring::new(["x", "y", "z"]), Ring::new(["z", "x", "y", "x"]));
        let a = first.assign(&["1", "2", "3", "4", "5", "6"]);
        let b = second.assign(&["6", "5", "4", "3", "2", "1"]);
        assert_eq!(a, b);
    }

    #[test]
    fn a_shard_joining_moves_about_its_share() {
        let bundles = names(6_000);
        let refs: Vec<&str> = bundles.iter().map(String::as_str).collect();
        let three = Ring::new(["a", "b", "c"]);
        let four = Ring::new(["a", "b", "c", "d"]);
        let before = three.assign(&refs);
        let after = four.assign(&refs);
        let moved = moved(&before, &after);
        // An even share is 1/4; what a full shard passes on adds a little.
        assert!(
            moved <= refs.len() * 35 / 100,
            "{moved} of {} moved",
            refs.len()
        );
        assert!(moved >= refs.len() / 8, "the new shard took only {moved}");
        // What moved went to the new shard, or was passed on by a full one.
        let to_new = before
            .iter()
            .filter(|(b, _)| after.get(*b) == Some(&"d"))
            .count();
        assert!(
            to_new * 10 >= moved * 7,
            "{to_new} of {moved} went to the new shard"
        );
    }

    #[test]
    fn a_shard_leaving_moves_its_own_bundles_and_few_others() {
        let bundles = names(6_000);
        let refs: Vec<&str> = bundles.iter().map(String::as_str).collect();
        let (three, two) = (Ring::new(["a", "b", "c"]), Ring::new(["a", "b"]));
        let before = three.assign(&refs);
        let after = two.assign(&refs);
        let owned_by_c = before.values().filter(|s| **s == "c").count();
        let others_moved = before
            .iter()
            .filter(|(b, s)| **s != "c" && after.get(*b) != Some(*s))
            .count();
        assert!(after.values().all(|s| *s != "c"));
        assert!(
            others_moved <= refs.len() / 10,
            "{others_moved} bundles of live shards moved (c held {owned_by_c})"
        );
    }
}
