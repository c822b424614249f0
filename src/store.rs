//! What a node keeps in `--data-dir`: its term and vote (the state file), a boot counter, the
//! member set it last ran with, and the recent leader transitions.
//!
//! The state file is what stops a restarted node from voting twice in one term, so it is written
//! atomically and durably, and a file that cannot be read stops start-up instead of being
//! silently replaced.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::election::firing::Firing;
use crate::election::{Maintenance, MemberSet, Persistent};

pub const STATE_FILE: &str = "state.json";
pub const HISTORY_FILE: &str = "history.json";
/// The highest sequence number accepted from each signed peer (see [`Store::replay_marks`]).
pub const REPLAY_FILE: &str = "replay.json";
/// The member set this data directory last ran with (see [`Store::last_members`]).
pub const MEMBERS_FILE: &str = "members.json";
/// The groups an operator added while the node ran (`POST /groups`), kept in the default
/// group's directory so that a restart takes part in them again.
pub const GROUPS_FILE: &str = "groups.json";
/// The longest promise beyond `T` that may still hold (docs/protocol.md, rule 8).
pub const PROMISE_FILE: &str = "promise.json";
/// The newest write of the operator's maintenance this node has seen (rule 16).
pub const MAINTENANCE_FILE: &str = "maintenance.json";
/// The newest record of a scheduled firing this node has seen (rule 19).
pub const FIRING_FILE: &str = "firing.json";
/// The scheduled firings this node accounted for as leader, for `/history`.
pub const FIRING_LOG_FILE: &str = "firing-log.json";
/// Transitions kept in memory and on disk.
pub const HISTORY_LIMIT: usize = 200;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    term: u64,
    voted_for: Option<String>,
    /// Raised at every start (at least to the wall clock in seconds); the high half of every
    /// sequence number, so that a restarted node never reuses one, even after losing this file.
    boot: u64,
}

/// Its own file, not a field of the state file, so that an older binary started on this
/// directory (a rolled-back upgrade) still reads its state file.
/// `groups.json`: the groups added at run time, in the order they were added.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct GroupsFile {
    added: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MembersFile {
    members: BTreeSet<String>,
    /// For people reading the file: the fingerprint `/status` shows for this set.
    fingerprint: String,
}

/// Its own file for the same reason as [`MembersFile`]; written only when the length changes,
/// which happens while a cluster runs mixed timings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PromiseFile {
    /// Milliseconds, rounded up; `null` when no promise beyond `T` holds.
    promised_ms: Option<u64>,
}

/// One change of the known leader, as `/history` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub term: u64,
    pub leader: Option<String>,
    pub previous: Option<String>,
    pub reason: String,
    /// Wall-clock time, RFC 3339 UTC.
    pub at: String,
    /// For a new leader: how long this node knew none before it.
    pub leaderless_ms: Option<u64>,
}

/// The first sequence number of a boot: the boot counter in the high 32 bits, so that numbers
/// never repeat across restarts and peers' replay windows accept the new boot's messages.
pub fn first_seq(boot: u64) -> u64 {
    boot << 32
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot use state file {path}: {reason}; it holds this node's term and vote, so start-up \
         stops rather than risk voting twice. Repair or remove it, or start once with \
         --reset-state to begin again at term 0"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "cannot read {path}: {reason}; it holds the member set this node last ran with, which \
         start-up compares with the configured one (one member change at a time). Repair or \
         remove it"
    )]
    CorruptMembers { path: PathBuf, reason: String },
    #[error(
        "cannot use {path}: {reason}; it holds how long this node may still have promised a \
         leader not to vote for others, which its start-up guard must cover. Repair it, or \
         remove it once every node has run for longer than the longest --election-timeout \
         in the cluster"
    )]
    CorruptPromise { path: PathBuf, reason: String },
    #[error(
        "cannot use {path}: {reason}; it lists the groups an operator added while the node ran \
         (POST /groups), and a node that forgot them would stop voting in them. Repair it, or \
         remove it and add those groups again"
    )]
    CorruptGroups { path: PathBuf, reason: String },
    #[error(
        "cannot use {path}: {reason}; it holds the newest scheduled firing this node \
         acknowledged, and a node that forgot it could let a leader run that firing twice. \
         Repair it, or remove it once the firing it named is long past"
    )]
    CorruptFiring { path: PathBuf, reason: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create data directory {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
}

mod book;
pub use book::{Book, BOOK_FILE};

/// The data directory of one node.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    boot: u64,
    /// What the last [`Store::persist`] wrote, so that an unchanged file is not written again.
    written: Arc<Mutex<Written>>,
}

#[derive(Debug, Default)]
struct Written {
    state: Option<(u64, Option<String>)>,
    promised_ms: Option<u64>,
}

pub(crate) fn ceil_ms(d: Duration) -> u64 {
    d.as_nanos().div_ceil(1_000_000) as u64
}

/// What a node starts from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub store: Store,
    pub persistent: Persistent,
    pub boot: u64,
    pub history: Vec<HistoryEntry>,
    /// The newest scheduled firing record it kept (rule 19).
    pub firing: Option<Firing>,
}

