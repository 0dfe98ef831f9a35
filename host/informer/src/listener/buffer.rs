//! A listener's buffer: the notifications pushed and not yet taken, under its
//! [`BufferPolicy`] and its optional budget.

use std::collections::VecDeque;

use super::{BufferPolicy, Notification};
use crate::object::ObjectKey;
use crate::{KeyMap, KeySet};

/// What a push did, for the listener's counters.
pub(super) struct Pushed {
    /// The notification that left the buffer unhandled: one that coalescing replaced, or,
    /// for a merge, whichever of the two the merged one does not stand for (see
    /// [`Buffer::push`]). `None` when the buffer grew by one.
    pub(super) forgotten: Option<Notification>,
    /// The push was merged into the key's last notification (over budget).
    pub(super) merged: bool,
}

/// The notifications of one listener, oldest first.
///
/// Contract: with [`BufferPolicy::Unbounded`], every notification is kept, in order, while
/// the bytes the buffer alone keeps alive (see [`cost`]) are within the budget; over it, a
/// push for a key that already waits is merged into that key's last notification, so that
/// the handler still gets each key's latest state, and an update's `old` is still the
/// state the handler was last given. With [`BufferPolicy::CoalesceByKey`], each key waits
/// once, with its latest notification.
///
/// Under either policy a key waits with at most one resync notification: a resync pushed
/// while one of the key's waits is dropped. client-go stacks them, so that a handler slower
/// than its resync period falls further behind at every period (28 waiting per key after
/// 30 s at a 1 s period were measured); the resync waiting delivers the key's state all the
/// same, and real changes queue as ever.
#[derive(Default)]
pub(super) struct Buffer {
    policy: BufferPolicy,
    /// Bytes of object JSON over which pushes merge; `None`: never.
    budget: Option<usize>,
    pub(super) order: VecDeque<Notification>,
    /// While coalescing or merging: the index in `order` (plus `popped`) of each key's last
    /// notification. Invariant then: a key is here if and only if an entry of `order` has
    /// it, and it points at the last such entry.
    positions: KeyMap<ObjectKey, usize>,
    /// Entries removed from the front of `order` since the buffer was last rebuilt.
    popped: usize,
    /// Over budget since the buffer was last empty: `positions` is kept.
    merging: bool,
    /// Keys with a resync notification in `order`. Invariant: a key is here if and only if
    /// an entry of `order` is a resync of it, and then only one is.
    resyncs: KeySet<ObjectKey>,
    /// Sum of [`cost`] over `order`.
    held: usize,
    pub(super) closed: bool,
}

/// The JSON bytes a buffered notification keeps alive by itself: an update's old state and
/// a deleted object have left the cache, so only buffers hold them; an added or updated
/// object is shared with the cache when pushed. (A later change of the key makes that one
/// buffer-only too; it is then counted as the next update's old state.)
fn cost(notification: &Notification) -> usize {
    match notification {
        Notification::Add { .. } => 0,
        Notification::Update { old, .. } => old.json().len(),
        Notification::Delete { object, .. } => object.json().len(),
    }
}

fn is_resync(notification: &Notification) -> bool {
    matches!(notification, Notification::Update { resync: true, .. })
}

/// `earlier` and `later`, for one key, as one notification: what the handler needs to get
/// from the state it was last given to `later`'s. `None` when both are needed: an object
/// deleted, then created again.
fn merged(earlier: &Notification, later: &Notification) -> Option<Notification> {
    use Notification::{Add, Delete, Update};
    match (earlier, later) {
        (
            Add {
                in_initial_list, ..
            },
            Update { new, .. },
        ) => Some(Add {
            object: new.clone(),
            in_initial_list: *in_initial_list,
        }),
        (
            Update {
                old, resync: was, ..
            },
            Update { new, resync, .. },
        ) => Some(Update {
            old: old.clone(),
            new: new.clone(),
            resync: *was && *resync,
        }),
        (Add { .. } | Update { .. }, Delete { .. }) => Some(later.clone()),
        (Delete { .. }, _) | (_, Add { .. }) => None,
    }
}

