//! Prints who leads, then every leader change, until Ctrl-C.
//!
//! ```sh
//! cargo run -p pilot-election-client --example watch -- http://127.0.0.1:7070 http://127.0.0.1:7071
//! ```

use futures_util::StreamExt;
use pilot_election_client::{ChangeSource, Client};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = std::env::args().skip(1).collect();
    let urls = if urls.is_empty() {
        vec!["http://127.0.0.1:7070".to_string()]
    } else {
        urls
    };
    let client = Client::new(&urls)?;
    match client.leader().await {
        Ok(Some(l)) => println!(
            "{} leads in term {} (url {}, said {} {:?} ago)",
            l.id,
            l.term,
            l.url.as_deref().unwrap_or("unknown"),
            l.answered_by,
            l.age()
        ),
        Ok(None) => println!("no leader right now"),
        Err(e) => println!("{e}"),
    }
    let mut changes = client.watch();
    loop {
        tokio::select! {
            change = changes.next() => {
                let Some(c) = change else { break };
                let how = match &c.source {
                    ChangeSource::History(t) => format!("missed, from {}'s history ({} at {})", c.node, t.reason, t.at),
                    _ => format!("reported by {}", c.node),
                };
                println!("term {}: {} leads ({how})", c.term, c.leader);
            }
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    Ok(())
}
