//! Standard base64 (RFC 4648 alphabet) for the API's byte fields (a CSR's
//! `spec.request` and `status.certificate`, secret `data`, configMap `binaryData`)
//! and kubeconfig `*-data` fields: a thin layer over the `base64` crate that keeps
//! litelet's lenient reading (whitespace skipped, padding optional) and error type.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::{alphabet, DecodeError, Engine};

/// `data` as standard base64 with `=` padding.
pub fn encode(data: &[u8]) -> String {
    STANDARD.encode(data)
}

/// The standard alphabet, read leniently: padding may be left out and stray bits in
/// the last character are ignored, as hand-edited kubeconfigs sometimes need.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// Decodes standard base64 (RFC 4648 alphabet); ASCII whitespace is skipped (PEM-like
/// line breaks) and the `=` padding is optional.
pub fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
    let compact: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    LENIENT
        .decode(&compact)
        .map_err(|e| Base64Error::from_decode(text, e))
}

/// Text that is not standard base64.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Base64Error {
    #[error("data after padding at offset {offset}")]
    AfterPadding { offset: usize },
    #[error("unexpected character {found:?} at offset {offset}")]
    Character { found: char, offset: usize },
    #[error("truncated input")]
    Truncated,
    #[error("invalid padding")]
    Padding,
}

impl Base64Error {
    /// The crate's error, with offsets counted in `text` (whitespace included).
    fn from_decode(text: &str, e: DecodeError) -> Self {
        let original = |n: usize| {
            text.bytes()
                .enumerate()
                .filter(|(_, c)| !c.is_ascii_whitespace())
                .nth(n)
                .map_or(n, |(i, _)| i)
        };
        match e {
            DecodeError::InvalidByte(at, b'=') => Self::AfterPadding {
                offset: original(at),
            },
            DecodeError::InvalidByte(at, found)
            | DecodeError::InvalidLastSymbol {
                offset: at,
                symbol: found,
                ..
            } => Self::Character {
                found: char::from(found),
                offset: original(at),
            },
            DecodeError::InvalidLength(_) => Self::Truncated,
            DecodeError::InvalidPadding => Self::Padding,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors_encode_and_decode_back() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()), coded);
            assert_eq!(decode(coded).unwrap(), plain.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&all)).unwrap(), all);
    }

    #[test]
    fn decoding_skips_whitespace_and_takes_missing_padding() {
        assert_eq!(decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode("aGVsbG8").unwrap(), b"hello");
        assert_eq!(decode("Zm8").unwrap(), b"fo");
        assert_eq!(decode("Zg=").unwrap(), b"f");
        assert_eq!(decode("aGVs\n bG8h").unwrap(), b"hello!");
        assert_eq!(decode(" aGVs\r\nbG8=\n").unwrap(), b"hello");
        assert_eq!(decode("").unwrap(), b"");
        // Stray low bits in the last character are ignored ("Zh" reads as "Zg").
        assert_eq!(decode("Zh==").unwrap(), b"f");
        let text = "a longer text, with / and + maybe?";
        assert_eq!(decode(&encode(text.as_bytes())).unwrap(), text.as_bytes());
    }

    #[test]
    fn decoding_errors_name_the_problem_and_its_offset_in_the_input() {
        let table = [
            ("a", Base64Error::Truncated),
            ("aGVsb", Base64Error::Truncated),
            ("aGVsbG8=x", Base64Error::AfterPadding { offset: 7 }),
            ("Zg==Zg==", Base64Error::AfterPadding { offset: 2 }),
            (
                "a-b_",
                Base64Error::Character {
                    found: '-',
                    offset: 1,
                },
            ),
            (
                "aG\nVs!",
                Base64Error::Character {
                    found: '!',
                    offset: 5,
                },
            ),
        ];
        for (text, want) in table {
            assert_eq!(decode(text), Err(want), "{text:?}");
        }
        assert!(decode("Zg===").is_err());
        assert!(decode("====").is_err());
        assert!(decode("aGVsbG8é").is_err());
    }
}
