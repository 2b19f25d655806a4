//! The slots a replica serves ([`Slots`]), which say which bundles it may reconcile, and what
//! its Lease reports of them ([`ServedSlots`]).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use gantry_api::slots::{SLOTS, parse_slot};
use gantry_api::{Bundle, SLOT_LABEL};
use kube::ResourceExt;
use tokio::sync::watch;

use super::share::{ReconcileShare, Turn};

/// The slots this replica's controllers serve, and the passes under way in each. A pass starts
/// only for a bundle of a served slot ([`Slots::enter`]); a slot the slot table takes away stops
/// being served at once, and is reported let go (in the shard's Lease) only once its passes
/// under way have ended, so the sharder gives it to another shard only when nothing here can
/// write for its bundles any more.
#[derive(Clone)]
pub struct Slots {
    inner: Arc<SlotsInner>,
}

struct SlotsInner {
    state: Mutex<SlotsState>,
    /// A pass ended.
    passes_ended: tokio::sync::Notify,
    /// The served slots, for the Bundle watch's label selector.
    selector: watch::Sender<BTreeSet<u16>>,
    /// What the shard's Lease reports: the slots served and the table epoch they reflect.
    report: watch::Sender<ServedSlots>,
    /// One change of the served slots at a time.
    changing: tokio::sync::Mutex<()>,
    /// Passes at once: this shard's share of the reconcile concurrency, by the slots it serves.
    share: ReconcileShare,
}

#[derive(Default)]
struct SlotsState {
    served: BTreeSet<u16>,
    epoch: u64,
    passes: HashMap<u16, usize>,
}

/// A pass of a bundle of a served slot; the slot is not reported let go while it lives.
pub struct Pass {
    slots: Slots,
    slot: u16,
}

impl Drop for Pass {
    fn drop(&mut self) {
        if let Ok(mut state) = self.slots.inner.state.lock()
            && let Some(count) = state.passes.get_mut(&self.slot)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.passes.remove(&self.slot);
            }
        }
        self.slots.inner.passes_ended.notify_waiters();
    }
}

impl Slots {
    /// No slot served yet; `reconcile_concurrency` passes at once across all shards.
    pub fn new(reconcile_concurrency: usize) -> Self {
        Self {
            inner: Arc::new(SlotsInner {
                state: Mutex::default(),
                passes_ended: tokio::sync::Notify::new(),
                selector: watch::Sender::new(BTreeSet::new()),
                report: watch::Sender::new(ServedSlots::default()),
                changing: tokio::sync::Mutex::new(()),
                share: ReconcileShare::new(reconcile_concurrency),
            }),
        }
    }

    /// A pass of `bundle`, if its slot is served here; `None`: not this replica's to reconcile.
    pub fn enter(&self, bundle: &Bundle) -> Option<Pass> {
        let slot = bundle
            .labels()
            .get(SLOT_LABEL)
            .and_then(|value| parse_slot(value))?;
        let mut state = self.inner.state.lock().ok()?;
        if !state.served.contains(&slot) {
            return None;
        }
        *state.passes.entry(slot).or_default() += 1;
        Some(Pass {
            slots: self.clone(),
            slot,
        })
    }

    /// Serves `slots`, as the slot table of `epoch` gives them to this replica: slots taken away
    /// start no pass from now on, and once their passes under way have ended the new set is
    /// reported. A table older than one already served is ignored (a watch behind a fresh
    /// read). Returns how many slots were let go.
    pub async fn serve(&self, slots: BTreeSet<u16>, epoch: u64) -> usize {
        let _one = self.inner.changing.lock().await;
        let lost: BTreeSet<u16> = {
            let Ok(mut state) = self.inner.state.lock() else {
                return 0;
            };
            if epoch < state.epoch || (epoch == state.epoch && slots == state.served) {
                return 0;
            }
            let lost = state.served.difference(&slots).copied().collect();
            state.served = slots.clone();
            state.epoch = epoch;
            lost
        };
        self.inner.selector.send_replace(slots.clone());
        self.inner.share.serve(slots.len());
        loop {
            let ended = self.inner.passes_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let busy = self
                .inner
                .state
                .lock()
                .map(|state| lost.iter().any(|slot| state.passes.contains_key(slot)))
                .unwrap_or(false);
            if !busy {
                break;
            }
            ended.await;
        }
        self.inner.report.send_replace(ServedSlots { epoch, slots });
        lost.len()
    }

    /// Waits for a turn among this shard's share of the reconcile concurrency: taken before
    /// [`Slots::enter`], so that a pass waiting for its turn holds no slot back from a handover.
    pub async fn turn(&self) -> Turn {
        self.inner.share.turn().await
    }

    /// Passes this shard runs at once now.
    pub fn share(&self) -> usize {
        self.inner.share.limit()
    }

    /// The served slots, as they change: what the Bundle watch selects.
    pub fn selector(&self) -> watch::Receiver<BTreeSet<u16>> {
        self.inner.selector.subscribe()
    }

    /// What the shard's Lease reports, as it changes.
    pub fn report(&self) -> watch::Receiver<ServedSlots> {
        self.inner.report.subscribe()
    }
}

/// The label selector for the bundles of `slots` (`None` for no slot: nothing to select).
pub fn slot_selector(slots: &BTreeSet<u16>) -> Option<String> {
    (!slots.is_empty()).then(|| {
        let values: Vec<String> = slots.iter().map(u16::to_string).collect();
        format!("{SLOT_LABEL} in ({})", values.join(","))
    })
}

