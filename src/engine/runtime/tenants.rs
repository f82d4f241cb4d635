//! Sharing one engine between tenants (`engine::Tenant`: an account and the API key that
//! asked), so no key or account starves the others of the queue, the batch or prefill:
//!
//! - **The queue** (`Book`, at `submit`): at most `TenantLimits::queue_depth` jobs wait in all,
//!   at most `queued_per_account` of them one account's, and one key has at most
//!   `sequences_per_key` sequences (choices) waiting and running together. A job past a cap
//!   is refused at once (`Refusal`); the places it takes are tickets (`Place`) that free
//!   themselves when the job leaves the queue and when each of its sequences ends, however it
//!   ends (a panicking step included).
//! - **The batch** (`pick`, at admission): a free place in the running batch goes to the
//!   waiting job of the account with the fewest running sequences, then of that account's key
//!   with the fewest, then the oldest of that key's jobs (first come, first served within a
//!   key), so a tenant that arrives while another fills the queue runs next.
//! - **Prefill** (`share`, per step): the step's prefill tokens are split max-min fairly,
//!   first between accounts, then between each account's keys: a tenant that needs less than
//!   an equal share gets all it needs, the rest is shared equally by the others. A short
//!   prompt is not behind another tenant's long ones.
//!
//! Owns: the caps, the tickets, the order of admission and the prefill split. May use: std,
//! `ids`, the engine's request types. Never: HTTP, money, the model.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use crate::engine::seam::Tenant;
use crate::ids::AccountId;

/// The operator's caps (`tollgate serve --queue-depth`, `--max-queued-per-account`,
/// `--max-sequences-per-key`; `docs/limits.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantLimits {
    /// Jobs waiting for the batch, every tenant together.
    pub queue_depth: usize,
    /// Jobs one account may have waiting.
    pub queued_per_account: usize,
    /// Sequences (a job of `n` choices is `n`) one key, or one account's session path, may
    /// have waiting and running together.
    pub sequences_per_key: usize,
}

impl TenantLimits {
    /// The server's defaults for a queue of `queue_depth` and a batch of `max_batch`: a
    /// quarter of the queue per account (at least 1), and twice the batch per key.
    pub fn for_queue(queue_depth: usize, max_batch: usize) -> Self {
        Self {
            queue_depth: queue_depth.max(1),
            queued_per_account: (queue_depth / 4).max(1),
            sequences_per_key: (2 * max_batch).max(1),
        }
    }
}

/// Why `Book::enter` refused a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `queue_depth` jobs wait already.
    QueueFull,
    /// The account has `queued_per_account` jobs waiting.
    Account(usize),
    /// The key has `sequences_per_key` sequences waiting or running.
    Key(usize),
}

/// The counts behind the caps, shared by the engine's front (`enter`) and its thread (the
/// tickets' drops).
#[derive(Debug)]
pub struct Book {
    limits: TenantLimits,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    queued: usize,
    queued_by_account: HashMap<AccountId, usize>,
    sequences_by_tenant: HashMap<Tenant, usize>,
}

/// The places a job holds: one in the queue while it waits, and one per choice (`seats`)
/// until that choice's sequence ends. Default: none (a job no `Book` counts).
#[derive(Debug, Default)]
pub struct Place {
    queue: Option<QueueTicket>,
    seats: Vec<SeatTicket>,
}

#[derive(Debug)]
struct QueueTicket {
    book: Arc<Book>,
    account: AccountId,
}

/// One sequence's place in its tenant's count; dropping it frees the place.
#[derive(Debug)]
pub struct SeatTicket {
    book: Arc<Book>,
    tenant: Tenant,
}

