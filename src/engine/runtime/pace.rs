//! How long one model's steps take (`Pace`), measured by the engine thread from the steps it
//! runs, so a step can be cut to a time while another tenant decodes (`plan`).
//!
//! Owns: the step-time model. May use: std. Never: the scheduler loop, HTTP.

/// Steps that feed at most this many tokens measure a step's fixed cost (`Pace::overhead_s`).
const SMALL_STEP: usize = 8;
/// Steps that feed at least this many tokens measure the cost of one more (`per_token_s`).
const LARGE_STEP: usize = 64;
/// The weight of the newest step in each average.
const NEWEST: f64 = 0.25;
/// The fewest prefill tokens a step cut by `interleave_ms` still feeds, so the prompt being
/// cut keeps moving.
pub(super) const MIN_CHUNK: usize = 16;

/// How long one model's steps take: a step's fixed cost (reading the weights: the time of a
/// step that feeds few tokens) and the time each more token adds, each an exponential
/// average over the steps that show it. Unknown until such steps have run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Pace {
    /// Seconds of a step feeding `SMALL_STEP` tokens or fewer.
    pub(super) overhead_s: Option<f64>,
    /// Seconds each fed token adds, from steps of `LARGE_STEP` tokens or more.
    pub(super) per_token_s: Option<f64>,
}

impl Pace {
    /// Take a step of `tokens` fed tokens that ran `seconds` into the averages.
    pub(super) fn record(&mut self, tokens: usize, seconds: f64) {
        let mix = |old: Option<f64>, new: f64| Some(old.map_or(new, |o| o + NEWEST * (new - o)));
        if tokens <= SMALL_STEP {
            self.overhead_s = mix(self.overhead_s, seconds);
        } else if tokens >= LARGE_STEP {
            let per = ((seconds - self.overhead_s.unwrap_or(0.0)) / tokens as f64).max(0.0);
            self.per_token_s = mix(self.per_token_s, per);
        }
    }

    /// The most prefill tokens a step beside `decode_rows` decode rows may feed to take about
    /// `target_s` seconds (at least `MIN_CHUNK`); `None` until the cost of a token is known.
    pub(super) fn tokens_within(&self, target_s: f64, decode_rows: usize) -> Option<usize> {
        let per = self.per_token_s.filter(|p| *p > 0.0)?;
        let room = target_s - self.overhead_s.unwrap_or(0.0) - decode_rows as f64 * per;
        let fits = (room / per).max(0.0);
        Some((fits.min(usize::MAX as f64) as usize).max(MIN_CHUNK))
    }
}
