//! The scheduler between tenants (`tenants`, `plan`): a new tenant's job takes the next place
//! in the batch before a busy tenant's queue, prefill tokens are split max-min fairly between
//! tenants, and while one tenant decodes, another's prefill chunks are cut to the step-time
//! bound. On the scripted stand-in of `scheduler_harness`.

use std::time::Duration;

use super::harness::*;
use super::*;
use crate::engine::seam::Tenant;
use crate::ids::{AccountId, KeyId};

fn tenant(account: i64, key: i64) -> Tenant {
    Tenant {
        account: AccountId(account),
        key: Some(KeyId(key)),
    }
}

/// A greedy job of `tenant` with a `prompt`-token prompt and up to `max_new` tokens.
fn job(h: &Harness, tenant: Tenant, prompt: usize, max_new: usize) -> Submitted {
    let mut r = request(prompt, max_new, 1);
    r.tenant = tenant;
    h.submit_request(r).remove(0)
}

/// With one place in the batch, tenant A's four queued jobs do not keep tenant B's, queued
/// after them, waiting for all of them: B's runs second (its 5-token prompt is the second
/// step's).
#[test]
fn a_new_tenant_runs_before_a_busy_tenants_queue() {
    let mut h = Harness::new();
    let (a, b) = (tenant(1, 1), tenant(2, 2));
    let a_jobs: Vec<_> = (0..4).map(|_| job(&h, a, 3, 1)).collect();
    let b_job = job(&h, b, 5, 1);
    let thread = h.start(limits(1, 64, 0));
    for j in a_jobs {
        assert_eq!(wait(j).0.completion_tokens, 1);
    }
    assert_eq!(wait(b_job).0.completion_tokens, 1);
    let steps = h.finish(thread);
    assert_eq!(
        steps,
        [[3], [5], [3], [3], [3]],
        "A, then B, then the rest of A"
    );
}

/// Two of tenant A's long prompts and one short prompt of tenant B share a 32-token step:
/// B's whole 10 tokens and A's 22 (to its first prompt: arrival order within A), so B's first
/// token comes after one step, not after A's 200 tokens.
#[test]
fn prefill_is_shared_between_tenants_so_a_short_prompt_is_not_behind_long_ones() {
    let mut h = Harness::new();
    let (a, b) = (tenant(1, 1), tenant(2, 2));
    let long: Vec<_> = (0..2).map(|_| job(&h, a, 100, 1)).collect();
    let short = job(&h, b, 10, 3);
    let thread = h.start(limits(8, 32, 0));
    assert_eq!(wait(short).0.completion_tokens, 3);
    for j in long {
        assert_eq!(wait(j).0.completion_tokens, 1);
    }
    let steps = h.finish(thread);
    // Admission order A, B, A (B ran nothing when the second place came free).
    assert_eq!(steps[0], [22, 10], "B's prompt whole beside A's share");
    // Then B decodes beside A's next chunk (not cut: the step-time bound is off here).
    assert_eq!(steps[1], [31, 1]);
}

/// While tenant B decodes, tenant A's prefill is cut to chunks that keep a step near
/// `interleave_ms` (here 40 ms at a measured 2 ms a token: about 19 tokens, at least
/// `MIN_CHUNK`), instead of filling the step's 128 tokens; once B is done A's chunks are whole
/// again.
#[test]
fn another_tenants_prefill_is_cut_while_a_tenant_decodes() {
    let mut h = Harness::new();
    h.per_token = Duration::from_millis(2);
    let (a, b) = (tenant(1, 1), tenant(2, 2));
    let b_job = job(&h, b, 4, 12);
    let a_job = job(&h, a, 1000, 1);
    let thread = h.start(Limits {
        interleave_ms: 40,
        ..limits(8, 128, 0)
    });
    assert_eq!(wait(b_job).0.completion_tokens, 12);
    assert_eq!(wait(a_job).0.completion_tokens, 1);
    let steps = h.finish(thread);
    // Step 1: B's prompt and 124 of A's, which measures the cost of a token.
    assert_eq!(steps[0], [4, 124]);
    // While B decodes (11 more tokens), A's chunks are small.
    let beside: Vec<usize> = steps[1..12].iter().map(|s| s[1]).collect();
    assert!(
        steps[1..12].iter().all(|s| s.len() == 2 && s[0] == 1),
        "{steps:?}"
    );
    assert!(
        beside
            .iter()
            .all(|&n| (super::super::pace::MIN_CHUNK..=32).contains(&n)),
        "A's chunks beside B's decoding: {beside:?}"
    );
    // B is done: A's remaining prompt goes in whole steps again.
    assert!(
        steps[12..]
            .iter()
            .any(|s| s == &vec![127] || s == &vec![128]),
        "{steps:?}"
    );
}

/// A short prompt that arrives while another tenant prefills a long one is prefilled whole in
/// one short step (`max(cap, its tokens + MIN_CHUNK)`, here 20 tokens, instead of a 128-token
/// step), then decodes beside small chunks of the long one.
#[test]
fn a_short_prompt_beside_a_long_one_is_one_short_step() {
    let mut h = Harness::new();
    h.per_token = Duration::from_millis(2);
    let (a, b) = (tenant(1, 1), tenant(2, 2));
    let a_job = job(&h, a, 2000, 1);
    let thread = h.start(Limits {
        interleave_ms: 40,
        ..limits(8, 128, 0)
    });
    // After A's first whole steps (about 256 ms each), which measure the cost of a token.
    std::thread::sleep(Duration::from_millis(600));
    let b_job = job(&h, b, 10, 4);
    assert_eq!(wait(b_job).0.completion_tokens, 4);
    assert_eq!(wait(a_job).0.completion_tokens, 1);
    let steps = h.finish(thread);
    let first_b = steps
        .iter()
        .position(|s| s.len() == 2)
        .expect("a step with both");
    assert_eq!(steps[first_b][1], 10, "B's prompt whole: {steps:?}");
    assert!(
        steps[first_b][0] <= 32,
        "A's share of that step is small: {steps:?}"
    );
    assert!(
        steps[..first_b].iter().all(|s| s == &vec![128]),
        "A alone had whole steps: {steps:?}"
    );
}
