//! Reads the subject and the validity period of an X.509 certificate (DER). The
//! subject's common name becomes the user name and its organizations the groups, as
//! the API server maps client certificates (the node server, after the chain was
//! verified); the validity tells the certificate bootstrap whether a client
//! certificate is still good. A thin adapter over RustCrypto's `x509-cert` parser
//! (strict DER, dates from 1970 on, as webpki takes them): anything it refuses is
//! None, never a panic. Pure.

use x509_cert::der::asn1::{Any, ObjectIdentifier};
use x509_cert::der::{Decode, Tag, Tagged};
use x509_cert::time::Time;
use x509_cert::Certificate;

/// The identity in a certificate's subject.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    pub common_name: String,
    pub organizations: Vec<String>,
}

const OID_CN: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
const OID_O: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.10");

/// The validity period of a DER certificate, `(notBefore, notAfter)` in Unix
/// seconds; None when it cannot be read.
pub fn validity(der: &[u8]) -> Option<(i64, i64)> {
    let validity = Certificate::from_der(der).ok()?.tbs_certificate.validity;
    let secs = |t: Time| i64::try_from(t.to_unix_duration().as_secs()).ok();
    Some((secs(validity.not_before)?, secs(validity.not_after)?))
}

/// The subject of a DER certificate; None when it cannot be read.
pub fn subject(der: &[u8]) -> Option<Subject> {
    let name = Certificate::from_der(der).ok()?.tbs_certificate.subject;
    let mut out = Subject::default();
    for attr in name.0.iter().flat_map(|rdn| rdn.0.iter()) {
        let Some(text) = directory_string(&attr.value) else {
            continue;
        };
        if attr.oid == OID_CN {
            out.common_name = text;
        } else if attr.oid == OID_O {
            out.organizations.push(text);
        }
    }
    Some(out)
}

