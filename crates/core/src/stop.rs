//! When a stopping node may exit (docs/protocol.md, rule 13): the one policy the runtime runs
//! and the simulator models, so that the simulator checks the real one.

use std::time::Duration;

use super::interface::View;

/// How long a stopping leader waits for its successor before it leaves anyway: a handover takes
/// milliseconds; this covers a successor that has to retry once.
pub const HANDOVER_GRACE: Duration = Duration::from_secs(4);

/// Why a stopping node exits now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// It did not lead, or had nobody to hand over to: nothing to wait for.
    NothingToWaitFor,
    /// Its successor leads (this node's view names it).
    HandedOver {
        /// The new leader.
        successor: String,
    },
    /// The grace ran out without a successor.
    GraceOver,
}

/// Whether a node that began stopping `waited` ago exits now. `hand_over`: it led with someone
/// to hand over to when the stop began; `view`: its view now.
pub fn exit_now(hand_over: bool, view: &View, waited: Duration) -> Option<Exit> {
    if !hand_over {
        return Some(Exit::NothingToWaitFor);
    }
    if let Some(s) = view.leader.as_ref().filter(|l| **l != view.node_id) {
        return Some(Exit::HandedOver {
            successor: s.clone(),
        });
    }
    (waited >= HANDOVER_GRACE).then_some(Exit::GraceOver)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interface::Role;
    use crate::Candidacy;

    fn view(leader: Option<&str>) -> View {
        View {
            candidacy: Candidacy::Stopping,
            can_campaign: false,
            shutting_down: true,
            ..crate::interface::tests::view(Role::Follower, leader)
        }
    }

    #[test]
    fn a_stopping_leader_waits_for_its_successor_or_the_grace() {
        let ms = Duration::from_millis;
        assert_eq!(
            exit_now(false, &view(None), ms(0)),
            Some(Exit::NothingToWaitFor)
        );
        assert_eq!(exit_now(true, &view(None), ms(100)), None, "waits");
        assert_eq!(
            exit_now(true, &view(Some("a")), ms(100)),
            None,
            "still itself"
        );
        assert_eq!(
            exit_now(true, &view(Some("b")), ms(100)),
            Some(Exit::HandedOver {
                successor: "b".into()
            })
        );
        assert_eq!(
            exit_now(true, &view(None), HANDOVER_GRACE),
            Some(Exit::GraceOver)
        );
    }
}
