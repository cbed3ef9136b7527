//! One object served over plain HTTP/1.1, as a web server or a CDN serves
//! a file: `HEAD`, and `GET` of the whole or of a `Range: bytes=A-B`
//! (`206` with `Content-Range`), with an `ETag` and `Last-Modified`, and
//! `If-Match` held to the `ETag` (`412` when it differs). The object can be
//! replaced while it is served ([`HttpObject::replace`]: a new `ETag`), so
//! that a reader holding the old version can be seen to fail rather than
//! mix versions. Connections are kept alive, each on a thread of its own;
//! no TLS, no listing. Only std: nothing of an HTTP library's behaviour
//! stands between a client and what this sends.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The object and its version (its `ETag` is `"vN"`).
struct State {
    bytes: Arc<Vec<u8>>,
    version: u64,
}

/// A server of one object at one path, on `127.0.0.1`; stopped when
/// dropped (connections still open end when their client closes them).
pub struct HttpObject {
    addr: SocketAddr,
    path: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

impl HttpObject {
    /// Serves `bytes` at `/path` (`path` without its leading `/`).
    pub fn serve(path: &str, bytes: Vec<u8>) -> io::Result<HttpObject> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            bytes: Arc::new(bytes),
            version: 1,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp, want) = (state.clone(), stop.clone(), format!("/{path}"));
        std::thread::Builder::new()
            .name("testkit-http".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if sp.load(Ordering::Relaxed) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let (st, want) = (st.clone(), want.clone());
                    let _ = std::thread::Builder::new()
                        .name("testkit-http-conn".into())
                        .spawn(move || {
                            let _ = connection(conn, &want, &st);
                        });
                }
            })?;
        Ok(HttpObject {
            addr,
            path: path.to_owned(),
            state,
            stop,
        })
    }

    /// `http://127.0.0.1:PORT/path`.
    pub fn url(&self) -> String {
        format!("http://{}/{}", self.addr, self.path)
    }

    /// Serves `bytes` from now on, as a new version (a new `ETag`).
    pub fn replace(&self, bytes: Vec<u8>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.bytes = Arc::new(bytes);
        s.version += 1;
    }
}

impl Drop for HttpObject {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accepting thread, which then sees the stop.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Answers the requests of one connection until its client closes it.
fn connection(conn: TcpStream, want: &str, state: &Mutex<State>) -> io::Result<()> {
    let mut out = conn.try_clone()?;
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let (mut range, mut if_match) = (None, None);
        loop {
            let mut h = String::new();
            if r.read_line(&mut h)? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "range" => range = Some(v.trim().to_owned()),
                    "if-match" => if_match = Some(v.trim().to_owned()),
                    _ => {}
                }
            }
        }
        let (bytes, etag) = {
            let s = state.lock().unwrap_or_else(|p| p.into_inner());
            (s.bytes.clone(), format!("\"v{}\"", s.version))
        };
        let head = method == "HEAD";
        if (method != "GET" && !head) || target != want {
            let status = if target != want {
                "404 Not Found"
            } else {
                "405 Method Not Allowed"
            };
            write!(out, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        }
        if if_match.is_some_and(|m| m != etag && m != "*") {
            write!(
                out,
                "HTTP/1.1 412 Precondition Failed\r\nETag: {etag}\r\nContent-Length: 0\r\n\r\n"
            )?;
            continue;
        }
        let total = bytes.len() as u64;
        let common = format!(
            "ETag: {etag}\r\nLast-Modified: Wed, 21 Oct 2026 07:28:00 GMT\r\nAccept-Ranges: bytes\r\n"
        );
        let (status, span, extra) = match range.as_deref().and_then(parse_range) {
            None => ("200 OK", 0..total, String::new()),
            Some((a, _)) if a >= total => {
                write!(
                    out,
                    "HTTP/1.1 416 Range Not Satisfiable\r\n{common}Content-Range: bytes */{total}\r\nContent-Length: 0\r\n\r\n"
                )?;
                continue;
            }
            Some((a, b)) => {
                let end = b.map_or(total, |b| (b + 1).min(total));
                (
                    "206 Partial Content",
                    a..end,
                    format!("Content-Range: bytes {a}-{}/{total}\r\n", end - 1),
                )
            }
        };
        write!(
            out,
            "HTTP/1.1 {status}\r\n{common}{extra}Content-Length: {}\r\n\r\n",
            span.end - span.start
        )?;
        if !head {
            out.write_all(&bytes[span.start as usize..span.end as usize])?;
        }
        out.flush()?;
    }
}

/// `bytes=A-B` or `bytes=A-` as (A, B); anything else (a suffix range,
/// several ranges) is not asked by the clients tested, and is answered
/// whole.
fn parse_range(v: &str) -> Option<(u64, Option<u64>)> {
    let (a, b) = v.strip_prefix("bytes=")?.split_once('-')?;
    let a = a.trim().parse().ok()?;
    let b = match b.trim() {
        "" => None,
        b => Some(b.parse().ok()?),
    };
    Some((a, b))
}
