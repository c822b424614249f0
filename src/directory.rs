//! Where each member's API is and how its operator labelled it, as its latest message said
//! (docs/clients.md). Clients need it to reach the leader; the election never reads it, so a
//! wrong or unreachable URL changes nothing about who leads.
//!
//! The same bounds hold for what this node announces (checked at start-up, exit 64) and for what
//! it accepts from others (an announcement out of bounds is left out, the message still counts).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::election::NodeInfo;

/// Longest URL a node may announce.
pub const MAX_URL_BYTES: usize = 2048;
/// Most `--meta` pairs.
pub const MAX_META_PAIRS: usize = 16;
/// Longest `--meta` key.
pub const MAX_META_KEY_BYTES: usize = 64;
/// Longest `--meta` value.
pub const MAX_META_VALUE_BYTES: usize = 256;
/// Keys and values together.
pub const MAX_META_BYTES: usize = 1024;

/// `--advertise-url`, or the one `--listen` implies; refused when clients could not use it.
pub fn advertise_url(given: Option<&str>, listen: &str) -> Result<String, String> {
    let url = match given {
        Some(u) => u.trim_end_matches('/').to_string(),
        None => {
            let addr: Option<SocketAddr> = listen.parse().ok();
            if addr.is_some_and(|a| a.ip().is_unspecified()) {
                return Err(format!(
                    "--advertise-url is needed: --listen {listen} is every address, so the URL \
                     clients reach this node at cannot be derived from it (for example \
                     --advertise-url http://10.0.0.5:{})",
                    addr.map(|a| a.port()).unwrap_or(7070)
                ));
            }
            format!("http://{listen}")
        }
    };
    check_url(&url).map_err(|e| format!("--advertise-url {url}: {e}"))?;
    Ok(url)
}

fn check_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_URL_BYTES {
        return Err(format!("longer than {MAX_URL_BYTES} bytes"));
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "the scheme must be http or https, not {}",
            parsed.scheme()
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("it names no host".into());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("it must not hold credentials: every member and client reads it".into());
    }
    Ok(())
}

/// `--meta KEY=VALUE` pairs.
pub fn parse_meta(pairs: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut meta = BTreeMap::new();
    for pair in pairs {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(format!("--meta {pair}: expected KEY=VALUE"));
        };
        if meta.insert(k.to_string(), v.to_string()).is_some() {
            return Err(format!("--meta {k} is given twice"));
        }
    }
    check_meta(&meta).map_err(|e| format!("--meta: {e}"))?;
    Ok(meta)
}

fn check_meta(meta: &BTreeMap<String, String>) -> Result<(), String> {
    if meta.len() > MAX_META_PAIRS {
        return Err(format!("{} pairs; at most {MAX_META_PAIRS}", meta.len()));
    }
    let mut total = 0;
    for (k, v) in meta {
        let key_ok = k
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if k.is_empty() || k.len() > MAX_META_KEY_BYTES || !key_ok {
            return Err(format!(
                "key {k:?}: 1-{MAX_META_KEY_BYTES} bytes of letters, digits, '_', '.' or '-'"
            ));
        }
        if v.len() > MAX_META_VALUE_BYTES {
            return Err(format!(
                "the value of {k} is longer than {MAX_META_VALUE_BYTES} bytes"
            ));
        }
        total += k.len() + v.len();
    }
    if total > MAX_META_BYTES {
        return Err(format!("{total} bytes in all; at most {MAX_META_BYTES}"));
    }
    Ok(())
}

/// Whether another node's announcement is within the bounds this build announces by.
pub fn acceptable(info: &NodeInfo) -> bool {
    check_url(&info.url).is_ok() && check_meta(&info.meta).is_ok()
}

/// The latest announcement of each member, by the sequence number of the message it came in
/// (a message of an earlier run that arrives late does not undo what a later run said).
#[derive(Debug, Clone, Default)]
pub struct Directory {
    entries: BTreeMap<String, (u64, Option<NodeInfo>)>,
}

impl Directory {
    /// Whether [`Directory::record`] of the same arguments would change what a reader sees.
    /// The runtime records only then: the directory is shared with every snapshot, so a record
    /// copies it, and nearly every message announces what its sender announced before. (Its
    /// sequence number then stays the older one, which only matters for a late message of an
    /// announcement that changed and changed back, and only until the sender's next message.)
    pub fn would_change(&self, from: &str, seq: u64, info: Option<&NodeInfo>) -> bool {
        match self.entries.get(from) {
            Some((s, _)) if *s >= seq => false,
            Some((_, old)) => old.as_ref() != info,
            None => info.is_some(),
        }
    }

    /// Records what `from` announced in its message `seq` (`None`: nothing, an older build or a
    /// node told not to). Returns whether anything a reader sees changed.
    pub fn record(&mut self, from: &str, seq: u64, info: Option<&NodeInfo>) -> bool {
        let info = info.filter(|i| acceptable(i)).cloned();
        match self.entries.get_mut(from) {
            Some((s, _)) if *s >= seq => false,
            Some((s, old)) => {
                *s = seq;
                let changed = *old != info;
                *old = info;
                changed
            }
            None => {
                let changed = info.is_some();
                self.entries.insert(from.to_string(), (seq, info));
                changed
            }
        }
    }

