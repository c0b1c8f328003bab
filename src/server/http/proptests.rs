//! Property tests of the request reader with hostile input: arbitrary bytes cut into
//! arbitrary reads, heads built from many and long headers, endless heads and bodies.
//! Whatever arrives, the reader must not panic, must keep at most the head limit plus
//! one read (or the body limit) in memory, and must not return a request whose head or
//! body is past its limit.

use std::io::{self, Read};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

/// The size of one read in [`read_request`]: memory may exceed a limit by this much.
const READ: usize = 4096;

const LIMITS: ReadLimits = ReadLimits {
    max_header_bytes: 2048,
    max_body_bytes: 256,
};

/// Hands out `data` in pieces of the given sizes (cycled), then end of stream, and
/// counts what was taken.
struct Pieces {
    data: Vec<u8>,
    sizes: Vec<usize>,
    next: usize,
    taken: usize,
}

impl Read for Pieces {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let step = self.sizes[self.next % self.sizes.len()].max(1);
        self.next += 1;
        let n = step.min(out.len()).min(self.data.len() - self.taken);
        out[..n].copy_from_slice(&self.data[self.taken..self.taken + n]);
        self.taken += n;
        Ok(n)
    }
}

/// An endless stream of one byte pattern, counting what was taken.
struct Endless {
    pattern: Vec<u8>,
    taken: usize,
}

impl Read for Endless {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        for b in out.iter_mut() {
            *b = self.pattern[self.taken % self.pattern.len()];
            self.taken += 1;
        }
        Ok(out.len())
    }
}

fn read_from(r: &mut impl Read) -> (Result<Request, ReadError>, Vec<u8>) {
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let res = read_request(r, &mut buf, LIMITS, deadline, &mut |_| Ok(()));
    (res, buf)
}

/// What every outcome must respect.
fn check(res: &Result<Request, ReadError>, buf: &[u8]) -> Result<(), TestCaseError> {
    prop_assert!(
        buf.len() <= LIMITS.max_header_bytes + READ + LIMITS.max_body_bytes,
        "{} bytes kept",
        buf.len()
    );
    if let Ok(req) = res {
        let head: usize = req.method.len()
            + req.raw_path.len()
            + req.raw_query.len()
            + req
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
        prop_assert!(head <= LIMITS.max_header_bytes, "a {head}-byte head");
        prop_assert!(req.body.len() <= LIMITS.max_body_bytes);
        prop_assert!(req.headers.len() <= MAX_HEADERS);
    }
    Ok(())
}

fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
    (
        "[A-Za-z-]{1,12}|Content-Length|Transfer-Encoding|Connection",
        proptest::collection::vec(any::<u8>(), 0..300),
    )
}

proptest! {
    #[test]
    fn arbitrary_bytes_in_arbitrary_reads_never_panic_nor_grow_past_the_limits(
        data in proptest::collection::vec(any::<u8>(), 0..6000),
        sizes in proptest::collection::vec(1usize..5000, 1..8),
    ) {
        let mut r = Pieces { data, sizes, next: 0, taken: 0 };
        let (res, buf) = read_from(&mut r);
        check(&res, &buf)?;
    }

    #[test]
    fn heads_of_many_long_or_odd_headers_are_parsed_or_refused(
        method in "GET|POST|HEAD|[A-Z]{0,10}|[ -~]{0,6}",
        target in "/[ -~]{0,200}|[ -~]{0,20}",
        headers in proptest::collection::vec(header(), 0..80),
        length in proptest::option::of("[0-9]{1,25}|-1|[ -~]{0,5}"),
        body in proptest::collection::vec(any::<u8>(), 0..400),
        step in 1usize..3000,
    ) {
        let mut data = format!("{method} {target} HTTP/1.1\r\n").into_bytes();
        for (name, value) in &headers {
            data.extend_from_slice(name.as_bytes());
            data.extend_from_slice(b": ");
            data.extend_from_slice(value);
            data.extend_from_slice(b"\r\n");
        }
        if let Some(length) = &length {
            data.extend_from_slice(format!("Content-Length: {length}\r\n").as_bytes());
        }
        data.extend_from_slice(b"\r\n");
        data.extend_from_slice(&body);
        let mut r = Pieces { data, sizes: vec![step], next: 0, taken: 0 };
        let (res, buf) = read_from(&mut r);
        check(&res, &buf)?;
    }

    #[test]
    fn an_endless_head_is_refused_after_the_limit(
        pattern in proptest::collection::vec(any::<u8>().prop_filter("no line end", |b| *b != b'\n'), 1..64),
        prefix in "GET /[a-z]{0,10} HTTP/1.1\r\n|",
    ) {
        let mut pattern = pattern;
        pattern.splice(0..0, prefix.bytes());
        let mut r = Endless { pattern, taken: 0 };
        let (res, buf) = read_from(&mut r);
        check(&res, &buf)?;
        prop_assert!(res.is_err());
        prop_assert!(r.taken <= LIMITS.max_header_bytes + READ, "{} bytes read", r.taken);
    }

    #[test]
    fn an_endless_body_is_read_no_further_than_its_limit(length in 0usize..100_000) {
        let head = format!("POST /run HTTP/1.1\r\nContent-Length: {length}\r\n\r\n");
        let mut r = Endless { pattern: head.into_bytes(), taken: 0 };
        let (res, buf) = read_from(&mut r);
        check(&res, &buf)?;
        if length > LIMITS.max_body_bytes {
            prop_assert!(matches!(res, Err(ReadError::BodyTooLarge(_))));
        }
        prop_assert!(r.taken <= LIMITS.max_header_bytes + READ + LIMITS.max_body_bytes);
    }

    #[test]
    fn queries_and_escapes_of_any_text_never_panic(text in "[ -~]{0,200}|\\PC{0,50}") {
        let _ = parse_query(&text);
        let _ = percent_decode(&text);
    }
}
