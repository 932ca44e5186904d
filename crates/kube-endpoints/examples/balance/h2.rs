//! An HTTP/2 client of one endpoint, as a tower `Service`: the example's
//! per-endpoint service (the balancer holds one per endpoint). Copy it
//! with the example; it needs `hyper` (client, http2), `hyper-util`
//! (tokio), `http-body-util`, `bytes` and `tower`.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tower::{BoxError, Service};

/// A client of one endpoint: one HTTP/2 GET per call, answering with what
/// the server said.
pub struct H2(pub SocketAddr);

impl Service<()> for H2 {
    type Response = String;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<String, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, (): ()) -> Self::Future {
        let addr = self.0;
        Box::pin(async move {
            let io = TokioIo::new(TcpStream::connect(addr).await?);
            let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
            tokio::spawn(conn);
            let request = hyper::Request::get(format!("http://{addr}/")).body(Empty::<Bytes>::new())?;
            let body = send
                .send_request(request)
                .await?
                .into_body()
                .collect()
                .await?
                .to_bytes();
            Ok(String::from_utf8_lossy(&body).into_owned())
        })
    }
}
