//! A small HTTP/1 server for health checks and metrics: GET and HEAD (any
//! other method is answered 405), one handler per server, stopped by a
//! future.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// What a handler answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: String,
}

impl Reply {
    /// A JSON reply with kube-proxy's headers.
    pub fn json(status: u16, body: String) -> Self {
        Self {
            status,
            headers: vec![
                ("Content-Type", "application/json".into()),
                ("X-Content-Type-Options", "nosniff".into()),
            ],
            body,
        }
    }

    /// 405 for methods other than GET and HEAD.
    pub fn method_not_allowed() -> Self {
        Self {
            status: 405,
            headers: vec![
                ("Content-Type", "text/plain; charset=utf-8".into()),
                ("Allow", "GET, HEAD".into()),
            ],
            body: "405 method not allowed\n".into(),
        }
    }

    /// 404 for paths the server does not know.
    pub fn not_found() -> Self {
        Self {
            status: 404,
            headers: vec![("Content-Type", "text/plain; charset=utf-8".into())],
            body: "404 page not found\n".into(),
        }
    }
}

/// Maps a request path to a reply.
pub type Handler = Arc<dyn Fn(&str) -> Reply + Send + Sync>;

fn response(r: Reply) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(r.body)));
    *resp.status_mut() = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (k, v) in r.headers {
        if let Ok(v) = hyper::header::HeaderValue::from_str(&v) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}

/// Serves `listener` with `handler` until `stop` completes.
pub async fn serve(listener: TcpListener, handler: Handler, stop: impl Future<Output = ()>) {
    futures::pin_mut!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => return,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of file descriptors and the like: keep serving.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                // hyper sends no body in answer to HEAD.
                let reply = if matches!(*req.method(), hyper::Method::GET | hyper::Method::HEAD) {
                    handler(req.uri().path())
                } else {
                    Reply::method_not_allowed()
                };
                async move { Ok::<_, Infallible>(response(reply)) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A server address that could not be listened on.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {addr}: cannot listen")]
pub struct CannotListen {
    /// The flag that named it.
    pub flag: &'static str,
    /// The address.
    pub addr: std::net::SocketAddr,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// Listens on `addr` (named by `flag`) as kube-proxy's
/// `--bind-address-hard-fail` says: with `hard_fail`, a port that cannot be
/// listened on stops the start; without it, it is said and the server left
/// out (`None`).
pub async fn listen(
    flag: &'static str,
    addr: std::net::SocketAddr,
    hard_fail: bool,
) -> Result<Option<TcpListener>, CannotListen> {
    let source = match TcpListener::bind(addr).await {
        Ok(l) => return Ok(Some(l)),
        Err(source) => source,
    };
    let failed = CannotListen { flag, addr, source };
    if hard_fail {
        return Err(failed);
    }
    tracing::error!(
        "{failed}: {}; running without it (--bind-address-hard-fail stops instead)",
        failed.source
    );
    Ok(None)
}
