//! "Every node names one leader in one term", and the one wait for it, with a deadline, that
//! every test shares: over the nodes' `GET /leader` ([`agreed`], [`agree`], [`at_urls`]) or over
//! whatever a test asks them through ([`wait`]: a TLS client, curl, a container's address).

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use crate::app::{leader_of, wait_for_every, App};

/// What one node names: the leader it knows now and its term; `None` when it names none or did
/// not answer.
pub type Named = Option<(String, u64)>;

/// The leader and term that every one of `named` names, if they all name the same one.
pub fn agreement(named: &[Named]) -> Option<(String, u64)> {
    let first = named.first()?.as_ref()?;
    named
        .iter()
        .all(|n| n.as_ref() == Some(first))
        .then(|| first.clone())
}

/// Asks every node with `ask` (one round: what each names) until all name one leader in one term
/// that `accept` takes, or `within` passes: that leader and term, or what the last round saw.
pub async fn wait<F, Fut>(
    within: Duration,
    ask: F,
    accept: impl Fn(&str, u64) -> bool,
) -> Result<(String, u64), Vec<Named>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Vec<Named>>,
{
    wait_every(within, POLL, ask, accept).await
}

/// How often [`wait`] asks.
pub const POLL: Duration = Duration::from_millis(25);

/// [`wait`], asking every `every` (a benchmark times a failover to a finer resolution).
pub async fn wait_every<F, Fut>(
    within: Duration,
    every: Duration,
    mut ask: F,
    accept: impl Fn(&str, u64) -> bool,
) -> Result<(String, u64), Vec<Named>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Vec<Named>>,
{
    let last = Mutex::new(Vec::new());
    let found = wait_for_every(within, every, || {
        let round = ask();
        let (last, accept) = (&last, &accept);
        async move {
            let named = round.await;
            let agreed = agreement(&named).filter(|(l, t)| accept(l, *t));
            *last.lock().unwrap() = named;
            agreed
        }
    })
    .await;
    found.ok_or_else(|| last.into_inner().unwrap())
}

/// [`wait`] over the `GET /leader` of every node at `urls`, asked one after another.
pub async fn at_urls(
    urls: &[String],
    within: Duration,
    accept: impl Fn(&str, u64) -> bool,
) -> Result<(String, u64), Vec<Named>> {
    let ask = || async {
        let mut named = Vec::new();
        for u in urls {
            named.push(leader_of(u).await);
        }
        named
    };
    wait(within, ask, accept).await
}

/// Waits until every node of `which` names the same leader in the same term, accepted by
/// `accept`; `None` when they did not within `within`.
pub async fn agreed(
    which: &[&App],
    within: Duration,
    accept: impl Fn(&str, u64) -> bool,
) -> Option<(String, u64)> {
    let urls: Vec<String> = which.iter().map(|n| n.url()).collect();
    at_urls(&urls, within, accept).await.ok()
}

/// [`agreed`], or a panic with what each node named last and `logs`.
pub async fn agree(
    which: &[&App],
    within: Duration,
    accept: impl Fn(&str, u64) -> bool,
    logs: impl FnOnce() -> String,
) -> (String, u64) {
    let urls: Vec<String> = which.iter().map(|n| n.url()).collect();
    match at_urls(&urls, within, accept).await {
        Ok(agreed) => agreed,
        Err(last) => {
            let ids: Vec<&str> = which.iter().map(|n| n.id.as_str()).collect();
            panic!(
                "{ids:?} did not agree on an acceptable leader within {within:?}; last named: \
                 {}\n{}",
                describe(&ids, &last),
                logs()
            )
        }
    }
}

/// `n1->n2@3 n2->-`: what each node named.
pub fn describe(ids: &[&str], named: &[Named]) -> String {
    ids.iter()
        .zip(named)
        .map(|(id, n)| match n {
            Some((l, t)) => format!("{id}->{l}@{t}"),
            None => format!("{id}->-"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_leader_in_one_term_named_by_all_is_an_agreement() {
        let n = |l: &str, t| Some((l.to_string(), t));
        assert_eq!(agreement(&[n("a", 2), n("a", 2)]), n("a", 2));
        assert_eq!(agreement(&[n("a", 2), n("a", 3)]), None);
        assert_eq!(agreement(&[n("a", 2), n("b", 2)]), None);
        assert_eq!(agreement(&[n("a", 2), None]), None);
        assert_eq!(agreement(&[]), None);
    }
}
