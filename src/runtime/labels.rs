//! The metrics' labels for the core's types and the signing layer's refusals: exhaustive maps,
//! so that a new message type, outcome, reason or refusal does not compile without its label.
//! (The metrics import nothing of the crate; the runtime, which uses both, joins them.)

use crate::election::{Body, Outcome, Reason};
use crate::metrics::{MessageType, Received, TransitionReason};
use crate::signing::Rejection;

impl From<&Body> for MessageType {
    fn from(body: &Body) -> MessageType {
        match body {
            Body::Heartbeat { .. } => MessageType::Heartbeat,
            Body::Ack { .. } => MessageType::Ack,
            Body::Presence { .. } => MessageType::Presence,
            Body::Election { .. } => MessageType::Election,
            Body::Vote { .. } => MessageType::Vote,
            Body::Leader { .. } => MessageType::Leader,
            Body::Resign { .. } => MessageType::Resign,
        }
    }
}

impl From<&Outcome> for Received {
    fn from(outcome: &Outcome) -> Received {
        match outcome {
            Outcome::Accepted | Outcome::SteppedDown { .. } => Received::Accepted,
            Outcome::Stale => Received::Stale,
            Outcome::Ignored => Received::Ignored,
            Outcome::NotMember => Received::NotMember,
            Outcome::OtherMembers => Received::OtherMembers,
        }
    }
}

impl From<&Rejection> for Received {
    fn from(rejection: &Rejection) -> Received {
        match rejection {
            Rejection::Malformed(_) => Received::Malformed,
            Rejection::Unsigned => Received::Unsigned,
            Rejection::UnknownKey(_) => Received::UnknownKey,
            Rejection::BadSignature => Received::BadSignature,
            Rejection::Replayed { .. } => Received::Replayed,
        }
    }
}

impl From<Reason> for TransitionReason {
    fn from(reason: Reason) -> TransitionReason {
        match reason {
            Reason::Elected => TransitionReason::Elected,
            Reason::StepDown => TransitionReason::StepDown,
            Reason::Transfer => TransitionReason::Transfer,
            Reason::Preempted => TransitionReason::Preempted,
            Reason::LeaseExpired => TransitionReason::LeaseExpired,
            Reason::LeaderTimeout => TransitionReason::LeaderTimeout,
            Reason::HigherTerm => TransitionReason::HigherTerm,
            Reason::Shutdown => TransitionReason::Shutdown,
            Reason::Unhealthy => TransitionReason::Unhealthy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::WireError;

    /// The labels are the names the core and the signing layer give these in logs and on the
    /// wire: the metrics exported before they were typed.
    #[test]
    fn each_label_is_the_name_its_layer_gives() {
        for reason in [
            Reason::Elected,
            Reason::StepDown,
            Reason::Transfer,
            Reason::Preempted,
            Reason::LeaseExpired,
            Reason::LeaderTimeout,
            Reason::HigherTerm,
            Reason::Shutdown,
            Reason::Unhealthy,
        ] {
            assert_eq!(TransitionReason::from(reason).label(), reason.as_str());
        }
        for outcome in [
            Outcome::Accepted,
            Outcome::Stale,
            Outcome::Ignored,
            Outcome::NotMember,
            Outcome::OtherMembers,
            Outcome::SteppedDown {
                term: 1,
                successor: None,
            },
        ] {
            assert_eq!(Received::from(&outcome).label(), outcome.label());
        }
        for rejection in [
            Rejection::Malformed(WireError::TooLarge(1)),
            Rejection::Unsigned,
            Rejection::UnknownKey("k".into()),
            Rejection::BadSignature,
            Rejection::Replayed {
                from: "a".into(),
                seq: 1,
            },
        ] {
            assert_eq!(Received::from(&rejection).label(), rejection.reason());
        }
        let advert = r#""priority":1,"candidacy":"eligible","hears":[],"member_ids":[]"#;
        for body in [
            format!(r#"{{"type":"heartbeat","leader":"a","lease_ms":1,{advert}}}"#),
            format!(r#"{{"type":"ack","leader":"a","hb_seq":1,{advert}}}"#),
            format!(r#"{{"type":"presence",{advert}}}"#),
            r#"{"type":"election","candidate":"a","priority":1,"pre_vote":false}"#.into(),
            r#"{"type":"vote","candidate":"a","granted":true,"pre_vote":false}"#.into(),
            r#"{"type":"leader","leader":"a"}"#.into(),
            r#"{"type":"resign","leader":"a"}"#.into(),
        ] {
            let body: Body = serde_json::from_str(&body).expect(&body);
            assert_eq!(MessageType::from(&body).label(), body.kind());
        }
    }
}