/// What a shard's controllers serve: the slots, and the epoch of the slot table they reflect.
/// Written in the shard's Lease ([`gantry_api::SERVED_SLOTS_ANNOTATION`]) as `EPOCH;RANGES`,
/// e.g. `12;0-84,200`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServedSlots {
    pub epoch: u64,
    pub slots: BTreeSet<u16>,
}

impl fmt::Display for ServedSlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{};{}", self.epoch, ranges(&self.slots))
    }
}

impl FromStr for ServedSlots {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let (epoch, slots) = text
            .split_once(';')
            .ok_or_else(|| format!("served slots {text:?}: no ';' after the epoch"))?;
        let epoch = epoch
            .parse()
            .map_err(|_| format!("served slots {text:?}: the epoch is not a number"))?;
        Ok(Self {
            epoch,
            slots: parse_ranges(slots)?,
        })
    }
}

/// `slots` as ranges: `0-84,200`.
pub fn ranges(slots: &BTreeSet<u16>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(u16, u16)> = None;
    for &slot in slots {
        run = match run {
            Some((first, last)) if last + 1 == slot => Some((first, slot)),
            Some(done) => {
                parts.push(range_text(done));
                Some((slot, slot))
            }
            None => Some((slot, slot)),
        };
    }
    if let Some(done) = run {
        parts.push(range_text(done));
    }
    parts.join(",")
}

fn range_text((first, last): (u16, u16)) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

/// The slots of a text [`ranges`] wrote.
pub fn parse_ranges(text: &str) -> Result<BTreeSet<u16>, String> {
    let mut slots = BTreeSet::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("slot range {part:?} is not SLOT or FIRST-LAST below {SLOTS}");
        let (first, last) = match part.split_once('-') {
            Some((first, last)) => (parse_slot(first), parse_slot(last)),
            None => (parse_slot(part), parse_slot(part)),
        };
        let (Some(first), Some(last)) = (first, last) else {
            return Err(bad());
        };
        if first > last {
            return Err(bad());
        }
        slots.extend(first..=last);
    }
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_slots_round_trip_as_ranges() {
        let served = ServedSlots {
            epoch: 12,
            slots: [0, 1, 2, 3, 7, 9, 10, 255].into(),
        };
        assert_eq!(served.to_string(), "12;0-3,7,9-10,255");
        assert_eq!("12;0-3,7,9-10,255".parse::<ServedSlots>(), Ok(served));
        assert_eq!(
            "3;".parse::<ServedSlots>(),
            Ok(ServedSlots {
                epoch: 3,
                slots: BTreeSet::new()
            })
        );
        assert!("3;5-2".parse::<ServedSlots>().is_err());
        assert!("3;256".parse::<ServedSlots>().is_err());
        assert!("x;1".parse::<ServedSlots>().is_err());
        assert!("1".parse::<ServedSlots>().is_err());
    }

    fn in_slot(name: &str, slot: u16) -> Bundle {
        let mut bundle = Bundle::new(name, Default::default());
        bundle
            .labels_mut()
            .insert(SLOT_LABEL.into(), slot.to_string());
        bundle
    }

    #[tokio::test]
    async fn a_pass_starts_only_in_a_served_slot() {
        let slots = Slots::new(16);
        assert!(slots.enter(&in_slot("a", 1)).is_none());
        assert_eq!(slots.serve([1, 2].into(), 1).await, 0);
        assert!(slots.enter(&in_slot("a", 1)).is_some());
        assert!(slots.enter(&in_slot("b", 3)).is_none());
        assert!(
            slots
                .enter(&Bundle::new("unlabelled", Default::default()))
                .is_none()
        );
        assert_eq!(*slots.selector().borrow(), BTreeSet::from([1, 2]));
        assert_eq!(slots.report().borrow().to_string(), "1;1-2");
        assert_eq!(slots.share(), 1, "2 of 256 slots: one pass at once");
        // An older table changes nothing.
        assert_eq!(slots.serve([3].into(), 0).await, 0);
        assert_eq!(slots.report().borrow().to_string(), "1;1-2");
        assert_eq!(
            slot_selector(&[1, 2].into()).as_deref(),
            Some("gantry.dev/slot in (1,2)")
        );
        assert_eq!(slot_selector(&BTreeSet::new()), None);
    }

    #[tokio::test]
    async fn a_slot_is_reported_let_go_only_once_its_passes_have_ended() {
        let slots = Slots::new(16);
        slots.serve([1, 2].into(), 1).await;
        let pass = slots.enter(&in_slot("a", 1)).unwrap();
        let other = slots.enter(&in_slot("b", 2)).unwrap();
        let serving = tokio::spawn({
            let slots = slots.clone();
            async move { slots.serve([2].into(), 2).await }
        });
        // No new pass in the slot taken away, while the one under way holds the report back.
        let mut selector = slots.selector();
        selector
            .wait_for(|served| *served == BTreeSet::from([2]))
            .await
            .unwrap();
        assert!(slots.enter(&in_slot("c", 1)).is_none());
        tokio::task::yield_now().await;
        assert_eq!(slots.report().borrow().to_string(), "1;1-2");
        drop(other);
        tokio::task::yield_now().await;
        assert!(
            !serving.is_finished(),
            "a pass of slot 2 does not hold slot 1"
        );
        drop(pass);
        assert_eq!(serving.await.unwrap(), 1);
        assert_eq!(slots.report().borrow().to_string(), "2;2");
    }
}
