//! Default priority: the first field of POSIX `cksum` for the node id.
//!
//! The bash script this project replaces (docs/pilot.md) ranked nodes by `printf %s "$ID" | cksum`; keeping exactly that value
//! means an operator can predict (and reproduce in a shell) who wins a fresh election.

use crc::{Crc, CRC_32_CKSUM};

const CKSUM: Crc<u32> = Crc::<u32>::new(&CRC_32_CKSUM);

/// POSIX `cksum` of `data`: CRC-32/CKSUM over the bytes followed by the length, least significant
/// byte first, with no trailing zero bytes.
pub fn cksum(data: &[u8]) -> u32 {
    let mut digest = CKSUM.digest();
    digest.update(data);
    let mut len = data.len() as u64;
    while len > 0 {
        digest.update(&[(len & 0xff) as u8]);
        len >>= 8;
    }
    digest.finalize()
}

/// The priority a node gets when `--priority` is not given.
pub fn default_priority(node_id: &str) -> u32 {
    cksum(node_id.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    /// `cksum(data)`, failing the test instead of hanging if it does not return: the length is
    /// fed in a loop, and a loop that never ends must be a failure, not a stuck test run.
    fn cksum_of(data: &[u8]) -> u32 {
        let (len, data) = (data.len(), data.to_vec());
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(cksum(&data));
        });
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("cksum of {len} bytes did not return within 10 s"))
    }

    #[test]
    fn known_values() {
        // `printf '' | cksum` and `printf 'a' | cksum` on GNU coreutils.
        assert_eq!(cksum_of(b""), 4294967295);
        assert_eq!(cksum_of(b"a"), 1220704766);
    }

    /// `cksum` appends the length least significant byte first and without trailing zero bytes:
    /// one length byte up to 255, two from 256, three from 65536. The values are what
    /// `head -c N /dev/zero | tr '\0' x | cksum` prints on GNU coreutils.
    #[test]
    fn the_length_is_appended_in_as_many_bytes_as_it_needs() {
        for (n, want) in [(255, 3276814060u32), (256, 3985556000), (65536, 1281127553)] {
            assert_eq!(cksum_of(&vec![b'x'; n]), want, "{n} bytes of x");
        }
    }

    /// The default priority is what `printf %s ID | cksum` prints first (docs/guide/running.md,
    /// `--priority`).
    #[test]
    fn the_default_priority_is_the_cksum_of_the_id() {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send([default_priority("a"), default_priority("node-1")]);
        });
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("default_priority returns");
        assert_eq!(got, [1220704766, 574192561]);
    }
}
