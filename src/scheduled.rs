//! A step-down the operator schedules for later (`POST /step-down {"at": ...}`): kept on the
//! leader, carried out at its hour through the same command path as an immediate one (the
//! `--exec` gate included), and dropped if leadership changes first, since it was asked of
//! *this* leadership, not of whichever comes next.
//!
//! It lives in memory only. A restart of the leader hands leadership over (rule 13), which
//! changes the term, which would drop the operation anyway: keeping it on disk could only
//! bring back an operation that no longer applies. The API says so in its answer.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, watch, Notify};

use crate::clock;
use crate::clock::wall::{rfc3339, unix_ms_now};
use crate::election::Input;
use crate::runtime::{Command, Snapshot};

/// Finished operations kept for `/status` and `GET /step-down`.
pub const FINISHED_LIMIT: usize = 20;

/// How far ahead a step-down may be scheduled: further than this is more likely a typo than a
/// plan, and the operation would outlive most leaderships anyway.
pub const MAX_AHEAD: Duration = Duration::from_secs(30 * 24 * 3600);

/// The scheduler re-checks its clock at least this often, so a wall clock that is set forward
/// (NTP, an operator) fires an operation within this much of its hour.
const RECHECK: Duration = Duration::from_secs(1);

/// One scheduled step-down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Operation {
    /// `sd-` and a number unique on this node since it started.
    pub id: String,
    /// When it fires, RFC 3339 (as `at_ms`, for display).
    pub at: String,
    #[serde(skip)]
    pub at_ms: u64,
    pub successor: Option<String>,
    /// The term it was asked in; another term drops it.
    pub term: u64,
    /// When it was asked for, RFC 3339.
    pub created: String,
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// The step-down was carried out.
    Done,
    /// The node refused it at its hour (a successor that could not lead then, say).
    Refused,
    /// `DELETE /step-down`.
    Cancelled,
    /// Leadership changed before its hour.
    Dropped,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finished {
    #[serde(flatten)]
    pub operation: Operation,
    pub ending: Ending,
    /// What happened, in words.
    pub detail: String,
    /// When it ended, RFC 3339.
    pub ended: String,
}

#[derive(Debug, Default)]
struct Book {
    pending: Option<Operation>,
    finished: VecDeque<Finished>,
    next: u64,
}

impl Book {
    fn finish(&mut self, ending: Ending, detail: String) -> Option<Finished> {
        let operation = self.pending.take()?;
        let f = Finished {
            operation,
            ending,
            detail,
            ended: rfc3339(unix_ms_now()),
        };
        tracing::info!(
            operation = %f.operation.id,
            ending = ?f.ending,
            detail = %f.detail,
            "scheduled step-down ended"
        );
        self.finished.push_back(f.clone());
        while self.finished.len() > FINISHED_LIMIT {
            self.finished.pop_front();
        }
        Some(f)
    }
}

/// Why an operation could not be scheduled or cancelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// One is pending already (only one at a time: two would race each other).
    Pending(Operation),
    /// Nothing to cancel.
    Nothing,
}

/// The API's handle on the scheduler task.
#[derive(Clone)]
pub struct Scheduler {
    book: Arc<Mutex<Book>>,
    changed: Arc<Notify>,
}

