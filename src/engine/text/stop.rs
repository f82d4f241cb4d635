//! Stop strings matched across token boundaries. Text that could still be the start of a stop
//! string is held back, so a stop string is never emitted, not even in part.

/// Streaming stop-string matcher for one sequence.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
}

/// What to do after pushing new text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopStep {
    /// Emit this text (may be empty) and continue.
    Continue(String),
    /// A stop string matched: emit this text (before the match) and finish with `stop`.
    Stopped(String),
}

impl StopMatcher {
    /// Empty strings in `stops` are ignored.
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            pending: String::new(),
        }
    }

    /// Push decoded text; returns what may be emitted now.
    pub fn push(&mut self, text: &str) -> StopStep {
        self.pending.push_str(text);
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min();
        if let Some(at) = first {
            let out = self.pending[..at].to_owned();
            self.pending.clear();
            return StopStep::Stopped(out);
        }
        // Hold back the longest suffix of `pending` that is a proper prefix of some stop string.
        let mut hold = 0;
        for s in &self.stops {
            for (cut, _) in s.char_indices().skip(1) {
                if cut > hold && self.pending.ends_with(&s[..cut]) {
                    hold = cut;
                }
            }
        }
        let emit_to = self.pending.len() - hold;
        let out = self.pending[..emit_to].to_owned();
        self.pending.drain(..emit_to);
        StopStep::Continue(out)
    }

    /// Text still held back; emitted when generation ends for another reason.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_across_token_boundaries_and_never_emits_the_stop() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("hello E"), StopStep::Continue("hello ".into()));
        assert_eq!(m.push("N"), StopStep::Continue(String::new()));
        assert_eq!(m.push("Dx"), StopStep::Stopped(String::new()));
    }

    #[test]
    fn releases_held_text_when_the_prefix_breaks() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("E"), StopStep::Continue(String::new()));
        assert_eq!(m.push("x"), StopStep::Continue("Ex".into()));
        assert_eq!(m.push("EN"), StopStep::Continue(String::new()));
        assert_eq!(m.flush(), "EN");
    }

    #[test]
    fn earliest_of_several_stops_wins_and_multibyte_is_safe() {
        let mut m = StopMatcher::new(vec!["b".into(), "é!".into(), String::new()]);
        assert_eq!(m.push("aé"), StopStep::Continue("a".into()));
        assert_eq!(m.push("!b"), StopStep::Stopped(String::new()));
    }
}
