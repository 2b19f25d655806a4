//! A shard's watch of the Bundles of its slots, as one stream of events for one store.
//!
//! Slots received start a watch of their own beside those running, so a shard that is given
//! slots lists only the bundles of those slots, not all of its own again: a failover's new owner
//! holds its new bundles after listing a third of what it would otherwise. Slots let go leave at
//! once: their bundles are deleted from the stream, and whatever a watch still sends for them is
//! dropped. Each served slot is delivered by exactly one watch (its owner here); past
//! [`MAX_WATCHES`] the watches are merged into one, which lists every served slot once.
//!
//! The stream starts with an empty listing (`Init`, `InitDone`). After that, every watch's
//! listing, its first one and any after a gap, comes out as `Apply` for what it lists and
//! `Delete` for what it no longer has: the store is one, and a listing of some slots
//! must not replace the bundles of the others. (It also never holds two copies of the store at
//! once, as a relist into the reflector does.)

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use futures::stream::{AbortHandle, BoxStream, SelectAll};
use futures::{Stream, StreamExt};
use gantry_api::slots::parse_slot;
use gantry_api::{Bundle, BundleSpec, SLOT_LABEL};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::sharding::slots::slot_selector;

/// Watches running side by side at most; one more is a merge into a single watch.
const MAX_WATCHES: usize = 4;

/// What the stream does with its watches after a change of the served slots.
#[derive(Debug, PartialEq, Eq)]
enum WatchChange {
    Start { watch: u64, slots: BTreeSet<u16> },
    Stop { watch: u64 },
}

/// The bookkeeping of the merge, without I/O: which watch delivers each slot (the watches
/// running are those delivering one), which bundles the stream has delivered (and not deleted
/// since), and the listings under way.
#[derive(Default)]
struct Merge {
    /// The served slots, each with the watch that delivers it.
    owners: BTreeMap<u16, u64>,
    next_watch: u64,
    /// Bundles delivered and not deleted, with their slot.
    known: HashMap<String, u16>,
    /// The names each watch has listed so far in a listing under way.
    listing: HashMap<u64, HashSet<String>>,
}

impl Merge {
    /// The watches running: those delivering a slot.
    fn watches(&self) -> BTreeSet<u64> {
        self.owners.values().copied().collect()
    }

    /// The served slots become `slots`: the events for the bundles of slots let go, and the
    /// watches to start and stop.
    fn serve(&mut self, slots: &BTreeSet<u16>) -> (Vec<Event<Bundle>>, Vec<WatchChange>) {
        let running = self.watches();
        let gained: BTreeSet<u16> = slots
            .iter()
            .filter(|slot| !self.owners.contains_key(slot))
            .copied()
            .collect();
        self.owners.retain(|slot, _| slots.contains(slot));
        let events = self.forget_where(|_, _, slot| !slots.contains(&slot));
        // Past the most watches, one new watch delivers every slot.
        let merged = !gained.is_empty() && self.watches().len() >= MAX_WATCHES;
        if merged {
            self.owners.clear();
        }
        let mut changes: Vec<WatchChange> = running
            .difference(&self.watches())
            .map(|&watch| {
                self.listing.remove(&watch);
                WatchChange::Stop { watch }
            })
            .collect();
        if !gained.is_empty() {
            let watched = if merged { slots.clone() } else { gained };
            let watch = self.next_watch;
            self.next_watch += 1;
            for slot in &watched {
                self.owners.insert(*slot, watch);
            }
            changes.push(WatchChange::Start {
                watch,
                slots: watched,
            });
        }
        (events, changes)
    }

