//! Test certificates, made in the run and never committed: a CA and leaf certificates for
//! 127.0.0.1, each usable as server and client certificate. The TLS tests and the TLS
//! benchmark share them.

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

/// A CA that signs leaf certificates for 127.0.0.1 (server and client use alike).
pub struct Ca {
    key: KeyPair,
    cert: rcgen::Certificate,
}

/// A certificate and its key, as PEM.
pub struct Leaf {
    pub cert: String,
    pub key: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        let cert = p.self_signed(&key).expect("CA certificate");
        Ca { key, cert }
    }

    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// A leaf for 127.0.0.1 whose names include `name` (a member's certificate names its id);
    /// `expired` makes one that ran out in 2002.
    pub fn leaf(&self, name: &str, expired: bool) -> Leaf {
        let key = KeyPair::generate().expect("leaf key");
        let mut p = CertificateParams::new(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
            name.to_string(),
        ])
        .expect("leaf params");
        p.distinguished_name.push(DnType::CommonName, name);
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        if expired {
            p.not_before = rcgen::date_time_ymd(2001, 1, 1);
            p.not_after = rcgen::date_time_ymd(2002, 1, 1);
        }
        let cert = p.signed_by(&key, &self.cert, &self.key).expect("leaf");
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}
