//! What [`Reader::subscribe`](crate::Reader::subscribe) and
//! [`Reader::changes`](crate::Reader::changes) hand out: one service's
//! latest endpoints, and the names of the services that change.

use tokio::sync::{broadcast, watch};

use crate::{Latest, ServiceName};

/// The watches stopped (the future [`watch`](crate::watch) returned was
/// dropped): nothing will change any more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the watches stopped")
    }
}

impl std::error::Error for Stopped {}

/// One service's endpoints as they change: only the latest value is kept
/// (a slow reader skips values, never falls behind), and it changes only
/// when the service's endpoints or the Service itself change. `None`
/// while there is no such Service.
#[derive(Debug)]
pub struct Subscription {
    updates: watch::Receiver<Latest>,
}

impl Subscription {
    pub(crate) fn new(updates: watch::Receiver<Latest>) -> Self {
        Self { updates }
    }

    /// The latest value, now seen: [`Self::changed`] waits for the next
    /// one.
    pub fn latest(&mut self) -> Latest {
        self.updates.borrow_and_update().clone()
    }

    /// The latest value, without marking it seen: [`Self::changed`] and
    /// [`Self::has_changed`] still report it if it is new.
    pub fn peek(&self) -> Latest {
        self.updates.borrow().clone()
    }

    /// Waits until the value changes from the last one seen (at once if it
    /// already has); `Err(Stopped)` once the watches stopped.
    pub async fn changed(&mut self) -> Result<(), Stopped> {
        self.updates.changed().await.map_err(|_| Stopped)
    }

    /// Whether the value changed since the last one seen, without waiting.
    pub fn has_changed(&self) -> Result<bool, Stopped> {
        self.updates.has_changed().map_err(|_| Stopped)
    }

    /// Waits until the latest value satisfies `ready` (at once if it
    /// does), and returns it, now seen.
    pub async fn wait_for(&mut self, mut ready: impl FnMut(&Latest) -> bool) -> Result<Latest, Stopped> {
        match self.updates.wait_for(|v| ready(v)).await {
            Ok(v) => Ok(v.clone()),
            Err(_) => Err(Stopped),
        }
    }

    /// The underlying `tokio::sync::watch` receiver, for its combinators
    /// (e.g. `tokio_stream::wrappers::WatchStream`).
    pub fn into_inner(self) -> watch::Receiver<Latest> {
        self.updates
    }
}

/// Why [`Changes::next`] returned no name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangesError {
    /// The watches stopped: no more names will come.
    Stopped,
    /// The reader fell behind and this many names were dropped: read what
    /// it needs with [`Reader::get`](crate::Reader::get), then go on.
    Missed(u64),
}

impl std::fmt::Display for ChangesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Stopped => f.write_str("the watches stopped"),
            Self::Missed(n) => write!(f, "fell behind: {n} changed services missed"),
        }
    }
}

impl std::error::Error for ChangesError {}

/// The name of every service whose endpoints or Service change, in order,
/// from the moment it was asked for. Every change is one name (a service
/// that changes twice comes twice).
///
/// Up to [`CHANGES_KEPT`] names wait for a reader. One that falls further
/// behind loses the oldest names: its next call returns
/// [`ChangesError::Missed`] with how many were dropped, then the names from
/// the oldest still kept on. Which services the dropped names were is not
/// known, so a reader that must not miss one reads every service it cares
/// about again ([`Reader::services`](crate::Reader::services) and
/// [`Reader::get`](crate::Reader::get)).
///
/// It is not a `futures::Stream`: call [`Self::next`] in a loop, or wrap it
/// (`futures::stream::unfold`) where a stream is needed.
#[derive(Debug)]
pub struct Changes {
    names: broadcast::Receiver<ServiceName>,
}

/// How many names [`Changes`] keeps for a reader that falls behind.
pub const CHANGES_KEPT: usize = 1024;

impl Changes {
    pub(crate) fn new(names: broadcast::Receiver<ServiceName>) -> Self {
        Self { names }
    }

    /// The next service that changed (at once if one is waiting).
    pub async fn next(&mut self) -> Result<ServiceName, ChangesError> {
        self.names.recv().await.map_err(|e| match e {
            broadcast::error::RecvError::Closed => ChangesError::Stopped,
            broadcast::error::RecvError::Lagged(n) => ChangesError::Missed(n),
        })
    }

    /// The next service that changed if one is waiting, without waiting;
    /// `Ok(None)` when none is.
    pub fn try_next(&mut self) -> Result<Option<ServiceName>, ChangesError> {
        match self.names.try_recv() {
            Ok(name) => Ok(Some(name)),
            Err(broadcast::error::TryRecvError::Empty) => Ok(None),
            Err(broadcast::error::TryRecvError::Closed) => Err(ChangesError::Stopped),
            Err(broadcast::error::TryRecvError::Lagged(n)) => Err(ChangesError::Missed(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reader_that_falls_behind_is_told_how_many_it_missed() {
        let (tx, rx) = broadcast::channel(2);
        let mut changes = Changes::new(rx);
        for i in 0..5 {
            tx.send(ServiceName::new("ns", format!("s{i}"))).unwrap();
        }
        assert_eq!(changes.next().await, Err(ChangesError::Missed(3)));
        assert_eq!(changes.next().await, Ok(ServiceName::new("ns", "s3")));
        assert_eq!(changes.try_next(), Ok(Some(ServiceName::new("ns", "s4"))));
        assert_eq!(changes.try_next(), Ok(None));
        drop(tx);
        assert_eq!(changes.next().await, Err(ChangesError::Stopped));
    }

    #[tokio::test]
    async fn a_subscription_sees_the_latest_value_once() {
        let (tx, rx) = watch::channel(None);
        let mut sub = Subscription::new(rx);
        assert_eq!(sub.has_changed(), Ok(false));
        assert_eq!(sub.latest(), None);
        tx.send_replace(None);
        assert_eq!(sub.has_changed(), Ok(true));
        assert_eq!(sub.peek(), None);
        assert_eq!(sub.has_changed(), Ok(true), "peek does not mark it seen");
        sub.changed().await.unwrap();
        assert_eq!(sub.has_changed(), Ok(false));
        drop(tx);
        assert_eq!(sub.changed().await, Err(Stopped));
        assert_eq!(sub.wait_for(Option::is_some).await, Err(Stopped));
    }
}