impl Book {
    /// A book enforcing `limits`.
    pub fn new(limits: TenantLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            counts: Mutex::new(Counts::default()),
        })
    }

    /// The caps in force.
    pub fn limits(&self) -> TenantLimits {
        self.limits
    }

    /// Take a place in the queue and `choices` seats for a job of `tenant`, or refuse it.
    ///
    /// # Errors
    /// The first cap it would pass.
    pub fn enter(self: &Arc<Self>, tenant: Tenant, choices: usize) -> Result<Place, Refusal> {
        let choices = choices.max(1);
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if c.queued >= self.limits.queue_depth {
            return Err(Refusal::QueueFull);
        }
        let account = c
            .queued_by_account
            .get(&tenant.account)
            .copied()
            .unwrap_or(0);
        if account >= self.limits.queued_per_account {
            return Err(Refusal::Account(self.limits.queued_per_account));
        }
        let seats = c.sequences_by_tenant.get(&tenant).copied().unwrap_or(0);
        if seats + choices > self.limits.sequences_per_key {
            return Err(Refusal::Key(self.limits.sequences_per_key));
        }
        c.queued += 1;
        *c.queued_by_account.entry(tenant.account).or_insert(0) += 1;
        *c.sequences_by_tenant.entry(tenant).or_insert(0) += choices;
        Ok(Place {
            queue: Some(QueueTicket {
                book: self.clone(),
                account: tenant.account,
            }),
            seats: (0..choices)
                .map(|_| SeatTicket {
                    book: self.clone(),
                    tenant,
                })
                .collect(),
        })
    }

    /// (jobs queued, sequences of `tenant`) now, for tests and `/health`.
    pub fn counts(&self, tenant: Tenant) -> (usize, usize) {
        let c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        (
            c.queued,
            c.sequences_by_tenant.get(&tenant).copied().unwrap_or(0),
        )
    }
}

impl Place {
    /// The place of a choice forked off a running job: its one seat, no queue place.
    pub fn seated(seat: Option<SeatTicket>) -> Self {
        Self {
            queue: None,
            seats: seat.into_iter().collect(),
        }
    }

    /// The job left the queue (admitted, or ended while waiting): its queue place is free.
    pub fn leave_queue(&mut self) {
        self.queue = None;
    }

    /// One choice's seat, for the sequence that runs it (`None` for a job no book counts).
    pub fn take_seat(&mut self) -> Option<SeatTicket> {
        self.seats.pop()
    }
}

/// One less of `key` in `counts`, its entry gone at zero (so the maps hold only tenants with
/// places taken).
fn count_down<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(key);
        }
    }
}

impl Book {
    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for QueueTicket {
    fn drop(&mut self) {
        let mut c = self.book.lock();
        c.queued = c.queued.saturating_sub(1);
        count_down(&mut c.queued_by_account, &self.account);
    }
}

impl Drop for SeatTicket {
    fn drop(&mut self) {
        count_down(&mut self.book.lock().sequences_by_tenant, &self.tenant);
    }
}

/// When each tenant was last given a place in the batch (a count of admissions), so ties
/// between equally loaded tenants go round robin. Forgets tenants with nothing queued or
/// running (`keep_only`): one that comes back counts as new.
#[derive(Debug, Default)]
pub struct Turns {
    admissions: u64,
    accounts: HashMap<AccountId, u64>,
    tenants: HashMap<Tenant, u64>,
}

impl Turns {
    /// `tenant` was given a place now.
    pub fn admitted(&mut self, tenant: Tenant) {
        self.admissions += 1;
        self.accounts.insert(tenant.account, self.admissions);
        self.tenants.insert(tenant, self.admissions);
    }

