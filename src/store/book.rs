//! The term, vote and promise of every group beside the default one, in one file
//! (`<data-dir>/groups/state.json`): however many of them change in one turn of the election
//! loop, one write and one fsync keep them all (docs/protocol.md, rule 18), where a file per
//! group would cost an fsync per group, a thousand at a failover.
//!
//! The default group keeps its own `state.json` and `promise.json` in the data directory, as a
//! node of one election always has, so that an older binary started on the directory still
//! finds its term and vote. A group's entry is never dropped, not even when the group is
//! removed: a term and vote once persisted must hold if the group is added again.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ceil_ms, write_atomic, StoreError};
use crate::election::Persistent;

/// The book's file, in `<data-dir>/groups/`.
pub const BOOK_FILE: &str = "state.json";

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BookFile {
    /// Raised at every start, as the default group's: the high half of every sequence number
    /// of every group in the book.
    boot: u64,
    groups: BTreeMap<String, Entry>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    term: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    voted_for: Option<String>,
    /// Milliseconds, rounded up: the longest promise beyond `T` that may still hold (rule 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    promised_ms: Option<u64>,
}

impl Entry {
    fn of(p: &Persistent) -> Entry {
        Entry {
            term: p.term,
            voted_for: p.voted_for.clone(),
            promised_ms: p.promised.map(ceil_ms),
        }
    }

    fn persistent(&self) -> Persistent {
        Persistent {
            term: self.term,
            voted_for: self.voted_for.clone(),
            promised: self.promised_ms.map(Duration::from_millis),
        }
    }
}

/// The persisted state of the groups beside the default one. The election loop stages each
/// group's new state and writes the whole book once per turn ([`Book::write`]) before any
/// message that depends on it leaves; the groups' builders read a group's state from it.
#[derive(Debug)]
pub struct Book {
    dir: PathBuf,
    file: BookFile,
    /// Staged since the last write.
    dirty: bool,
}

impl Book {
    /// Reads the book in `dir` (none yet: empty), counts this boot and writes it back before
    /// anything is sent. A book that cannot be read stops start-up, as a damaged state file
    /// does: it holds the votes of every group in it. `reset` starts every group at term 0.
    pub fn open(dir: &Path, reset: bool) -> Result<Book, StoreError> {
        fs::create_dir_all(dir).map_err(|source| StoreError::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(BOOK_FILE);
        let corrupt = |reason: String| StoreError::Corrupt {
            path: path.clone(),
            reason,
        };
        let mut file = if reset {
            BookFile::default()
        } else {
            match fs::read(&path) {
                Ok(bytes) => serde_json::from_slice::<BookFile>(&bytes)
                    .map_err(|e| corrupt(e.to_string()))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => BookFile::default(),
                Err(e) => return Err(corrupt(e.to_string())),
            }
        };
        // As the default group's: never below the wall clock in seconds, so that a lost book
        // still numbers messages above everything sent before.
        file.boot = (file.boot + 1).max(crate::clock::wall::unix_ms_now() / 1000);
        let mut book = Book {
            dir: dir.to_path_buf(),
            file,
            dirty: true,
        };
        book.write()?;
        Ok(book)
    }

    /// The boot counter of this run, for the groups' sequence numbers.
    pub fn boot(&self) -> u64 {
        self.file.boot
    }

    /// A new boot counter for an election that starts while the node runs (a group added, or
    /// added again after a removal): above every number this run used, so that its sequence
    /// numbers never repeat one an earlier election of the group sent. Kept by the next
    /// [`Book::write`], which must come before the election sends anything.
    pub fn next_boot(&mut self) -> u64 {
        self.file.boot += 1;
        self.dirty = true;
        self.file.boot
    }

    /// What `group` last persisted (nothing: term 0).
    pub fn get(&self, group: &str) -> Persistent {
        self.file
            .groups
            .get(group)
            .map(Entry::persistent)
            .unwrap_or_default()
    }

    /// Takes `group`'s new state, to be written by the next [`Book::write`]. Returns whether it
    /// changed anything.
    pub fn stage(&mut self, group: &str, p: &Persistent) -> bool {
        let entry = Entry::of(p);
        if self.file.groups.get(group) == Some(&entry) {
            return false;
        }
        self.file.groups.insert(group.to_string(), entry);
        self.dirty = true;
        true
    }

    /// Whether something was staged since the last write.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Writes the book if anything was staged: one file, fsynced, renamed, the directory
    /// fsynced. Once this returns, every staged state survives a power cut.
    pub fn write(&mut self) -> Result<(), StoreError> {
        if !self.dirty {
            return Ok(());
        }
        let bytes = serde_json::to_vec(&self.file).expect("the book serializes");
        write_atomic(&self.dir, BOOK_FILE, &bytes)?;
        self.dirty = false;
        Ok(())
    }

    /// How many groups it holds (removed ones included).
    pub fn len(&self) -> usize {
        self.file.groups.len()
    }

    /// Whether it holds no group.
    pub fn is_empty(&self) -> bool {
        self.file.groups.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(term: u64, vote: Option<&str>, promised_ms: Option<u64>) -> Persistent {
        Persistent {
            term,
            voted_for: vote.map(str::to_string),
            promised: promised_ms.map(Duration::from_millis),
        }
    }

    #[test]
    fn every_group_staged_is_kept_by_one_write_and_read_back_after_a_restart() {
        let dir = std::env::temp_dir().join(format!("book-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut book = Book::open(&dir, false).unwrap();
        let first_boot = book.boot();
        assert_eq!(book.get("g1"), Persistent::default());
        assert!(book.stage("g1", &state(3, Some("n2"), None)));
        assert!(book.stage("g2", &state(5, None, Some(4500))));
        assert!(!book.stage("g2", &state(5, None, Some(4500))), "unchanged");
        assert!(book.is_dirty());
        book.write().unwrap();
        assert!(!book.is_dirty());
        // Removing a group keeps its entry: the book never forgets a vote.
        let again = Book::open(&dir, false).unwrap();
        assert!(again.boot() > first_boot);
        assert_eq!(again.get("g1"), state(3, Some("n2"), None));
        assert_eq!(again.get("g2"), state(5, None, Some(4500)));
        assert_eq!(again.len(), 2);
        // A reset starts every group over.
        let reset = Book::open(&dir, true).unwrap();
        assert!(reset.is_empty());
        // A damaged book stops start-up with the path in the message.
        fs::write(dir.join(BOOK_FILE), b"{not json").unwrap();
        let e = Book::open(&dir, false).unwrap_err().to_string();
        assert!(e.contains("state.json"), "{e}");
        let _ = fs::remove_dir_all(&dir);
    }
}
