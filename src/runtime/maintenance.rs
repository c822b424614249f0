//! The shell's half of rule 16: the operator's maintenance setting, kept on disk, sent on every
//! message, taken from any member's message when newer, and handed to the core whenever it is
//! in force or stops being (a pause with an end lapses by itself). The core only ever learns
//! "on" or "off"; the write itself, with its wall-clock end, never reaches it.

use super::*;
use crate::election::Maintenance;

/// `POST /pause` or `DELETE /pause`, answered with the write once it is on disk.
#[derive(Debug)]
pub struct MaintenanceRequest {
    pub on: bool,
    /// Unix milliseconds at which the pause ends by itself.
    pub until: Option<u64>,
    pub reason: Option<String>,
    pub reply: oneshot::Sender<Result<Maintenance, StoreError>>,
}

impl Election {
    /// An operator's write: a version above every one this node has seen, so it wins over all of
    /// them. Refused if it cannot be kept on disk, since a pause that a restart forgets is not
    /// the pause the operator was promised.
    pub(super) async fn on_maintenance_request(
        &mut self,
        shared: &Shared,
        out: &mut Outbox,
        req: MaintenanceRequest,
    ) -> Result<(), RuntimeError> {
        let write = Maintenance {
            on: req.on,
            until: req.until,
            at: unix_ms_now(),
            by: self.node.id().to_string(),
            version: self
                .maintenance
                .as_ref()
                .map_or(0, |m| m.version)
                .saturating_add(1),
            reason: req.reason,
        };
        let answer = match self.save_maintenance(&write).await {
            Ok(()) => {
                self.take_maintenance(write.clone(), "operator");
                self.sync_maintenance(shared, out).await?;
                // The answer waits for the others on the snapshots: this one must show the
                // write even when it changed nothing in the core.
                self.publish_snapshot(shared, clock::now());
                Ok(write)
            }
            Err(e) => Err(e),
        };
        let _ = req.reply.send(answer);
        Ok(())
    }

    /// A member's message carried `write`: taken if it supersedes ours. A failed save only
    /// logs here: the setting still holds in memory, and every member keeps sending it.
    pub(super) async fn on_maintenance_heard(
        &mut self,
        shared: &Shared,
        out: &mut Outbox,
        write: &Maintenance,
    ) -> Result<(), RuntimeError> {
        if self
            .maintenance
            .as_ref()
            .is_some_and(|m| !write.supersedes(m))
        {
            return Ok(());
        }
        if let Err(e) = self.save_maintenance(write).await {
            tracing::warn!(error = %e, "could not keep the maintenance setting on disk");
        }
        self.take_maintenance(write.clone(), "member");
        self.sync_maintenance(shared, out).await
    }

    /// Which write member `from` holds: the one its latest message carried (none if it
    /// carried none). A member sends a write only after it tried to keep it on disk.
    pub(super) fn note_carried(&mut self, from: &str, write: Option<&Maintenance>) {
        match write {
            Some(w) => {
                let same = self
                    .carried
                    .get(from)
                    .is_some_and(|(version, by)| *version == w.version && *by == w.by);
                if !same {
                    self.carried
                        .insert(from.to_string(), (w.version, w.by.clone()));
                }
            }
            None => {
                self.carried.remove(from);
            }
        }
    }

    /// Hands the core "on" or "off" when that changed: a new write, or a pause that reached its
    /// end (checked every loop turn, which is at least every heartbeat interval).
    pub(super) async fn sync_maintenance(
        &mut self,
        shared: &Shared,
        out: &mut Outbox,
    ) -> Result<(), RuntimeError> {
        let in_force = self
            .maintenance
            .as_ref()
            .is_some_and(|m| m.in_force(unix_ms_now()));
        if in_force != self.maintenance_in_core {
            self.maintenance_in_core = in_force;
            if !in_force {
                tracing::info!("maintenance over: automatic failover is back");
            }
            let _ = self
                .step(shared, out, Input::SetMaintenance { on: in_force })
                .await?;
        }
        Ok(())
    }

    async fn save_maintenance(&self, write: &Maintenance) -> Result<(), StoreError> {
        let (store, write) = (self.store.clone(), write.clone());
        tokio::task::spawn_blocking(move || store.save_maintenance(&write))
            .await
            .expect("the maintenance write does not panic")
    }

    fn take_maintenance(&mut self, write: Maintenance, source: &'static str) {
        tracing::info!(
            on = write.on,
            by = %write.by,
            version = write.version,
            until = write.until.map(rfc3339).unwrap_or_default(),
            reason = write.reason.as_deref().unwrap_or(""),
            source,
            "maintenance setting changed"
        );
        self.maintenance = Some(write);
    }
}
