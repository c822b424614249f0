//! What the project reads out of an X.509 certificate: the names it was issued for (a peer's
//! member id, rule 1 over mutual TLS) and when it expires (the expiry metric). Parsing is
//! x509-parser's; verification stays rustls's, which has already accepted the chain by the
//! time anything here looks at a certificate.

use std::sync::Arc;

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The URI form of a member id in a certificate, for ids that are not DNS names:
/// `urn:pilot-election:member:<id>`.
pub const MEMBER_URN: &str = "urn:pilot-election:member:";

/// The names a verified client certificate presents, put on each of its connection's requests
/// by the server. `POST /peer/messages` accepts a message only from a member the certificate
/// names (docs/guide/tls.md, "What TLS covers").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientNames(pub Arc<[String]>);

impl ClientNames {
    /// The DNS names and URIs of `der`'s subject alternative names (none if it does not parse).
    pub fn of(der: &[u8]) -> ClientNames {
        let Ok((_, cert)) = X509Certificate::from_der(der) else {
            return ClientNames::default();
        };
        let names: Vec<String> = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .filter_map(|n| match n {
                        GeneralName::DNSName(d) => Some(d.to_string()),
                        GeneralName::URI(u) => Some(u.to_string()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        ClientNames(names.into())
    }

    /// Whether the certificate was issued for member `id`: a DNS name equal to it (ASCII case
    /// ignored, as DNS does), or the URI `urn:pilot-election:member:<id>`.
    pub fn names_member(&self, id: &str) -> bool {
        self.0.iter().any(|n| {
            n.eq_ignore_ascii_case(id) || n.strip_prefix(MEMBER_URN).is_some_and(|m| m == id)
        })
    }
}

/// Put on the requests of a connection that presented no client certificate where client
/// certificates are asked for (`--tls-anonymous-reads`): such a request may only read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anonymous;

/// The end of a DER certificate's validity, in unix seconds; `None` when it does not parse.
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(names: &[&str]) -> Vec<u8> {
        let sans: Vec<rcgen::SanType> = names
            .iter()
            .map(|n| match n.strip_prefix("uri:") {
                Some(u) => rcgen::SanType::URI(u.try_into().unwrap()),
                None => rcgen::SanType::DnsName((*n).try_into().unwrap()),
            })
            .collect();
        let mut params = rcgen::CertificateParams::default();
        params.subject_alt_names = sans;
        params.not_after = rcgen::date_time_ymd(2031, 1, 2);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn a_certificate_names_members_by_dns_name_or_urn_only() {
        let c = ClientNames::of(&cert(&[
            "b",
            "uri:urn:pilot-election:member:node_7",
            "b.example",
        ]));
        assert!(c.names_member("b"));
        assert!(c.names_member("B"), "DNS names ignore ASCII case");
        assert!(c.names_member("node_7"));
        assert!(c.names_member("b.example"));
        assert!(!c.names_member("c"));
        assert!(!c.names_member("node_"), "a prefix of a name is no name");
        assert!(!ClientNames::of(b"not a certificate").names_member("b"));
    }

    #[test]
    fn the_end_of_validity_is_read() {
        // 2031-01-02T00:00:00Z
        assert_eq!(not_after(&cert(&["a"])), Some(1_925_078_400));
        assert_eq!(not_after(b"junk"), None);
    }
}
