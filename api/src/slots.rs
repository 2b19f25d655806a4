//! Slots: how bundles are divided between shards (`--sharding`). Every bundle belongs to one of
//! [`SLOTS`] slots, by the hash of its name, written once as its [`crate::SLOT_LABEL`]; the
//! sharder gives each slot to a shard in one object, the [`SlotTable`]. Moving a shard's share
//! is then one write of the table, whatever the number of bundles, not a write per bundle.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// How many slots there are. A slot's bundles move together, so the shards' loads are even to
/// about one slot's share: with 256, a few bundles in a thousand per shard.
pub const SLOTS: u16 = 256;

/// The slot of the bundle named `name`: FNV-1a (64 bits) of the name, modulo [`SLOTS`]. Stable
/// across versions and machines: it decides which replica reconciles the bundle.
pub fn slot_of(name: &str) -> u16 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = name.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    u16::try_from(hash % u64::from(SLOTS)).unwrap_or(0)
}

/// The slot a [`crate::SLOT_LABEL`] value names, if it is one.
pub fn parse_slot(value: &str) -> Option<u16> {
    value.parse::<u16>().ok().filter(|slot| *slot < SLOTS)
}

/// Which shard owns each slot, as the sharder last wrote it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotTable {
    /// Raised by every write of the table: a shard's served slots say which it acted on.
    pub epoch: u64,
    /// Each slot's owner, indexed by slot; `None`: unowned (never assigned, or being let go).
    pub owners: Vec<Option<String>>,
    /// Slots taken from a live shard, with the epoch of the write that took them: such a slot is
    /// given to its next shard only once every live shard's served slots have acted on that
    /// epoch or a later one and does not name it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub released: BTreeMap<u16, u64>,
}

impl SlotTable {
    /// An empty table: no slot owned.
    pub fn new() -> Self {
        Self {
            epoch: 0,
            owners: vec![None; usize::from(SLOTS)],
            released: BTreeMap::new(),
        }
    }

    /// The table an annotation holds; a table of the wrong size is refused (it would leave
    /// slots without a place).
    pub fn parse(text: &str) -> Result<Self, String> {
        let table: Self = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if table.owners.len() != usize::from(SLOTS) {
            return Err(format!(
                "the slot table has {} slots, not {SLOTS}",
                table.owners.len()
            ));
        }
        Ok(table)
    }

    /// The table as its annotation holds it.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The shard that owns `slot`.
    pub fn owner(&self, slot: u16) -> Option<&str> {
        self.owners
            .get(usize::from(slot))
            .and_then(|owner| owner.as_deref())
    }

    /// The slots `shard` owns.
    pub fn slots_of(&self, shard: &str) -> BTreeSet<u16> {
        (0..SLOTS)
            .filter(|slot| self.owner(*slot) == Some(shard))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_stable_and_spread() {
        // Fixed values: a change of the hash would move every bundle.
        assert_eq!(slot_of(""), (0xcbf2_9ce4_8422_2325u64 % 256) as u16);
        assert_eq!(slot_of("a"), slot_of("a"));
        let mut counts = [0u32; SLOTS as usize];
        for i in 0..25_600 {
            counts[usize::from(slot_of(&format!("bundle-{i}")))] += 1;
        }
        // About 100 each.
        assert!(counts.iter().all(|c| (50..=160).contains(c)), "{counts:?}");
    }

    #[test]
    fn a_table_names_each_slots_owner() {
        let mut table = SlotTable::new();
        table.owners[3] = Some("a".into());
        table.owners[4] = Some("a".into());
        table.owners[5] = Some("b".into());
        let parsed = SlotTable::parse(&table.to_text()).unwrap();
        assert_eq!(parsed, table);
        assert_eq!(parsed.slots_of("a"), [3, 4].into());
        assert_eq!(parsed.owner(5), Some("b"));
        assert_eq!(parsed.owner(6), None);
        assert!(SlotTable::parse(r#"{"epoch":1,"owners":[null]}"#).is_err());
    }
}