    /// Deletes the known bundles for which `gone(owners, name, slot)` holds, in name order.
    fn forget_where(
        &mut self,
        gone: impl Fn(&BTreeMap<u16, u64>, &str, u16) -> bool,
    ) -> Vec<Event<Bundle>> {
        let mut names: Vec<(String, u16)> = self
            .known
            .iter()
            .filter(|(name, slot)| gone(&self.owners, name, **slot))
            .map(|(name, slot)| (name.clone(), *slot))
            .collect();
        names.sort();
        names
            .into_iter()
            .map(|(name, slot)| {
                self.known.remove(&name);
                Event::Delete(placeholder(&name, slot))
            })
            .collect()
    }

    /// One event of `watch`, as the stream passes it on (nothing, one event, or the deletions
    /// a listing's end finds).
    fn event(&mut self, watch: u64, event: Event<Bundle>) -> Vec<Event<Bundle>> {
        if !self.owners.values().any(|w| *w == watch) {
            return Vec::new();
        }
        match event {
            Event::Init => {
                self.listing.insert(watch, HashSet::new());
                Vec::new()
            }
            Event::InitApply(bundle) | Event::Apply(bundle) => {
                let Some(slot) = self.delivered_by(watch, &bundle) else {
                    return Vec::new();
                };
                let name = bundle.name_any();
                if let Some(listed) = self.listing.get_mut(&watch) {
                    listed.insert(name.clone());
                }
                self.known.insert(name, slot);
                vec![Event::Apply(bundle)]
            }
            // By the slot it was delivered with: a bundle whose label was changed leaves a
            // watch with its new label.
            Event::Delete(bundle) => {
                let name = bundle.name_any();
                match self.known.get(&name) {
                    Some(slot) if self.owners.get(slot) == Some(&watch) => {
                        self.known.remove(&name);
                        vec![Event::Delete(bundle)]
                    }
                    _ => Vec::new(),
                }
            }
            Event::InitDone => match self.listing.remove(&watch) {
                Some(listed) => self.forget_where(|owners, name, slot| {
                    owners.get(&slot) == Some(&watch) && !listed.contains(name)
                }),
                None => Vec::new(),
            },
        }
    }

    /// The slot of `bundle` if `watch` is the one delivering it.
    fn delivered_by(&self, watch: u64, bundle: &Bundle) -> Option<u16> {
        let slot = bundle
            .labels()
            .get(SLOT_LABEL)
            .and_then(|value| parse_slot(value))?;
        (self.owners.get(&slot) == Some(&watch)).then_some(slot)
    }
}

/// A Bundle standing for one that left the stream: its name (all a deletion is matched by in
/// the store and the caches) and its slot.
fn placeholder(name: &str, slot: u16) -> Bundle {
    let mut bundle = Bundle::new(name, BundleSpec::default());
    bundle.metadata.labels = Some([(SLOT_LABEL.to_string(), slot.to_string())].into());
    bundle
}

type Tagged = (u64, Result<Event<Bundle>, watcher::Error>);

