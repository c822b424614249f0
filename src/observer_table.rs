//! The observers a member knows of (nodes run with `--observe`, which follow the election
//! without a vote): over pilot, those whose announcements it hears on the topic; over http,
//! those whose `/events` streams it serves (they say who they are in a header). For `/status`
//! and the `observers` metric only: the election never reads it, and an observer is never
//! logged as a stray.
//!
//! Bounded, because anyone who can publish on the topic or open a stream can make up names:
//! at most [`MAX_OBSERVERS`], the longest unheard without an open stream forgotten first.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Names kept at most.
pub const MAX_OBSERVERS: usize = 4096;
/// An observer over pilot announces itself every 10 s; unheard for three of those it is gone.
pub const FORGET_AFTER: Duration = Duration::from_secs(30);
/// Longest observer name kept (a longer one is not recorded).
pub const MAX_NAME_BYTES: usize = 256;

/// How a member knows of an observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Via {
    /// Its announcements on the election topic (pilot).
    Topic,
    /// An `/events` stream of this member that it follows (http).
    Events,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Topic => "topic",
            Via::Events => "events",
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    via: Via,
    first: Instant,
    last: Instant,
    /// `/events` streams open now.
    streams: u32,
}

/// One observer as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub id: String,
    pub via: Via,
    pub first: Instant,
    pub last: Instant,
    pub streams: u32,
}

/// The table, shared by the election loop (announcements) and the API (streams).
#[derive(Debug, Default)]
pub struct ObserverTable {
    entries: BTreeMap<String, Entry>,
}

/// How the loop and the API hold it.
pub type Observers = Arc<Mutex<ObserverTable>>;

/// Whether `id` may be a name in the table: what the client library sends (visible ASCII).
pub fn valid_name(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_NAME_BYTES && id.bytes().all(|b| (b'!'..=b'~').contains(&b))
}

impl ObserverTable {
    pub fn shared() -> Observers {
        Arc::new(Mutex::new(ObserverTable::default()))
    }

    fn touch(&mut self, now: Instant, id: &str, via: Via) -> Option<&mut Entry> {
        if !valid_name(id) {
            return None;
        }
        if !self.entries.contains_key(id) {
            self.make_room(now);
            self.entries.insert(
                id.to_string(),
                Entry {
                    via,
                    first: now,
                    last: now,
                    streams: 0,
                },
            );
        }
        let e = self.entries.get_mut(id)?;
        e.last = now;
        e.via = e.via.min(via);
        Some(e)
    }

    /// An announcement of `id` arrived on the topic.
    pub fn heard(&mut self, now: Instant, id: &str) {
        self.touch(now, id, Via::Topic);
    }

    /// `id` opened an `/events` stream here.
    pub fn opened(&mut self, now: Instant, id: &str) {
        if let Some(e) = self.touch(now, id, Via::Events) {
            e.streams += 1;
        }
    }

    /// A stream `id` had open here ended.
    pub fn closed(&mut self, now: Instant, id: &str) {
        if let Some(e) = self.entries.get_mut(id) {
            e.streams = e.streams.saturating_sub(1);
            e.last = now;
        }
    }

    fn live(e: &Entry, now: Instant) -> bool {
        e.streams > 0 || now < e.last + FORGET_AFTER
    }

    /// Forgets the gone, then the longest unheard without a stream, until there is room.
    fn make_room(&mut self, now: Instant) {
        if self.entries.len() < MAX_OBSERVERS {
            return;
        }
        self.entries.retain(|_, e| Self::live(e, now));
        while self.entries.len() >= MAX_OBSERVERS {
            let oldest = self
                .entries
                .iter()
                .filter(|(_, e)| e.streams == 0)
                .min_by_key(|(_, e)| e.last)
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => self.entries.remove(&id),
                // Every entry has a stream open: the streams' own cap bounds them.
                None => return,
            };
        }
    }

    /// The observers heard within [`FORGET_AFTER`] or with a stream open, by name.
    pub fn list(&self, now: Instant) -> Vec<Seen> {
        self.entries
            .iter()
            .filter(|(_, e)| Self::live(e, now))
            .map(|(id, e)| Seen {
                id: id.clone(),
                via: e.via,
                first: e.first,
                last: e.last,
                streams: e.streams,
            })
            .collect()
    }

    /// How many are known now, by how.
    pub fn count(&self, now: Instant, via: Via) -> usize {
        self.entries
            .values()
            .filter(|e| e.via == via && Self::live(e, now))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        // Any instant will do: every time here is an offset from it.
        #[allow(clippy::disallowed_methods)]
        Instant::now()
    }

    #[test]
    fn announcements_and_streams_are_listed_and_forgotten() {
        let t0 = t0();
        let mut t = ObserverTable::default();
        t.heard(t0, "o1");
        t.opened(t0, "o2");
        assert_eq!(t.count(t0, Via::Topic), 1);
        assert_eq!(t.count(t0, Via::Events), 1);
        let later = t0 + FORGET_AFTER;
        let names: Vec<String> = t.list(later).into_iter().map(|s| s.id).collect();
        assert_eq!(names, ["o2"], "o1 unheard for 30 s; o2's stream is open");
        t.closed(later, "o2");
        assert_eq!(t.list(later + FORGET_AFTER).len(), 0);
        // Both ways: the topic counts first.
        t.opened(later, "o3");
        t.heard(later, "o3");
        let o3 = t.list(later).into_iter().find(|s| s.id == "o3").unwrap();
        assert_eq!(o3.via, Via::Topic);
    }

    #[test]
    fn made_up_names_cost_a_bounded_table() {
        let t0 = t0();
        let mut t = ObserverTable::default();
        t.opened(t0, "kept");
        for i in 0..(MAX_OBSERVERS * 2) {
            t.heard(t0 + Duration::from_millis(i as u64), &format!("fake-{i}"));
        }
        assert!(t.entries.len() <= MAX_OBSERVERS);
        assert!(
            t.entries.contains_key("kept"),
            "an open stream is never evicted"
        );
        assert!(t
            .entries
            .contains_key(&format!("fake-{}", MAX_OBSERVERS * 2 - 1)));
        t.heard(t0, "");
        t.heard(t0, "has space");
        t.heard(t0, &"x".repeat(MAX_NAME_BYTES + 1));
        assert!(!t.entries.contains_key("has space"));
        assert!(valid_name(&"x".repeat(MAX_NAME_BYTES)));
    }
}