/// The text of a UTF8String, PrintableString, T61String or IA5String value when it
/// is UTF-8 (the character sets are not checked, as Go does not either); None for
/// other types.
fn directory_string(value: &Any) -> Option<String> {
    let string_tag = matches!(
        value.tag(),
        Tag::Utf8String | Tag::PrintableString | Tag::TeletexString | Tag::Ia5String
    );
    if !string_tag {
        return None;
    }
    std::str::from_utf8(value.value()).ok().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEQUENCE: u8 = 0x30;
    const SET: u8 = 0x31;
    const OID: u8 = 0x06;
    const EXPLICIT_0: u8 = 0xa0;

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
    fn reads_the_validity_period() {
        let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2026, 2, 28);
        // Past 2049 the encoding switches to GeneralizedTime.
        params.not_after = rcgen::date_time_ymd(2051, 3, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.clone().self_signed(&key).unwrap();
        // `date -u -d 2026-02-28 +%s` and `date -u -d 2051-03-01 +%s`.
        assert_eq!(validity(cert.der()), Some((1_772_236_800, 2_561_241_600)));
        // A UTCTime in the last year it holds: "49" reads as 2049, not 1949.
        params.not_after = rcgen::date_time_ymd(2049, 12, 31);
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(validity(cert.der()).map(|v| v.1), Some(2_524_521_600));
    }

    #[test]
    fn garbage_is_none() {
        assert_eq!(subject(&[]), None);
        assert_eq!(subject(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(subject(&[0x30, 0x03, 0x30, 0x01]), None);
        proptest::proptest!(|(bytes in proptest::collection::vec(0u8..=255, 0..200))| {
            let _ = subject(&bytes);
            let _ = validity(&bytes);
        });
    }

    use proptest::prelude::*;

    /// A real certificate with a subject of several attributes, made once.
    fn real_der() -> &'static [u8] {
        static DER: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        DER.get_or_init(|| {
            let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).unwrap();
            let dn = &mut params.distinguished_name;
            dn.push(rcgen::DnType::CommonName, "system:node:n1");
            dn.push(rcgen::DnType::OrganizationName, "system:nodes");
            dn.push(rcgen::DnType::CountryName, "DE");
            let key = rcgen::KeyPair::generate().unwrap();
            params.self_signed(&key).unwrap().der().to_vec()
        })
    }

    /// What a parse may hold: never more text than the input has bytes, and an
    /// organization costs at least the 11 bytes of its SET, SEQUENCE, OID and string
    /// headers, so no input makes the parser allocate beyond its own size.
    fn bounded(input: &[u8], s: &Subject) -> bool {
        let text = s.common_name.len() + s.organizations.iter().map(String::len).sum::<usize>();
        text <= input.len() && s.organizations.len() * 11 <= input.len()
    }

    /// A DER-ish tree: constructed tags hold children, others hold bytes; lengths
    /// are sometimes wrong, in short, long (1 to 5 bytes) or indefinite form.
    fn tlv_tree() -> impl Strategy<Value = Vec<u8>> {
        let tag = prop_oneof![
            Just(SEQUENCE),
            Just(SET),
            Just(OID),
            Just(EXPLICIT_0),
            Just(0x0c),
            Just(0x13),
            Just(0x02),
            any::<u8>(),
        ];
        let leaf = (
            tag.clone(),
            proptest::collection::vec(any::<u8>(), 0..24),
            -2i32..3,
            0u8..8,
        )
            .prop_map(|(t, body, skew, form)| encode(t, &body, skew, form));
        leaf.prop_recursive(5, 96, 6, move |inner| {
            (
                prop_oneof![Just(SEQUENCE), Just(SET), Just(EXPLICIT_0)],
                proptest::collection::vec(inner, 0..6),
                -2i32..3,
                0u8..8,
            )
                .prop_map(|(t, kids, skew, form)| encode(t, &kids.concat(), skew, form))
        })
    }

    /// One TLV with its length off by `skew` and written in a `form` chosen among
    /// short, long with 1 to 5 length bytes, and indefinite (0x80).
    fn encode(tag: u8, body: &[u8], skew: i32, form: u8) -> Vec<u8> {
        let len = (body.len() as i64 + i64::from(skew)).max(0) as u64;
        let mut out = vec![tag];
        match form {
            0 if len < 0x80 => out.push(len as u8),
            7 => out.push(0x80),
            n => {
                let n = usize::from(n.clamp(1, 5));
                out.push(0x80 | n as u8);
                for i in (0..n).rev() {
                    out.push((len >> (8 * i)) as u8);
                }
            }
        }
        out.extend_from_slice(body);
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// A real certificate with bytes overwritten, cut short or inserted: never a
        /// panic, and what is read stays within the input.
        #[test]
        fn mutated_certificates_never_panic(
            writes in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 0..8),
            cut in proptest::option::of(any::<proptest::sample::Index>()),
            insert in proptest::option::of((any::<proptest::sample::Index>(), proptest::collection::vec(any::<u8>(), 1..16))),
        ) {
            let mut der = real_der().to_vec();
            for (at, byte) in writes {
                let i = at.index(der.len());
                der[i] = byte;
            }
            if let Some((at, bytes)) = insert {
                let i = at.index(der.len());
                der.splice(i..i, bytes);
            }
            if let Some(at) = cut {
                der.truncate(at.index(der.len()));
            }
            let _ = validity(&der);
            if let Some(s) = subject(&der) {
                prop_assert!(bounded(&der, &s), "{s:?} from {} bytes", der.len());
            }
        }

        /// Generated TLV trees, alone and after a valid certificate prefix.
        #[test]
        fn generated_der_trees_never_panic(
            trees in proptest::collection::vec(tlv_tree(), 1..8),
        ) {
            for tree in &trees {
                if let Some(s) = subject(tree) {
                    prop_assert!(bounded(tree, &s));
                }
            }
            // As the fields of a certificate's TBS, so the walk reaches a subject.
            let tbs = encode(SEQUENCE, &trees.concat(), 0, 2);
            let cert = encode(SEQUENCE, &tbs, 0, 2);
            if let Some(s) = subject(&cert) {
                prop_assert!(bounded(&cert, &s));
            }
        }
    }

    #[test]
    fn the_unmutated_certificate_reads_back() {
        let s = subject(real_der()).unwrap();
        assert_eq!(s.common_name, "system:node:n1");
        assert_eq!(s.organizations, vec!["system:nodes".to_string()]);
    }
}
