//! Reads the subject of an X.509 certificate (DER): the common name becomes the user
//! name and the organizations the groups, as the API server maps client certificates.
//! A tiny, bounds-checked DER walker: only the path from Certificate to the subject
//! Name is followed; anything unexpected is an error, never a panic. Pure; called on
//! connection threads after the chain was verified.

/// The identity in a certificate's subject.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    pub common_name: String,
    pub organizations: Vec<String>,
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const EXPLICIT_0: u8 = 0xa0;
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
const OID_O: &[u8] = &[0x55, 0x04, 0x0a];

/// One TLV: (tag, content, rest).
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let mut len = 0usize;
        for &b in &rest[..n] {
            len = (len << 8) | usize::from(b);
        }
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, content, rest) = tlv(input)?;
    (t == tag).then_some((content, rest))
}

/// The subject of a DER certificate; None when it cannot be read.
pub fn subject(der: &[u8]) -> Option<Subject> {
    let (cert, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(cert, SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&EXPLICIT_0) {
        rest = tlv(rest)?.2;
    }
    // serialNumber, signature, issuer, validity, then subject.
    for _ in 0..4 {
        rest = tlv(rest)?.2;
    }
    let (name, _) = expect(rest, SEQUENCE)?;
    let mut out = Subject::default();
    let mut rdns = name;
    while !rdns.is_empty() {
        let (set, next) = expect(rdns, SET)?;
        rdns = next;
        let mut attrs = set;
        while !attrs.is_empty() {
            let (attr, next) = expect(attrs, SEQUENCE)?;
            attrs = next;
            let (oid, value) = expect(attr, OID)?;
            let (tag, text, _) = tlv(value)?;
            // UTF8String, PrintableString, T61String, IA5String.
            if !matches!(tag, 0x0c | 0x13 | 0x14 | 0x16) {
                continue;
            }
            let Ok(text) = std::str::from_utf8(text) else {
                continue;
            };
            if oid == OID_CN {
                out.common_name = text.to_owned();
            } else if oid == OID_O {
                out.organizations.push(text.to_owned());
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cn_and_organizations() {
        let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:n1");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let s = subject(cert.der()).unwrap();
        assert_eq!(s.common_name, "system:node:n1");
        assert_eq!(s.organizations, vec!["system:nodes".to_string()]);
    }

    #[test]
    fn garbage_is_none() {
        assert_eq!(subject(&[]), None);
        assert_eq!(subject(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(subject(&[0x30, 0x03, 0x30, 0x01]), None);
        proptest::proptest!(|(bytes in proptest::collection::vec(0u8..=255, 0..200))| {
            let _ = subject(&bytes);
        });
    }
}
