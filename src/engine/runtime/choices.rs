//! The event streams of a request's `n` choices read as one: `(choice index, event)` in the
//! order they arrive, the choices polled round robin so none starves the others.
//!
//! Owns: that merge only. May use: tokio's channels. Never: HTTP, money.

use std::future::poll_fn;
use std::task::{Context, Poll};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::seam::GenerationEvent;

/// The events of every choice of one request. Dropping it drops every choice's receiver,
/// which cancels them all before the engine's next step.
#[derive(Debug)]
pub struct ChoiceEvents {
    /// Choice `i`'s receiver, `None` once its events have ended.
    choices: Vec<Option<UnboundedReceiver<GenerationEvent>>>,
    /// The choice polled first next time.
    next: usize,
}

impl ChoiceEvents {
    /// The events of choices `0..receivers.len()`, in that order.
    pub fn new(receivers: Vec<UnboundedReceiver<GenerationEvent>>) -> Self {
        Self {
            choices: receivers.into_iter().map(Some).collect(),
            next: 0,
        }
    }

    /// How many choices there are.
    pub fn len(&self) -> usize {
        self.choices.len()
    }

    /// Whether there are no choices at all.
    pub fn is_empty(&self) -> bool {
        self.choices.is_empty()
    }

    /// The next event of any choice with that choice's index; `None` once every choice's
    /// events have ended. Cancel-safe: an event is taken only when it is returned.
    pub async fn recv(&mut self) -> Option<(usize, GenerationEvent)> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<(usize, GenerationEvent)>> {
        let n = self.choices.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let Some(rx) = self.choices[i].as_mut() else {
                continue;
            };
            match rx.poll_recv(cx) {
                Poll::Ready(Some(ev)) => {
                    self.next = (i + 1) % n;
                    return Poll::Ready(Some((i, ev)));
                }
                Poll::Ready(None) => self.choices[i] = None,
                Poll::Pending => {}
            }
        }
        if self.choices.iter().all(Option::is_none) {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    #[tokio::test]
    async fn every_choice_is_read_in_turn_until_all_end() {
        let (a_tx, a) = unbounded_channel();
        let (b_tx, b) = unbounded_channel();
        for i in 0..3 {
            a_tx.send(GenerationEvent::Delta(format!("a{i}"))).unwrap();
            b_tx.send(GenerationEvent::Delta(format!("b{i}"))).unwrap();
        }
        drop(a_tx);
        let mut events = ChoiceEvents::new(vec![a, b]);
        assert_eq!(events.len(), 2);
        let mut got = Vec::new();
        for _ in 0..6 {
            got.push(events.recv().await.unwrap());
        }
        let order: Vec<usize> = got.iter().map(|(i, _)| *i).collect();
        assert_eq!(
            order,
            [0, 1, 0, 1, 0, 1],
            "round robin while both have events"
        );
        assert_eq!(got[5].1, GenerationEvent::Delta("b2".into()));
        b_tx.send(GenerationEvent::Started).unwrap();
        assert_eq!(events.recv().await, Some((1, GenerationEvent::Started)));
        drop(b_tx);
        assert_eq!(events.recv().await, None);
    }
}