    /// Forget every tenant not in `present` (those queued or running).
    pub fn keep_only(&mut self, present: &[Tenant]) {
        self.tenants.retain(|t, _| present.contains(t));
        self.accounts
            .retain(|a, _| present.iter().any(|t| t.account == *a));
    }
}

/// Which of the waiting jobs (their tenants, in arrival order) gets the next free place in
/// the batch, given the tenants of the running sequences: the oldest job of the key with the
/// fewest running sequences within the account with the fewest; between equals, the account
/// and then the key served least recently (`turns`). `None` when nothing waits.
pub fn pick(waiting: &[Tenant], running: &[Tenant], turns: &Turns) -> Option<usize> {
    let mut by_account: HashMap<AccountId, usize> = HashMap::new();
    let mut by_tenant: HashMap<Tenant, usize> = HashMap::new();
    for t in running {
        *by_account.entry(t.account).or_insert(0) += 1;
        *by_tenant.entry(*t).or_insert(0) += 1;
    }
    waiting
        .iter()
        .enumerate()
        .min_by_key(|(i, t)| {
            (
                by_account.get(&t.account).copied().unwrap_or(0),
                turns.accounts.get(&t.account).copied().unwrap_or(0),
                by_tenant.get(t).copied().unwrap_or(0),
                turns.tenants.get(t).copied().unwrap_or(0),
                *i,
            )
        })
        .map(|(i, _)| i)
}

/// Split `budget` prefill tokens between sequences that want `wants[i] = (tenant, tokens)`,
/// in arrival order: max-min fair between accounts, then between each account's keys, then
/// first come first served within a key. Returns each sequence's grant (at most its want; the
/// grants add up to `min(budget, all wants)`).
pub fn share(budget: usize, wants: &[(Tenant, usize)]) -> Vec<usize> {
    let mut accounts: BTreeMap<AccountId, Vec<usize>> = BTreeMap::new();
    for (i, (t, _)) in wants.iter().enumerate() {
        accounts.entry(t.account).or_default().push(i);
    }
    let groups: Vec<&Vec<usize>> = accounts.values().collect();
    let demand = |idx: &[usize]| idx.iter().map(|&i| wants[i].1).sum::<usize>();
    let account_demands: Vec<usize> = groups.iter().map(|g| demand(g)).collect();
    let account_grants = water_fill(budget, &account_demands);
    let mut out = vec![0; wants.len()];
    for (members, grant) in groups.iter().zip(account_grants) {
        let mut keys: Vec<(Tenant, Vec<usize>)> = Vec::new();
        for &i in members.iter() {
            match keys.iter_mut().find(|(t, _)| *t == wants[i].0) {
                Some((_, v)) => v.push(i),
                None => keys.push((wants[i].0, vec![i])),
            }
        }
        let key_demands: Vec<usize> = keys.iter().map(|(_, v)| demand(v)).collect();
        for ((_, seqs), mut left) in keys.iter().zip(water_fill(grant, &key_demands)) {
            for &i in seqs {
                let g = wants[i].1.min(left);
                out[i] = g;
                left -= g;
            }
        }
    }
    out
}

/// Each tenant's want: the sum of its sequences' `wants`, tenants in order of first
/// appearance.
pub fn by_tenant(wants: &[(Tenant, usize)]) -> Vec<(Tenant, usize)> {
    let mut out: Vec<(Tenant, usize)> = Vec::new();
    for &(t, n) in wants {
        match out.iter_mut().find(|(u, _)| *u == t) {
            Some((_, sum)) => *sum += n,
            None => out.push((t, n)),
        }
    }
    out
}

/// Split `budget` between `wants` (as `share` takes them) shortest tenant first: the tenant
/// with the least left in all gets all of it (its sequences in arrival order), then the next;
/// ties in order of first appearance. For a short prompt beside long ones (`plan`).
pub fn share_shortest_first(budget: usize, wants: &[(Tenant, usize)]) -> Vec<usize> {
    let mut order = by_tenant(wants);
    order.sort_by_key(|w| w.1);
    let mut left = budget;
    let mut out = vec![0; wants.len()];
    for (tenant, _) in order {
        for (i, (t, want)) in wants.iter().enumerate() {
            if *t == tenant {
                out[i] = (*want).min(left);
                left -= out[i];
            }
        }
    }
    out
}

/// Max-min fair shares of `budget` for `demands`: repeatedly an equal share of what is left
/// to those still wanting, the smallest demands filled first; a remainder that does not divide
/// goes one token each to the earliest.
fn water_fill(budget: usize, demands: &[usize]) -> Vec<usize> {
    let mut grants = vec![0; demands.len()];
    let mut left = budget;
    let mut open: Vec<usize> = (0..demands.len()).filter(|&i| demands[i] > 0).collect();
    while left > 0 && !open.is_empty() {
        let each = left / open.len();
        if each == 0 {
            for &i in open.iter().take(left) {
                grants[i] += 1;
            }
            break;
        }
        let mut still = Vec::with_capacity(open.len());
        for &i in &open {
            let g = (demands[i] - grants[i]).min(each);
            grants[i] += g;
            left -= g;
            if grants[i] < demands[i] {
                still.push(i);
            }
        }
        open = still;
    }
    grants
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::KeyId;

    fn t(account: i64, key: i64) -> Tenant {
        Tenant {
            account: AccountId(account),
            key: Some(KeyId(key)),
        }
    }

    /// The caps refuse in their order, and every place comes back when its ticket drops.
    #[test]
    fn the_book_caps_queue_account_and_key_and_frees_places() {
        let book = Book::new(TenantLimits {
            queue_depth: 4,
            queued_per_account: 2,
            sequences_per_key: 3,
        });
        let mut a1 = book.enter(t(1, 1), 2).expect("first");
        assert_eq!(book.enter(t(1, 1), 2).unwrap_err(), Refusal::Key(3));
        let a2 = book.enter(t(1, 2), 1).expect("another key of the account");
        assert_eq!(book.enter(t(1, 3), 1).unwrap_err(), Refusal::Account(2));
        let b = book.enter(t(2, 4), 1).expect("another account");
        let c = book.enter(t(3, 5), 1).expect("a third");
        assert_eq!(book.enter(t(4, 6), 1).unwrap_err(), Refusal::QueueFull);
        // Admitted: a1 leaves the queue but its two sequences still count for its key.
        a1.leave_queue();
        assert_eq!(book.counts(t(1, 1)), (3, 2));
        assert_eq!(book.enter(t(1, 1), 2).unwrap_err(), Refusal::Key(3));
        let seat = a1.take_seat().expect("a seat");
        drop(a1);
        assert_eq!(
            book.counts(t(1, 1)),
            (3, 1),
            "the running sequence keeps its seat"
        );
        drop(seat);
        drop((a2, b, c));
        assert_eq!(book.counts(t(1, 1)), (0, 0));
        let c = book.counts.lock().unwrap();
        assert!(c.queued_by_account.is_empty() && c.sequences_by_tenant.is_empty());
    }

    /// The next place goes to the least-loaded account, then key; between equals, to the one
    /// served least recently; then to the oldest job.
    #[test]
    fn admission_prefers_the_tenant_with_the_fewest_running() {
        let (a, a2, b) = (t(1, 1), t(1, 2), t(2, 3));
        let fresh = Turns::default();
        assert_eq!(pick(&[], &[a], &fresh), None);
        assert_eq!(
            pick(&[a, a, b], &[a, a], &fresh),
            Some(2),
            "b runs nothing yet"
        );
        assert_eq!(
            pick(&[a, a, b], &[], &fresh),
            Some(0),
            "all equal: first come"
        );
        assert_eq!(
            pick(&[a, a2], &[a], &fresh),
            Some(1),
            "within the account, the idle key"
        );
        assert_eq!(pick(&[a2, b], &[a, a], &fresh), Some(1), "by account first");
        let mut turns = Turns::default();
        turns.admitted(a);
        assert_eq!(pick(&[a, a, b], &[], &turns), Some(2), "a was served last");
        turns.admitted(b);
        assert_eq!(pick(&[a, b], &[], &turns), Some(0), "now b was");
        turns.admitted(a2);
        assert_eq!(
            pick(&[a, a2, b], &[], &turns),
            Some(2),
            "account 1 was served last"
        );
        turns.keep_only(&[b]);
        assert_eq!(
            pick(&[a, b], &[], &turns),
            Some(0),
            "a forgotten: new again"
        );
    }

    /// Prefill tokens: a short want is filled, long ones share the rest equally, by account
    /// first and key second; one tenant alone keeps arrival order.
    #[test]
    fn prefill_is_shared_max_min_by_account_then_key() {
        let (a, a2, b) = (t(1, 1), t(1, 2), t(2, 3));
        assert_eq!(
            share(256, &[(a, 7000), (a, 7000), (b, 35)]),
            vec![221, 0, 35]
        );
        assert_eq!(share(256, &[(a, 7000), (b, 7000)]), vec![128, 128]);
        assert_eq!(
            share(100, &[(a, 7000), (a2, 7000), (b, 7000)]),
            vec![25, 25, 50]
        );
        assert_eq!(
            share(4, &[(a, 2), (a, 10)]),
            vec![2, 2],
            "one tenant: arrival order"
        );
        assert_eq!(
            share(5, &[(a, 9), (b, 9)]),
            vec![3, 2],
            "the odd token to the first"
        );
        assert_eq!(share(0, &[(a, 9)]), vec![0]);
        assert_eq!(
            share(50, &[(a, 3), (b, 4)]),
            vec![3, 4],
            "more than all want"
        );
    }

    /// Shortest tenant first: B's 35 whole before A's two long prompts; a tenant's want is
    /// the sum of its sequences'.
    #[test]
    fn a_short_prompt_goes_first_and_whole() {
        let (a, b) = (t(1, 1), t(2, 2));
        let wants = [(a, 7000), (a, 7000), (b, 35)];
        assert_eq!(share_shortest_first(51, &wants), vec![16, 0, 35]);
        assert_eq!(share_shortest_first(20, &wants), vec![0, 0, 20]);
        assert_eq!(by_tenant(&wants), vec![(a, 14000), (b, 35)]);
        assert_eq!(
            share_shortest_first(10, &[(a, 4), (b, 4), (a, 4)]),
            vec![4, 4, 2]
        );
    }
}
