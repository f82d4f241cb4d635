//! How long one model's steps take (`Pace`), measured by the engine thread from the steps it
//! runs, so a step can be cut to a time while several tenants share it (`plan`).
//!
//! A step costs about `overhead + tokens x per_token`: the weights are read once a step, and
//! each fed token adds its rows. `Pace` keeps an exponential average of the small steps
//! (fewer than `LARGE_STEP` tokens) and of the large ones, each as (tokens, seconds); the line
//! through the two points is the model. With large steps alone, the overhead is taken as 0
//! (so the cost of a token is over-estimated, and the cut is, if anything, too small).
//!
//! Owns: the step-time model. May use: std. Never: the scheduler loop, HTTP.

/// Steps that feed at least this many tokens are large.
const LARGE_STEP: usize = 64;
/// The large and small averages must be at least this many tokens apart to fit a line.
const SPREAD: f64 = 32.0;
/// The weight of the newest step in each average.
const NEWEST: f64 = 0.25;
/// The fewest prefill tokens a cut step still feeds, so the prompt being cut keeps moving.
pub(super) const MIN_CHUNK: usize = 8;

/// How long one model's steps take (see the module doc). Unknown until large steps have run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Pace {
    /// Average (tokens, seconds) of the steps under `LARGE_STEP` tokens.
    small: Option<(f64, f64)>,
    /// Average (tokens, seconds) of the steps of `LARGE_STEP` tokens or more.
    large: Option<(f64, f64)>,
}

impl Pace {
    /// Take a step of `tokens` fed tokens that ran `seconds` into its average.
    pub(super) fn record(&mut self, tokens: usize, seconds: f64) {
        if tokens == 0 {
            return;
        }
        let point = (tokens as f64, seconds);
        let slot = if tokens < LARGE_STEP {
            &mut self.small
        } else {
            &mut self.large
        };
        *slot = Some(slot.map_or(point, |(n, s)| {
            (n + NEWEST * (point.0 - n), s + NEWEST * (point.1 - s))
        }));
    }

    /// (seconds a step costs whatever it feeds, seconds each fed token adds); `None` until a
    /// large step has run.
    pub(super) fn model(&self) -> Option<(f64, f64)> {
        let (ln, ls) = self.large?;
        let line = self
            .small
            .filter(|(sn, _)| ln - sn >= SPREAD)
            .and_then(|(sn, ss)| {
                let per = (ls - ss) / (ln - sn);
                (per > 0.0).then(|| ((ss - per * sn).max(0.0), per))
            });
        Some(line.unwrap_or((0.0, ls / ln)))
    }

    /// The most prefill tokens a step beside `decode_rows` decode rows may feed to take about
    /// `target_s` seconds (at least `MIN_CHUNK`); `None` until the cost of a token is known.
    pub(super) fn tokens_within(&self, target_s: f64, decode_rows: usize) -> Option<usize> {
        let (overhead, per) = self.model().filter(|(_, per)| *per > 0.0)?;
        let room = target_s - overhead - decode_rows as f64 * per;
        let fits = (room / per).max(0.0);
        Some((fits.min(usize::MAX as f64) as usize).max(MIN_CHUNK))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps of 0.06 s + 10 ms a token: large steps alone over-estimate a token (overhead
    /// taken as 0); with small steps too, the line is found, and the cut fits the target.
    #[test]
    fn the_line_through_small_and_large_steps_gives_the_cut() {
        let cost = |n: usize| 0.06 + 0.01 * n as f64;
        let mut p = Pace::default();
        assert_eq!(p.tokens_within(0.25, 1), None, "nothing known yet");
        p.record(256, cost(256));
        let (overhead, per) = p.model().expect("a large step");
        assert_eq!(overhead, 0.0);
        assert!((per - cost(256) / 256.0).abs() < 1e-12);
        for _ in 0..20 {
            p.record(17, cost(17));
            p.record(256, cost(256));
        }
        let (overhead, per) = p.model().expect("a line");
        assert!(
            (overhead - 0.06).abs() < 1e-6 && (per - 0.01).abs() < 1e-6,
            "{overhead} {per}"
        );
        // (0.255 - 0.06 - 1 x 0.01) / 0.01 = 18.5: 18 tokens beside one decode row.
        assert_eq!(p.tokens_within(0.255, 1), Some(18));
        assert_eq!(
            p.tokens_within(0.05, 1),
            Some(MIN_CHUNK),
            "never under MIN_CHUNK"
        );
    }
}
