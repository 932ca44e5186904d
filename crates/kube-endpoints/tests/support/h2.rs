//! HTTP/2 over loopback for the Discover test: a server answering every
//! request with a fixed text (the client is the balance example's).

use std::convert::Infallible;
use std::net::IpAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

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
