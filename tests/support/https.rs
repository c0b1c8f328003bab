//! Test-side TLS clients for the node server: a throwaway PKI made with rcgen (a CA
//! and client certificates with a CN and organizations), a rustls client connection
//! that trusts the server's certificate, and just enough HTTP/1.1 to send a request
//! and read a whole, chunked or streaming answer.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A certificate authority that signs client certificates.
pub struct Pki {
    pub ca_pem: String,
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

/// A client certificate and its key, PEM.
#[derive(Clone)]
pub struct Identity {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Pki {
            ca_pem: cert.pem(),
            cert,
            key,
        }
    }

    /// A serving certificate for `sans` (IP addresses or DNS names).
    /// The CA's private key, PEM (a controller-manager signs with it).
    pub fn ca_key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    pub fn server(&self, sans: &[&str]) -> Identity {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            sans.first().copied().unwrap_or("server"),
        );
        for san in sans {
            params
                .subject_alt_names
                .push(match san.parse::<std::net::IpAddr>() {
                    Ok(ip) => rcgen::SanType::IpAddress(ip),
                    Err(_) => rcgen::SanType::DnsName((*san).try_into().unwrap()),
                });
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        Identity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A client certificate for `cn` in groups `orgs`.
    pub fn client(&self, cn: &str, orgs: &[&str]) -> Identity {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        Identity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

pub type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Opens a TLS connection to `addr`, trusting `server_ca_pem`, optionally presenting
/// `identity`.
pub fn connect(
    addr: SocketAddr,
    server_ca_pem: &[u8],
    identity: Option<&Identity>,
) -> io::Result<Tls> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(server_ca_pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        Some(id) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(id.cert_pem.as_bytes())
                    .map(|c| c.unwrap())
                    .collect();
            let key = PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let name = ServerName::IpAddress(addr.ip().into());
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(io::Error::other)?;
    let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    sock.set_read_timeout(Some(Duration::from_secs(20)))?;
    sock.set_write_timeout(Some(Duration::from_secs(20)))?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// A response.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Writes a request with no body (or `body`).
pub fn send(
    w: &mut impl Write,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<()> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: node\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    w.write_all(&out)?;
    w.flush()
}

/// Reads a status line and headers.
pub fn read_head(r: &mut impl BufRead) -> io::Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "no response"));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    Ok((status, headers))
}

/// Reads one chunk of a chunked body; None at the terminating chunk.
pub fn read_chunk(r: &mut impl BufRead) -> io::Result<Option<Vec<u8>>> {
    let mut size = String::new();
    if r.read_line(&mut size)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "eof in chunked body",
        ));
    }
    let n = usize::from_str_radix(size.trim(), 16)
        .map_err(|_| io::Error::other(format!("bad chunk size {size:?}")))?;
    let mut data = vec![0; n];
    r.read_exact(&mut data)?;
    let mut crlf = [0u8; 2];
    r.read_exact(&mut crlf)?;
    if n == 0 {
        return Ok(None);
    }
    Ok(Some(data))
}

/// Reads a whole response (Content-Length or chunked).
pub fn read_answer(r: &mut impl BufRead) -> io::Result<Answer> {
    let (status, headers) = read_head(r)?;
    let find = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        while let Some(chunk) = read_chunk(r)? {
            body.extend_from_slice(&chunk);
        }
    } else if let Some(len) = find("content-length") {
        body = vec![0; len.parse().map_err(io::Error::other)?];
        r.read_exact(&mut body)?;
    } else {
        r.read_to_end(&mut body)?;
    }
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// One request on a fresh TLS connection.
pub fn get(
    addr: SocketAddr,
    server_ca: &[u8],
    identity: Option<&Identity>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> io::Result<Answer> {
    let tls = connect(addr, server_ca, identity)?;
    let mut reader = BufReader::new(tls);
    send(reader.get_mut(), method, path, headers, b"")?;
    read_answer(&mut reader)
}

/// One request over plain HTTP (the healthz port).
pub fn get_plain(addr: SocketAddr, path: &str) -> io::Result<Answer> {
    let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    sock.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut reader = BufReader::new(sock);
    send(reader.get_mut(), "GET", path, &[], b"")?;
    read_answer(&mut reader)
}
