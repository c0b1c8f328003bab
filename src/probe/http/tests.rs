//! HTTP GET against a local test server: status codes, same-host redirects, the body
//! limit, headers and the deadline.

use std::time::{Duration, Instant};

use super::*;
use crate::api::pod::{ContainerPort, HttpHeader, IntOrString};
use crate::prober::testing::{Reply, TestHttp};
use crate::prober::PROBE_USER_AGENT;

fn route(path: &str, port: u16) -> Reply {
    match path {
        "/ok" => Reply::Status(200, "fine".into()),
        "/fail" => Reply::Status(500, "secret details".into()),
        "/same-host" => Reply::Redirect(302, "/ok".into()),
        "/same-host-absolute" => Reply::Redirect(301, format!("http://127.0.0.1:{port}/ok")),
        "/other-host" => Reply::Redirect(302, format!("http://localhost:{port}/ok")),
        "/to-failure" => Reply::Redirect(307, "fail".into()),
        "/loop" => Reply::Redirect(302, "/loop".into()),
        "/hang" => Reply::Hang,
        "/huge" => Reply::Endless,
        _ => Reply::Status(404, String::new()),
    }
}

fn get(server: &TestHttp, path: &str, timeout: Duration) -> Attempt {
    let target = HttpTarget {
        url: server.url(path),
        headers: Vec::new(),
    };
    probe(&HttpClient::new(), &target, timeout, PROBE_USER_AGENT)
}

const T: Duration = Duration::from_secs(5);

#[test]
fn status_codes_and_redirects() {
    let server = TestHttp::start(route);
    assert_eq!(get(&server, "/ok", T), Attempt::Success("fine".into()));
    assert_eq!(
        get(&server, "/fail", T),
        Attempt::Failure("HTTP probe failed with statuscode: 500".into())
    );
    assert_eq!(
        get(&server, "/same-host", T),
        Attempt::Success("fine".into())
    );
    assert_eq!(
        get(&server, "/same-host-absolute", T),
        Attempt::Success("fine".into())
    );
    // A relative redirect that lands on a failure follows it to the failure.
    assert_eq!(
        get(&server, "/to-failure", T),
        Attempt::Failure("HTTP probe failed with statuscode: 500".into())
    );
    // Another host name (even for the same address) is not followed: success + warning.
    assert_eq!(
        get(&server, "/other-host", T),
        Attempt::Warning("Probe terminated redirects, Response body: moved".into())
    );
    let Attempt::Failure(msg) = get(&server, "/loop", T) else {
        panic!("a redirect loop fails");
    };
    assert!(msg.contains("stopped after 10 redirects"), "{msg}");
    // 1 + 10 followed; the 11th redirect is refused.
    let loops = server
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|h| h.starts_with("GET /loop "))
        .count();
    assert_eq!(loops, 11);
}

#[test]
fn headers_user_agent_and_host() {
    let server = TestHttp::start(route);
    let target = HttpTarget {
        url: server.url("/ok"),
        headers: vec![
            ("X-Probe".into(), "1".into()),
            ("Host".into(), "example.test".into()),
        ],
    };
    let got = probe(&HttpClient::new(), &target, T, PROBE_USER_AGENT);
    assert_eq!(got, Attempt::Success("fine".into()));
    let head = server.seen.lock().unwrap()[0].to_ascii_lowercase();
    assert!(
        head.contains("user-agent: kube-probe/litelet\r\n"),
        "{head}"
    );
    assert!(head.contains("x-probe: 1\r\n"), "{head}");
    assert!(head.contains("host: example.test\r\n"), "{head}");
    assert!(head.contains("accept: */*\r\n"), "{head}");

    // The action's own User-Agent wins.
    let target = HttpTarget {
        url: server.url("/ok"),
        headers: vec![("user-agent".into(), "mine".into())],
    };
    probe(&HttpClient::new(), &target, T, PROBE_USER_AGENT);
    let head = server.seen.lock().unwrap()[1].to_ascii_lowercase();
    assert!(head.contains("user-agent: mine\r\n"), "{head}");
    assert!(!head.contains("kube-probe"), "{head}");
}