impl Store {
    /// Reads the state, counts this boot and writes it back before anything is sent.
    pub fn open(dir: &Path, reset: bool) -> Result<Loaded, StoreError> {
        fs::create_dir_all(dir).map_err(|source| StoreError::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(STATE_FILE);
        let mut state = if reset {
            StateFile::default()
        } else {
            match fs::read(&path) {
                Ok(bytes) => serde_json::from_slice::<StateFile>(&bytes).map_err(|e| {
                    StoreError::Corrupt {
                        path: path.clone(),
                        reason: e.to_string(),
                    }
                })?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => StateFile::default(),
                Err(e) => {
                    return Err(StoreError::Corrupt {
                        path,
                        reason: e.to_string(),
                    })
                }
            }
        };
        // Never below the wall clock in seconds: a node whose state file was lost or reset
        // must still number its messages above everything it sent before, or peers' replay
        // windows would drop them all. Increments still win if the clock steps back.
        state.boot = (state.boot + 1).max(crate::clock::wall::unix_ms_now() / 1000);
        // A reset starts over on purpose; a damaged promise file is then dropped with the rest.
        let promised_ms = match read_promise(&dir.join(PROMISE_FILE)) {
            Err(_) if reset => None,
            read => read?,
        };
        let store = Store {
            dir: dir.to_path_buf(),
            boot: state.boot,
            written: Arc::new(Mutex::new(Written {
                state: Some((state.term, state.voted_for.clone())),
                promised_ms,
            })),
        };
        store.write_state(&state)?;
        let history = read_history(dir);
        let firing = read_firing(dir)?;
        Ok(Loaded {
            persistent: Persistent {
                term: state.term,
                voted_for: state.voted_for,
                promised: promised_ms.map(Duration::from_millis),
            },
            boot: state.boot,
            store,
            history,
            firing,
        })
    }

    /// The directory of a group beside the default one (`<data-dir>/groups/<group>/`): its
    /// history and maintenance setting. Its term, vote and promise are in the [`Book`], and its
    /// sequence numbers start at the book's boot counter, `boot`.
    pub fn for_group(dir: &Path, boot: u64) -> Result<Loaded, StoreError> {
        fs::create_dir_all(dir).map_err(|source| StoreError::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
        let history = read_history(dir);
        let firing = read_firing(dir)?;
        Ok(Loaded {
            store: Store {
                dir: dir.to_path_buf(),
                boot,
                written: Arc::new(Mutex::new(Written::default())),
            },
            persistent: Persistent::default(),
            boot,
            history,
            firing,
        })
    }

    /// Makes `p` durable: each file whose part changed is written and fsynced before this
    /// returns (a promise is rounded up to whole milliseconds).
    pub fn persist(&self, p: &Persistent) -> Result<(), StoreError> {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let state = (p.term, p.voted_for.clone());
        if written.state.as_ref() != Some(&state) {
            self.write_state(&StateFile {
                term: p.term,
                voted_for: p.voted_for.clone(),
                boot: self.boot,
            })?;
            written.state = Some(state);
        }
        let promised_ms = p.promised.map(ceil_ms);
        if written.promised_ms != promised_ms {
            let bytes = serde_json::to_vec_pretty(&PromiseFile { promised_ms })
                .expect("the promise serializes");
            write_atomic(&self.dir, PROMISE_FILE, &bytes)?;
            written.promised_ms = promised_ms;
        }
        Ok(())
    }

    fn write_state(&self, s: &StateFile) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec_pretty(s).expect("state serializes");
        write_atomic(&self.dir, STATE_FILE, &bytes)
    }

    /// The member set this directory last ran with; `None` for a new node (or one that ran
    /// with a version that did not record it).
    pub fn last_members(&self) -> Result<Option<BTreeSet<String>>, StoreError> {
        let path = self.dir.join(MEMBERS_FILE);
        let corrupt = |reason: String| StoreError::CorruptMembers {
            path: path.clone(),
            reason,
        };
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<MembersFile>(&bytes)
                .map(|f| Some(f.members))
                .map_err(|e| corrupt(e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(corrupt(e.to_string())),
        }
    }

    /// Records the set this run uses, before anything is sent.
    pub fn save_members(&self, set: &MemberSet) -> Result<(), StoreError> {
        let file = MembersFile {
            members: set.ids().map(str::to_string).collect(),
            fingerprint: set.fingerprint().to_string(),
        };
        let bytes = serde_json::to_vec_pretty(&file).expect("members serialize");
        write_atomic(&self.dir, MEMBERS_FILE, &bytes)
    }

    /// The groups added while the node ran, as the last `save_added_groups` left them (none
    /// when the file is absent). A damaged file stops start-up: see
    /// [`StoreError::CorruptGroups`].
    pub fn added_groups(&self) -> Result<Vec<String>, StoreError> {
        let path = self.dir.join(GROUPS_FILE);
        let corrupt = |reason: String| StoreError::CorruptGroups {
            path: path.clone(),
            reason,
        };
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<GroupsFile>(&bytes)
                .map(|f| f.added)
                .map_err(|e| corrupt(e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(corrupt(e.to_string())),
        }
    }

    /// Keeps `added` (atomic and fsynced) before the operator is told a group was added or
    /// removed.
    pub fn save_added_groups(&self, added: &[String]) -> Result<(), StoreError> {
        let file = GroupsFile {
            added: added.to_vec(),
        };
        let bytes = serde_json::to_vec_pretty(&file).expect("groups serialize");
        write_atomic(&self.dir, GROUPS_FILE, &bytes)
    }

    pub fn save_history(&self, h: &[HistoryEntry]) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(h).expect("history serializes");
        write_atomic(&self.dir, HISTORY_FILE, &bytes)
    }

    /// The replay marks a previous run saved. They are written at most once per heartbeat
    /// interval, so after a crash only the last interval's messages could be replayed to this
    /// node. Safety never rested on them (the persisted term and vote still bound what any
    /// replay can do); they bound how long a recording can keep a restarted node believing in a
    /// dead leader. A damaged file is therefore reported and ignored rather than stopping
    /// start-up.
    pub fn replay_marks(&self) -> BTreeMap<String, u64> {
        let path = self.dir.join(REPLAY_FILE);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                warn_unreadable(&path, &e);
                BTreeMap::new()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                warn_unreadable(&path, &e);
                BTreeMap::new()
            }
        }
    }

