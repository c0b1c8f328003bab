//! HTTP GET for probes and lifecycle hooks (upstream `pkg/probe/http`): the URL from an
//! `httpGet` action, one request with a hard end-to-end deadline, same-host redirects
//! followed, at most [`MAX_OUTPUT`] bytes of body read.
//!
//! Called on `probe-N` attempt threads (probes) and on pod worker / kill threads
//! (hooks) through one shared [`HttpClient`]. Rules, as upstream:
//! - the scheme is HTTP unless the action says HTTPS; certificates are not verified;
//!   no proxy; no connection reuse (`Connection: close`);
//! - `User-Agent` is the caller's (`kube-probe/litelet`) and `Accept` is `*/*` unless
//!   the action's headers set them (an empty `Accept` removes it); a `Host` header
//!   becomes the request's host;
//! - redirects (301, 302, 303, 307, 308) are followed while they stay on the same
//!   host name, at most 10; a redirect to another host ends the chain and its 3xx
//!   response is the answer (a probe counts it as a success with a warning);
//! - the whole exchange, redirects and body included, ends by the timeout; a body
//!   longer than the limit is cut, not an error.

use std::io::{self, Read};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::pod::{Container, HttpGetAction, UriScheme};

use super::{resolve_port, Attempt, SpecError, MAX_OUTPUT};

/// Why a GET gave no answer; the texts are Go's client's, which probe events quote.
/// Causes sit behind an `Arc` so that hook errors can be cloned.
#[derive(Clone, Debug, thiserror::Error)]
pub enum GetError {
    #[error("Get {url:?}: timed out after {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("Get {url:?}: bad redirect location {location:?}")]
    BadRedirect { url: String, location: String },
    #[error("Get {url:?}: stopped after 10 redirects")]
    TooManyRedirects { url: String },
    #[error("Get {url:?}: {source}")]
    Send {
        url: String,
        #[source]
        source: Arc<ureq::Error>,
    },
    #[error("Get {url:?}: reading the body: {source}")]
    Body {
        url: String,
        #[source]
        source: Arc<io::Error>,
    },
}

/// Redirects followed before giving up, as Go's client.
pub const MAX_REDIRECTS: usize = 10;

/// A GET to send: the first URL and the headers from the action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpTarget {
    pub url: String,
    pub headers: Vec<(String, String)>,
}

/// The last response of a GET.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// The URL that gave this response (after followed redirects).
    pub url: String,
    pub status: u16,
    /// Up to [`MAX_OUTPUT`] bytes of the body, lossily decoded.
    pub body: String,
}

/// The URL and headers of `action` for a container whose pod has `pod_ip`.
pub fn target(
    action: &HttpGetAction,
    container: &Container,
    pod_ip: &str,
) -> Result<HttpTarget, SpecError> {
    let port = resolve_port(&action.port, container)?;
    let host = match action.host.as_deref().filter(|h| !h.is_empty()) {
        Some(host) => host,
        None if pod_ip.is_empty() => return Err(SpecError::NoPodIp),
        None => pod_ip,
    };
    let scheme = match action.scheme {
        Some(UriScheme::Https) => "https",
        _ => "http",
    };
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let path = action.path.as_deref().unwrap_or_default();
    let slash = if path.starts_with('/') { "" } else { "/" };
    Ok(HttpTarget {
        url: format!("{scheme}://{host}:{port}{slash}{path}"),
        headers: action
            .http_headers
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
    })
}

/// A shareable client: one agent, no pooling, no proxy, no certificate checks.
#[derive(Clone)]
pub struct HttpClient {
    agent: ureq::Agent,
}

impl Default for HttpClient {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpClient {
    pub fn new() -> HttpClient {
        let tls = ureq::tls::TlsConfig::builder()
            .disable_verification(true)
            .build();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .max_idle_connections(0)
            .proxy(None)
            .tls_config(tls)
            .build()
            .into();
        HttpClient { agent }
    }

