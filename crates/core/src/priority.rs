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

    #[test]
    fn known_values() {
        // `printf '' | cksum` and `printf 'a' | cksum` on GNU coreutils.
        assert_eq!(cksum(b""), 4294967295);
        assert_eq!(cksum(b"a"), 1220704766);
    }
}