impl Buffer {
    pub(super) fn new(policy: BufferPolicy, budget: Option<usize>) -> Self {
        Self {
            policy,
            budget,
            ..Self::default()
        }
    }

    fn over_budget(&self) -> bool {
        self.budget.is_some_and(|budget| self.held > budget)
    }

    fn tracks_positions(&self) -> bool {
        self.policy == BufferPolicy::CoalesceByKey || self.merging
    }

    /// Appends `notification`, or coalesces or merges it with what waits for its key, or
    /// drops it when it is a resync and the key's resync already waits.
    pub(super) fn push(&mut self, notification: Notification) -> Pushed {
        if is_resync(&notification) && self.resyncs.contains(notification.key()) {
            return Pushed {
                forgotten: Some(notification),
                merged: false,
            };
        }
        if self.policy == BufferPolicy::Unbounded && !self.merging && self.over_budget() {
            self.start_merging();
        }
        let waiting = self
            .tracks_positions()
            .then(|| self.positions.get(notification.key()).copied())
            .flatten();
        if let Some(at) = waiting {
            let slot = &mut self.order[at - self.popped];
            let replacement = match self.policy {
                BufferPolicy::CoalesceByKey => Some((notification.clone(), false)),
                BufferPolicy::Unbounded => merged(slot, &notification).map(|m| (m, true)),
            };
            if let Some((replacement, merged)) = replacement {
                self.held = self.held - cost(slot) + cost(&replacement);
                let earlier = std::mem::replace(slot, replacement);
                match (is_resync(&earlier), is_resync(slot)) {
                    (true, false) => {
                        self.resyncs.remove(notification.key());
                    }
                    (false, true) => {
                        self.resyncs.insert(notification.key().clone());
                    }
                    _ => {}
                }
                // The counters know each notification as pushed: forget the one the merged
                // notification no longer stands for (an initial add turned into a delete
                // stops being initial).
                let initial_lost = earlier.is_initial() && !slot.is_initial();
                let forgotten = if merged && !initial_lost {
                    notification
                } else {
                    earlier
                };
                return Pushed {
                    forgotten: Some(forgotten),
                    merged,
                };
            }
        }
        if self.tracks_positions() {
            self.positions
                .insert(notification.key().clone(), self.popped + self.order.len());
        }
        if is_resync(&notification) {
            self.resyncs.insert(notification.key().clone());
        }
        self.held += cost(&notification);
        self.order.push_back(notification);
        Pushed {
            forgotten: None,
            merged: false,
        }
    }

    /// Starts keeping each key's last position, so that pushes can merge.
    fn start_merging(&mut self) {
        self.merging = true;
        self.positions.clear();
        for (at, notification) in self.order.iter().enumerate() {
            self.positions
                .insert(notification.key().clone(), self.popped + at);
        }
    }

    pub(super) fn pop(&mut self) -> Option<Notification> {
        let notification = self.order.pop_front()?;
        self.held -= cost(&notification);
        if is_resync(&notification) {
            self.resyncs.remove(notification.key());
        }
        if self.tracks_positions() {
            if self.positions.get(notification.key()) == Some(&self.popped) {
                self.positions.remove(notification.key());
            }
            self.popped += 1;
        }
        if self.order.is_empty() && self.merging {
            self.merging = false;
            self.positions.clear();
            self.popped = 0;
        }
        Some(notification)
    }

    /// Switches policy; coalescing an existing backlog keeps each key's latest notification.
    /// Returns the notifications dropped.
    pub(super) fn set_policy(&mut self, policy: BufferPolicy) -> Vec<Notification> {
        let backlog = std::mem::take(&mut self.order);
        self.clear();
        self.policy = policy;
        backlog
            .into_iter()
            .filter_map(|n| self.push(n).forgotten)
            .collect()
    }

    /// Empties the buffer's bookkeeping (not `order`).
    pub(super) fn clear(&mut self) {
        self.positions.clear();
        self.popped = 0;
        self.merging = false;
        self.held = 0;
        self.resyncs.clear();
    }
}