    /// What `id` last announced, if anything.
    pub fn get(&self, id: &str) -> Option<&NodeInfo> {
        self.entries.get(id).and_then(|(_, i)| i.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(url: &str) -> NodeInfo {
        NodeInfo {
            url: url.into(),
            meta: BTreeMap::new(),
        }
    }

    #[test]
    fn the_url_defaults_to_the_listen_address_and_is_refused_when_that_is_every_address() {
        assert_eq!(
            advertise_url(None, "127.0.0.1:7070").unwrap(),
            "http://127.0.0.1:7070"
        );
        assert_eq!(
            advertise_url(None, "[::1]:7070").unwrap(),
            "http://[::1]:7070"
        );
        assert_eq!(
            advertise_url(None, "node-a.internal:7070").unwrap(),
            "http://node-a.internal:7070"
        );
        for every in ["0.0.0.0:7070", "[::]:7071"] {
            let e = advertise_url(None, every).unwrap_err();
            assert!(e.contains("--advertise-url is needed"), "{e}");
        }
        assert_eq!(
            advertise_url(Some("https://a.example:8443/"), "0.0.0.0:7070").unwrap(),
            "https://a.example:8443"
        );
    }

    #[test]
    fn a_url_clients_could_not_use_is_refused_with_the_reason() {
        for (url, why) in [
            ("ftp://a:21", "scheme"),
            ("not a url", "relative URL"),
            ("http://user:pw@a:7070", "credentials"),
        ] {
            let e = advertise_url(Some(url), "127.0.0.1:7070").unwrap_err();
            assert!(e.contains(why), "{url}: {e}");
        }
        let long = format!("http://a/{}", "x".repeat(MAX_URL_BYTES));
        assert!(advertise_url(Some(&long), "127.0.0.1:7070")
            .unwrap_err()
            .contains("longer than"));
    }

    #[test]
    fn meta_pairs_are_parsed_and_bounded() {
        let m = parse_meta(&["zone=eu-1".into(), "role=db".into(), "empty=".into()]).unwrap();
        assert_eq!(m["zone"], "eu-1");
        assert_eq!(m["empty"], "");
        for (bad, why) in [
            (vec!["novalue".to_string()], "KEY=VALUE"),
            (vec!["a=1".into(), "a=2".into()], "twice"),
            (vec!["bad key=1".into()], "letters"),
            (vec!["=1".into()], "letters"),
            (
                vec![format!("k={}", "v".repeat(MAX_META_VALUE_BYTES + 1))],
                "longer than",
            ),
            (
                (0..=MAX_META_PAIRS).map(|i| format!("k{i}=v")).collect(),
                "pairs",
            ),
            (
                (0..8)
                    .map(|i| format!("k{i}={}", "v".repeat(200)))
                    .collect(),
                "in all",
            ),
        ] {
            let e = parse_meta(&bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        let most: Vec<String> = (0..MAX_META_PAIRS).map(|i| format!("k{i}=v")).collect();
        assert_eq!(parse_meta(&most).unwrap().len(), MAX_META_PAIRS);
    }

    #[test]
    fn the_latest_message_wins_and_an_announcement_out_of_bounds_is_left_out() {
        let mut d = Directory::default();
        assert!(!d.record("b", 5, None), "nothing announced yet");
        assert!(d.record("b", 6, Some(&info("http://b:1"))));
        assert!(
            !d.record("b", 7, Some(&info("http://b:1"))),
            "the same again"
        );
        assert!(
            !d.record("b", 3, Some(&info("http://old:1"))),
            "a late message"
        );
        assert_eq!(d.get("b").unwrap().url, "http://b:1");
        assert!(d.record("b", 8, Some(&info("ftp://b"))));
        assert_eq!(d.get("b"), None, "refused: as if nothing was announced");
        assert!(d.record("b", 9, Some(&info("http://b:2"))));
        assert!(d.record("b", 10, None), "a build that announces nothing");
        assert_eq!(d.get("b"), None);
        assert_eq!(d.get("c"), None);
    }

    /// The runtime records only what would change: the same announcement again, a late one
    /// and nothing from a new sender would not; a new or changed one would.
    #[test]
    fn would_change_says_whether_a_record_changes_what_readers_see() {
        let mut d = Directory::default();
        assert!(!d.would_change("b", 1, None));
        assert!(d.would_change("b", 1, Some(&info("http://b:1"))));
        d.record("b", 1, Some(&info("http://b:1")));
        assert!(
            !d.would_change("b", 2, Some(&info("http://b:1"))),
            "the same"
        );
        assert!(
            !d.would_change("b", 1, Some(&info("http://b:2"))),
            "not newer"
        );
        assert!(d.would_change("b", 2, Some(&info("http://b:2"))));
        assert!(d.would_change("b", 2, None), "gone");
    }
}
