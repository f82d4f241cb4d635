//! What every streamed `/v1` answer shares: a typed payload as one SSE `data:` event, and the
//! response around a stream of them with the keep-alive comment (`: ping` every 3 s), which
//! keeps proxies and SDK read timeouts from closing a stream that waits for a long prefill.
//! May use: axum's SSE types, serde. Never: a handler.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use futures::stream::Stream;
use serde::Serialize;

/// `v` as the JSON `data:` of one event.
pub fn data(v: &impl Serialize) -> Event {
    Event::default().data(serde_json::to_string(v).unwrap_or_default())
}

/// The SSE response of `events`, with the keep-alive comment.
pub fn respond<S>(events: S) -> Sse<KeepAliveStream<S>>
where
    S: Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    Sse::new(events).keep_alive(
        KeepAlive::new()
            .interval(Duration::from_secs(3))
            .text("ping"),
    )
}