#[test]
fn hanging_server_costs_the_timeout_only() {
    let server = TestHttp::start(route);
    let started = Instant::now();
    let got = get(&server, "/hang", Duration::from_millis(300));
    let Attempt::Failure(msg) = got else {
        panic!("a hanging server is a failure, got {got:?}");
    };
    assert!(msg.contains("timed out"), "{msg}");
    // Far below the server's 60 s hang: the deadline ended it.
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn huge_body_is_cut_at_the_limit() {
    let server = TestHttp::start(route);
    let Attempt::Success(body) = get(&server, "/huge", T) else {
        panic!("a 200 with a huge body is healthy");
    };
    assert_eq!(body.len(), MAX_OUTPUT);
}

#[test]
fn closed_port_fails_at_once() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let target = HttpTarget {
        url: format!("http://127.0.0.1:{port}/"),
        headers: Vec::new(),
    };
    let got = probe(&HttpClient::new(), &target, T, PROBE_USER_AGENT);
    let Attempt::Failure(msg) = got else {
        panic!("a closed port is a failure, got {got:?}");
    };
    assert!(
        msg.starts_with(&format!("Get \"http://127.0.0.1:{port}/\"")),
        "{msg}"
    );
}

#[test]
fn urls_from_actions() {
    let container = Container {
        name: "app".into(),
        ports: vec![ContainerPort {
            name: Some("web".into()),
            container_port: 8080,
            ..Default::default()
        }],
        ..Default::default()
    };
    let action = |path: Option<&str>, host: Option<&str>, https: bool| HttpGetAction {
        path: path.map(str::to_owned),
        port: IntOrString::String("web".into()),
        host: host.map(str::to_owned),
        scheme: https.then_some(UriScheme::Https),
        http_headers: vec![HttpHeader {
            name: "X".into(),
            value: "y".into(),
        }],
    };
    let url = |a: &HttpGetAction, ip: &str| target(a, &container, ip).map(|t| t.url);
    assert_eq!(
        url(&action(Some("/healthz?full=1"), None, false), "10.1.2.3"),
        Ok("http://10.1.2.3:8080/healthz?full=1".into())
    );
    assert_eq!(
        url(&action(Some("ready"), Some("svc.local"), true), "10.1.2.3"),
        Ok("https://svc.local:8080/ready".into())
    );
    assert_eq!(
        url(&action(None, None, false), "fd00::5"),
        Ok("http://[fd00::5]:8080/".into())
    );
    assert!(url(&action(None, None, false), "").is_err());
    assert_eq!(
        target(&action(None, None, false), &container, "10.1.2.3")
            .unwrap()
            .headers,
        vec![("X".into(), "y".into())]
    );
}

#[test]
fn redirect_locations() {
    let base = "http://10.0.0.1:80/a/b?x=1";
    assert_eq!(
        resolve_location(base, "/c").as_deref(),
        Some("http://10.0.0.1:80/c")
    );
    assert_eq!(
        resolve_location(base, "c").as_deref(),
        Some("http://10.0.0.1:80/a/c")
    );
    assert_eq!(
        resolve_location(base, "//other:81/d").as_deref(),
        Some("http://other:81/d")
    );
    assert_eq!(
        resolve_location(base, "https://10.0.0.1:443/e").as_deref(),
        Some("https://10.0.0.1:443/e")
    );
    assert!(same_host(base, "https://10.0.0.1:8443/"));
    assert!(same_host("http://[fd00::1]:80/", "http://[FD00::1]:81/x"));
    assert!(same_host("http://Web:80/", "http://user@web/x"));
    assert!(!same_host(base, "http://10.0.0.2:80/"));
}
