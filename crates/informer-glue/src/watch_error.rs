//! Why a watch fails, typed: the API server's answer with its HTTP status
//! (401 from 403 from 410 without reading text), no answer at all, an
//! answer that cannot be used, or a stream the server ended. The client's
//! own error is kept as the source.

use std::sync::Arc;

use kube::runtime::watcher;

/// Why a watch fails.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    /// The API server answered with an error status.
    #[error("the API server answered {status} {reason}: {message}")]
    Refused {
        /// The HTTP status (401, 403, 404, 410, 429, 5xx, ...).
        status: u16,
        /// The API server's reason (`Unauthorized`, `Forbidden`, `Expired`, ...).
        reason: String,
        /// Its message.
        message: String,
        /// The client's error.
        #[source]
        source: Arc<watcher::Error>,
    },
    /// No answer: the connection was refused, reset or timed out, or TLS
    /// failed.
    #[error("the API server was not reached: {source}")]
    Unreachable {
        /// The client's error.
        #[source]
        source: Arc<watcher::Error>,
    },
    /// An answer that could not be used (one that does not decode, a list
    /// without a resourceVersion).
    #[error("the API server's answer could not be used: {source}")]
    Unusable {
        /// The client's error.
        #[source]
        source: Arc<watcher::Error>,
    },
    /// The server ended the watch stream; it is started again.
    #[error("the watch stream ended; starting it again")]
    Ended,
    /// The API server said nothing for `quiet` and did not answer a probe
    /// in time ([`crate::liveness`]): its connections are open but nobody
    /// answers on them. The watches start again on new connections.
    #[error("the API server has said nothing for {}s and does not answer", quiet.as_secs())]
    Silent {
        /// How long it had been quiet when the probe gave up.
        quiet: std::time::Duration,
    },
}

impl WatchError {
    /// The HTTP status of the API server's answer, when it answered with
    /// an error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Two failures are the same when they say the same (the sources are the
/// client's, compared by their text).
impl PartialEq for WatchError {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for WatchError {}

impl From<watcher::Error> for WatchError {
    fn from(e: watcher::Error) -> Self {
        let answered = |s: &kube::core::Status| (s.code, s.reason.clone(), s.message.clone());
        let refused = match &e {
            watcher::Error::InitialListFailed(c)
            | watcher::Error::WatchStartFailed(c)
            | watcher::Error::WatchFailed(c) => match c {
                kube::Error::Api(s) => Some(answered(s)),
                kube::Error::SerdeError(_)
                | kube::Error::FromUtf8(_)
                | kube::Error::LinesCodecMaxLineLengthExceeded => {
                    return Self::Unusable { source: Arc::new(e) };
                }
                _ => None,
            },
            watcher::Error::WatchError(s) => Some(answered(s)),
            watcher::Error::NoResourceVersion => return Self::Unusable { source: Arc::new(e) },
        };
        match refused {
            Some((status, reason, message)) => Self::Refused {
                status,
                reason,
                message,
                source: Arc::new(e),
            },
            None => Self::Unreachable { source: Arc::new(e) },
        }
    }
}