    /// GETs `target`, following same-host redirects, all within `timeout`.
    pub fn get(
        &self,
        target: &HttpTarget,
        timeout: Duration,
        user_agent: &str,
    ) -> Result<HttpResponse, GetError> {
        let deadline = Instant::now() + timeout;
        let mut url = target.url.clone();
        let mut redirects = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(GetError::Timeout { url, timeout });
            }
            let mut response = self.send(&url, target, left, user_agent, timeout)?;
            let status = response.status().as_u16();
            let location = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if let (true, Some(location)) = (is_followed_redirect(status), location) {
                let Some(next) = resolve_location(&url, &location) else {
                    return Err(GetError::BadRedirect { url, location });
                };
                if same_host(&url, &next) {
                    redirects += 1;
                    if redirects > MAX_REDIRECTS {
                        return Err(GetError::TooManyRedirects { url: next });
                    }
                    url = next;
                    continue;
                }
                // Another host: stop here and answer with this 3xx.
            }
            let mut body = Vec::with_capacity(512);
            let read = response
                .body_mut()
                .as_reader()
                .take(MAX_OUTPUT as u64)
                .read_to_end(&mut body);
            if let Err(err) = read {
                return Err(GetError::Body {
                    url,
                    source: Arc::new(err),
                });
            }
            return Ok(HttpResponse {
                url,
                status,
                body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
    }

    fn send(
        &self,
        url: &str,
        target: &HttpTarget,
        left: Duration,
        user_agent: &str,
        timeout: Duration,
    ) -> Result<ureq::http::Response<ureq::Body>, GetError> {
        let mut request = self
            .agent
            .get(url)
            .config()
            .timeout_global(Some(left))
            .build()
            .header("Connection", "close");
        let has = |name: &str| {
            target
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
        };
        if !has("user-agent") {
            request = request.header("User-Agent", user_agent);
        }
        if !has("accept") {
            request = request.header("Accept", "*/*");
        }
        let mut host_seen = false;
        for (name, value) in &target.headers {
            if name.eq_ignore_ascii_case("accept") && value.is_empty() {
                continue;
            }
            if name.eq_ignore_ascii_case("host") {
                // The first Host wins, as Go's Header.Get.
                if std::mem::replace(&mut host_seen, true) {
                    continue;
                }
            }
            request = request.header(name.as_str(), value.as_str());
        }
        let url = url.to_owned();
        request.call().map_err(|err| match err {
            ureq::Error::Timeout(_) => GetError::Timeout { url, timeout },
            other => GetError::Send {
                url,
                source: Arc::new(other),
            },
        })
    }
}

/// Runs an HTTP probe: 2xx is healthy, 3xx (a redirect not followed) is healthy with a
/// warning, anything else or no answer is a failure.
pub fn probe(client: &HttpClient, target: &HttpTarget, timeout: Duration, agent: &str) -> Attempt {
    match client.get(target, timeout, agent) {
        Err(err) => Attempt::Failure(err.to_string()),
        Ok(r) if (200..300).contains(&r.status) => Attempt::Success(r.body),
        Ok(r) if (300..400).contains(&r.status) => Attempt::Warning(format!(
            "Probe terminated redirects, Response body: {}",
            r.body
        )),
        // The body stays out of the message: it may hold anything (upstream #99425).
        Ok(r) => Attempt::Failure(format!("HTTP probe failed with statuscode: {}", r.status)),
    }
}

fn is_followed_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

/// `scheme://authority` and the path (with query) of an absolute URL.
fn split_url(url: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some((scheme, &rest[..end], &rest[end..]))
}

/// The host name of an absolute URL: lower case, without user info, port or brackets.
fn host_name(url: &str) -> Option<String> {
    let (_, authority, _) = split_url(url)?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split_once(']').map_or(v6, |(h, _)| h)
    } else {
        authority.split_once(':').map_or(authority, |(h, _)| h)
    };
    Some(host.to_ascii_lowercase())
}

fn same_host(a: &str, b: &str) -> bool {
    matches!((host_name(a), host_name(b)), (Some(x), Some(y)) if x == y)
}

/// The absolute URL a `Location` header points to, relative to `base`.
fn resolve_location(base: &str, location: &str) -> Option<String> {
    let (scheme, authority, path) = split_url(base)?;
    if location.contains("://") {
        return split_url(location).map(|_| location.to_owned());
    }
    if let Some(rest) = location.strip_prefix("//") {
        return Some(format!("{scheme}://{rest}"));
    }
    if location.starts_with('/') {
        return Some(format!("{scheme}://{authority}{location}"));
    }
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    Some(format!("{scheme}://{authority}{dir}/{location}"))
}

#[cfg(test)]
mod tests;
