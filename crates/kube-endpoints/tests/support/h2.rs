//! HTTP/2 over loopback for the Discover test and the balance example: a
//! server answering every request with a fixed text, and a client of one
//! endpoint (a tower `Service`) that returns what the server said.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tower::{BoxError, Service};

/// Serves HTTP/2 on `ip`:`port`, answering every request with `answer`.
pub async fn serve(ip: IpAddr, port: u16, answer: String) -> std::io::Result<()> {
    let listener = TcpListener::bind((ip, port)).await?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let answer = answer.clone();
            let reply = hyper::service::service_fn(move |_| {
                let answer = answer.clone();
                async move { Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(answer)))) }
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), reply),
            );
        }
    });
    Ok(())
}

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
