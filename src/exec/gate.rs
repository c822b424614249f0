//! The gate between the API and the election loop: a command that would hand leadership over
//! (a step-down, a candidacy withdrawal) reaches the loop only once the child is gone.

use super::*;

pub(super) async fn gate(
    mut from_api: mpsc::Receiver<Command>,
    to_loop: mpsc::Sender<Command>,
    exec: ExecHandle,
    snapshot: watch::Receiver<Arc<Snapshot>>,
) {
    while let Some(cmd) = from_api.recv().await {
        let view = snapshot.borrow().view.clone();
        // Only a command that hands leadership over costs the child its run (the core says
        // which do).
        if !view.hands_over(&cmd.input, clock::now()) {
            if to_loop.send(cmd).await.is_err() {
                return;
            }
            continue;
        }
        exec.hold(DRAIN_GRACE).await;
        let (reply, answer) = oneshot::channel();
        let forwarded = Command {
            input: cmd.input,
            reply,
        };
        if to_loop.send(forwarded).await.is_err() {
            return;
        }
        let Ok(result) = answer.await else {
            return;
        };
        let release = match result {
            Ok(_) => Control::ReleaseAfter { term: view.term },
            Err(_) => Control::Release,
        };
        let _ = exec.control.send(release).await;
        let _ = cmd.reply.send(result);
    }
}