impl Scheduler {
    /// Starts the task that fires operations through `commands` (the API's command path).
    pub fn start(
        snapshot: watch::Receiver<Arc<Snapshot>>,
        commands: mpsc::Sender<Command>,
        holds: crate::jobs::Holds,
    ) -> Self {
        let s = Scheduler {
            book: Arc::new(Mutex::new(Book::default())),
            changed: Arc::new(Notify::new()),
        };
        tokio::spawn(run(s.clone(), snapshot, (commands, holds)));
        s
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Schedules a step-down of leadership `term` at `at_ms` (the caller checked that this node
    /// leads in `term` and that the hour lies ahead).
    pub fn schedule(
        &self,
        at_ms: u64,
        successor: Option<String>,
        term: u64,
    ) -> Result<Operation, Refusal> {
        let mut book = self.book();
        if let Some(p) = &book.pending {
            return Err(Refusal::Pending(p.clone()));
        }
        book.next += 1;
        let op = Operation {
            id: format!("sd-{}", book.next),
            at: rfc3339(at_ms),
            at_ms,
            successor,
            term,
            created: rfc3339(unix_ms_now()),
        };
        tracing::info!(operation = %op.id, at = %op.at, successor = op.successor.as_deref().unwrap_or(""), term, "step-down scheduled");
        book.pending = Some(op.clone());
        drop(book);
        self.changed.notify_one();
        Ok(op)
    }

    pub fn cancel(&self) -> Result<Finished, Refusal> {
        let f = self
            .book()
            .finish(Ending::Cancelled, "cancelled by the operator".into())
            .ok_or(Refusal::Nothing)?;
        self.changed.notify_one();
        Ok(f)
    }

    pub fn pending(&self) -> Option<Operation> {
        self.book().pending.clone()
    }

    /// The latest finished operations, oldest first.
    pub fn finished(&self) -> Vec<Finished> {
        self.book().finished.iter().cloned().collect()
    }
}

/// Whether leadership `term` still holds in `snap`; if not, why the operation is dropped.
fn still_leads(snap: &Snapshot, term: u64) -> Result<(), String> {
    let v = &snap.view;
    if v.term != term {
        return Err(format!("the term changed from {term} to {} first", v.term));
    }
    if !v.is_leader_at(clock::now()) {
        return Err(format!("this node stopped leading term {term} first"));
    }
    Ok(())
}

async fn run(
    s: Scheduler,
    mut snapshot: watch::Receiver<Arc<Snapshot>>,
    commands: (mpsc::Sender<Command>, crate::jobs::Holds),
) {
    loop {
        let pending = s.pending();
        if let Some(op) = &pending {
            let check = still_leads(&snapshot.borrow(), op.term);
            if let Err(why) = check {
                s.book().finish(Ending::Dropped, why);
                continue;
            }
            let now_ms = unix_ms_now();
            if now_ms >= op.at_ms {
                let view = snapshot.borrow().view.clone();
                fire(&s, op, &view, &commands).await;
                continue;
            }
        }
        // Leadership is watched only while something depends on it.
        let watching = pending.is_some();
        let wait = pending.map_or(RECHECK, |op| {
            Duration::from_millis(op.at_ms.saturating_sub(unix_ms_now())).min(RECHECK)
        });
        tokio::select! {
            _ = tokio::time::sleep(wait), if watching => {}
            _ = s.changed.notified() => {}
            changed = snapshot.changed(), if watching => {
                if changed.is_err() {
                    // The node is gone; so is the leadership the operation was for.
                    s.book().finish(Ending::Dropped, "the node stopped".into());
                    return;
                }
            }
        }
    }
}

async fn fire(
    s: &Scheduler,
    op: &Operation,
    view: &crate::election::View,
    (commands, holds): &(mpsc::Sender<Command>, crate::jobs::Holds),
) {
    let input = Input::StepDown {
        successor: op.successor.clone(),
        expected_term: Some(op.term),
    };
    // Through the holds of leader-only jobs, as the API's step-down goes.
    let result = crate::jobs::command(commands, holds, view, input)
        .await
        .ok_or_else(|| "the election loop stopped".to_string());
    let mut book = s.book();
    // Cancelled while the command was on its way: the cancel came too late to matter, but the
    // operation is accounted for once.
    if book.pending.as_ref().map(|p| &p.id) != Some(&op.id) {
        return;
    }
    match result {
        Ok(Ok(_)) => book.finish(Ending::Done, "stepped down at its hour".into()),
        Ok(Err(e)) => book.finish(Ending::Refused, e.to_string()),
        Err(e) => book.finish(Ending::Refused, e),
    };
}