    /// The maintenance write a previous run kept. It is not safety state (maintenance only
    /// holds campaigns back), so a damaged file is reported and ignored: the node then learns
    /// the setting from the next message of any member that has it.
    pub fn maintenance(&self) -> Option<Maintenance> {
        let path = self.dir.join(MAINTENANCE_FILE);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .inspect_err(|e| {
                    tracing::warn!(file = %path.display(), error = %e,
                        "maintenance file unreadable: ignored until a member sends the setting");
                })
                .ok(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e,
                    "maintenance file unreadable: ignored until a member sends the setting");
                None
            }
        }
    }

    /// Keeps `m` across restarts (fsynced: a pause an operator was told about must hold after a
    /// power cut).
    pub fn save_maintenance(&self, m: &Maintenance) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec_pretty(m).expect("maintenance serializes");
        write_atomic(&self.dir, MAINTENANCE_FILE, &bytes)
    }

    /// The firings this node accounted for, as a previous run kept them. Informational: a
    /// damaged file costs the list, never start-up.
    pub fn firing_log<T: serde::de::DeserializeOwned>(&self) -> Vec<T> {
        fs::read(self.dir.join(FIRING_LOG_FILE))
            .ok()
            .and_then(|b| serde_json::from_slice::<Vec<T>>(&b).ok())
            .unwrap_or_default()
    }

    pub fn save_firing_log<T: Serialize>(&self, list: &[T]) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(list).expect("the firing log serializes");
        write_atomic(&self.dir, FIRING_LOG_FILE, &bytes)
    }

    /// Keeps a firing record across restarts, fsynced before any message carries it.
    pub fn save_firing(&self, f: &Firing) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec_pretty(f).expect("a firing record serializes");
        write_atomic(&self.dir, FIRING_FILE, &bytes)
    }

    pub fn save_replay_marks(&self, marks: &BTreeMap<String, u64>) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(marks).expect("marks serialize");
        write_atomic(&self.dir, REPLAY_FILE, &bytes)
    }
}

/// The firing record a previous run left in `dir` (rule 19). Refused when unreadable: a member
/// that forgot the record it acknowledged could vote without it, and a leader so elected could
/// run that firing again.
fn read_firing(dir: &Path) -> Result<Option<Firing>, StoreError> {
    let path = dir.join(FIRING_FILE);
    match fs::read(&path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| StoreError::CorruptFiring {
                    path,
                    reason: e.to_string(),
                })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::CorruptFiring {
            path,
            reason: e.to_string(),
        }),
    }
}

/// The history a previous run left in `dir`. Informational: a damaged file costs the list,
/// never start-up.
fn read_history(dir: &Path) -> Vec<HistoryEntry> {
    fs::read(dir.join(HISTORY_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<Vec<HistoryEntry>>(&b).ok())
        .unwrap_or_default()
}

fn read_promise(path: &Path) -> Result<Option<u64>, StoreError> {
    let corrupt = |reason: String| StoreError::CorruptPromise {
        path: path.to_path_buf(),
        reason,
    };
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice::<PromiseFile>(&bytes)
            .map(|f| f.promised_ms)
            .map_err(|e| corrupt(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(corrupt(e.to_string())),
    }
}

fn warn_unreadable(path: &Path, e: &dyn std::fmt::Display) {
    tracing::warn!(
        file = %path.display(),
        error = %e,
        "replay marks unreadable: messages peers sent before this start could be replayed to it"
    );
}

/// Temp file, fsync, rename, fsync the directory: after a crash the file is either the old one
/// or the new one, and once this returns the new one survives a power cut.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let err = |source| StoreError::Write {
        path: path.clone(),
        source,
    };
    let mut f = File::create(&tmp).map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_all().map_err(err)?;
    drop(f);
    fs::rename(&tmp, &path).map_err(err)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(err)?;
    Ok(())
}