/// The events of the Bundles of the slots `slots` holds, as they change (see the module).
pub fn slot_watch(
    api: Api<Bundle>,
    slots: watch::Receiver<BTreeSet<u16>>,
) -> impl Stream<Item = Result<Event<Bundle>, watcher::Error>> + Send {
    struct State {
        api: Api<Bundle>,
        slots: watch::Receiver<BTreeSet<u16>>,
        merge: Merge,
        running: SelectAll<BoxStream<'static, Tagged>>,
        aborts: HashMap<u64, AbortHandle>,
        out: VecDeque<Result<Event<Bundle>, watcher::Error>>,
        started: bool,
    }
    impl State {
        fn serve(&mut self) {
            let slots = self.slots.borrow_and_update().clone();
            let (events, changes) = self.merge.serve(&slots);
            self.out.extend(events.into_iter().map(Ok));
            for change in changes {
                match change {
                    WatchChange::Stop { watch } => {
                        if let Some(abort) = self.aborts.remove(&watch) {
                            abort.abort();
                        }
                    }
                    WatchChange::Start { watch, slots } => {
                        let Some(selector) = slot_selector(&slots) else {
                            continue;
                        };
                        // Listed from the API server's watch cache (resourceVersion 0), as
                        // client-go's informers list: a list by label from etcd reads and
                        // decodes every Bundle to filter them, seconds for a few thousand on
                        // two cores. The copy may be a moment old; the watch that follows
                        // brings every change since, and a bundle new to this shard gets a
                        // full pass anyway.
                        let config = watcher::Config::default().labels(&selector).any_semantic();
                        let (events, abort) = futures::stream::abortable(
                            watcher::watcher(self.api.clone(), config)
                                .map(move |event| (watch, event)),
                        );
                        self.aborts.insert(watch, abort);
                        self.running.push(events.boxed());
                    }
                }
            }
        }
    }
    let state = State {
        api,
        slots,
        merge: Merge::default(),
        running: SelectAll::new(),
        aborts: HashMap::new(),
        out: VecDeque::new(),
        started: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        if !state.started {
            state.started = true;
            // An empty listing first: kube-runtime's controller reconciles nothing until its
            // store has seen a listing end, and the listings here come out as `Apply`.
            state.out.extend([Ok(Event::Init), Ok(Event::InitDone)]);
            state.serve();
        }
        loop {
            if let Some(event) = state.out.pop_front() {
                return Some((event, state));
            }
            let watching = !state.running.is_empty();
            tokio::select! {
                changed = state.slots.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    state.serve();
                }
                Some((watch, event)) = state.running.next(), if watching => match event {
                    Ok(event) => {
                        let events = state.merge.event(watch, event);
                        state.out.extend(events.into_iter().map(Ok));
                    }
                    Err(error) => state.out.push_back(Err(error)),
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(slots: &[u16]) -> BTreeSet<u16> {
        slots.iter().copied().collect()
    }

    fn bundle(name: &str, slot: u16) -> Bundle {
        placeholder(name, slot)
    }

    /// What the events say, as `+name` (applied) and `-name` (deleted).
    fn said(events: &[Event<Bundle>]) -> Vec<String> {
        events
            .iter()
            .map(|event| match event {
                Event::Apply(b) | Event::InitApply(b) => format!("+{}", b.name_any()),
                Event::Delete(b) => format!("-{}", b.name_any()),
                Event::Init => "init".into(),
                Event::InitDone => "done".into(),
            })
            .collect()
    }

    fn list(merge: &mut Merge, watch: u64, bundles: &[Bundle]) -> Vec<String> {
        let mut out = merge.event(watch, Event::Init);
        for b in bundles {
            out.extend(merge.event(watch, Event::InitApply(b.clone())));
        }
        out.extend(merge.event(watch, Event::InitDone));
        said(&out)
    }

    #[test]
    fn slots_received_are_listed_by_a_watch_of_their_own() {
        let mut merge = Merge::default();
        let (events, changes) = merge.serve(&set(&[1, 2]));
        assert!(events.is_empty());
        assert_eq!(
            changes,
            [WatchChange::Start {
                watch: 0,
                slots: set(&[1, 2])
            }]
        );
        assert_eq!(
            list(&mut merge, 0, &[bundle("a", 1), bundle("b", 2)]),
            ["+a", "+b"]
        );

        // Slot 3 received: only it is listed, and what watch 0 has stays.
        let (events, changes) = merge.serve(&set(&[1, 2, 3]));
        assert!(events.is_empty());
        assert_eq!(
            changes,
            [WatchChange::Start {
                watch: 1,
                slots: set(&[3])
            }]
        );
        assert_eq!(list(&mut merge, 1, &[bundle("c", 3)]), ["+c"]);
        assert_eq!(merge.known.len(), 3);

        // Watch 0 lists again after a gap: b is gone; c, another watch's, stays.
        assert_eq!(list(&mut merge, 0, &[bundle("a", 1)]), ["+a", "-b"]);
        assert_eq!(said(&merge.event(1, Event::Apply(bundle("d", 3)))), ["+d"]);
        assert_eq!(said(&merge.event(1, Event::Delete(bundle("d", 3)))), ["-d"]);
        // Its slot label changed by hand: it leaves watch 1 carrying the new label.
        assert_eq!(said(&merge.event(1, Event::Apply(bundle("e", 3)))), ["+e"]);
        assert_eq!(
            said(&merge.event(1, Event::Delete(bundle("e", 200)))),
            ["-e"]
        );
        assert!(
            merge.event(0, Event::Delete(bundle("c", 3))).is_empty(),
            "c is watch 1's"
        );
    }

    #[test]
    fn slots_let_go_leave_at_once_and_their_watch_stops_when_it_delivers_nothing() {
        let mut merge = Merge::default();
        merge.serve(&set(&[1, 2]));
        list(&mut merge, 0, &[bundle("a", 1), bundle("b", 2)]);
        merge.serve(&set(&[1, 2, 3]));
        list(&mut merge, 1, &[bundle("c", 3)]);

        let (events, changes) = merge.serve(&set(&[1]));
        assert_eq!(said(&events), ["-b", "-c"]);
        assert_eq!(changes, [WatchChange::Stop { watch: 1 }]);
        // Watch 0 still selects slot 2: what it sends of it is dropped.
        assert!(merge.event(0, Event::Apply(bundle("b", 2))).is_empty());
        assert!(
            merge.event(1, Event::Apply(bundle("c", 3))).is_empty(),
            "stopped"
        );

        // Slot 2 again: a watch of its own lists it; watch 0's copy is still dropped.
        let (_, changes) = merge.serve(&set(&[1, 2]));
        assert_eq!(
            changes,
            [WatchChange::Start {
                watch: 2,
                slots: set(&[2])
            }]
        );
        assert!(merge.event(0, Event::Apply(bundle("b", 2))).is_empty());
        assert_eq!(list(&mut merge, 2, &[bundle("b", 2)]), ["+b"]);
        // Watch 0's listing after a gap leaves slot 2's bundles alone.
        assert_eq!(list(&mut merge, 0, &[bundle("a", 1)]), ["+a"]);
        assert!(merge.known.contains_key("b"));

        let (events, changes) = merge.serve(&set(&[]));
        assert_eq!(said(&events), ["-a", "-b"]);
        assert_eq!(
            changes,
            [
                WatchChange::Stop { watch: 0 },
                WatchChange::Stop { watch: 2 }
            ]
        );
        assert!(merge.known.is_empty() && merge.watches().is_empty());
    }

    #[test]
    fn past_the_most_watches_they_merge_into_one_listing_every_slot() {
        let mut merge = Merge::default();
        for slot in 0..MAX_WATCHES as u16 {
            let slots: BTreeSet<u16> = (0..=slot).collect();
            merge.serve(&slots);
            list(
                &mut merge,
                u64::from(slot),
                &[bundle(&format!("b{slot}"), slot)],
            );
        }
        assert_eq!(merge.watches().len(), MAX_WATCHES);
        let all: BTreeSet<u16> = (0..=MAX_WATCHES as u16).collect();
        let (events, changes) = merge.serve(&all);
        assert!(events.is_empty());
        let merged = MAX_WATCHES as u64;
        assert_eq!(changes.len(), MAX_WATCHES + 1);
        assert_eq!(
            changes.last(),
            Some(&WatchChange::Start {
                watch: merged,
                slots: all.clone()
            })
        );
        // The merged watch lists all; what it no longer finds is deleted.
        let listed: Vec<Bundle> = (1..=MAX_WATCHES as u16)
            .map(|slot| bundle(&format!("b{slot}"), slot))
            .collect();
        let out = list(&mut merge, merged, &listed);
        assert_eq!(out.last().map(String::as_str), Some("-b0"));
        assert_eq!(merge.known.len(), MAX_WATCHES);
    }
}
