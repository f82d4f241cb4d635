//! `Meter` on the FAKE engine and a temporary ledger: what each path of the protocol in
//! `metering`'s header leaves in the ledger (balance, holds, usage), without HTTP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::billing::Units;
use crate::catalog::audio::UnitPrice;
use crate::catalog::PricePerMTok;
use crate::engine::{FakeEngine, FakeFault, Prompt, SamplingParams};
use crate::ledger::{temp_ledger, UsageStatus};
use crate::money::Micros;

const MODEL: &str = "fake-model";
const START: Micros = Micros(1_000_000);

struct Rig {
    _dir: tempfile::TempDir,
    ledger: Arc<Ledger>,
    engine: Arc<FakeEngine>,
    meter: Meter,
    account: AccountId,
}

fn rig() -> Rig {
    let (dir, ledger) = temp_ledger();
    let ledger = Arc::new(ledger);
    let account = ledger
        .create_account("meter@example.com", START)
        .unwrap()
        .id;
    let engine = Arc::new(FakeEngine::new(
        vec![(MODEL.into(), 256)],
        Duration::from_millis(1),
    ));
    let meter = Meter::new(ledger.clone(), engine.clone());
    Rig {
        _dir: dir,
        ledger,
        engine,
        meter,
        account,
    }
}

impl Rig {
    fn balance(&self) -> Micros {
        self.ledger.account(self.account).unwrap().balance_micros
    }

    fn reserved(&self) -> Micros {
        self.ledger.account(self.account).unwrap().reserved_micros
    }

    fn request(&self, id: &str, max_new_tokens: usize, key: Option<&str>) -> PaidRequest {
        PaidRequest {
            request_id: id.into(),
            account: self.account,
            key: None,
            model: MODEL.into(),
            pricing: Pricing {
                input: PricePerMTok(1_000_000),
                cached_input: None,
                output: PricePerMTok(2_000_000),
            },
            generate: GenerateRequest {
                tenant: Default::default(),
                request_id: id.into(),
                prompt: Prompt::plain(MODEL, vec![1, 2, 3, 4], 256),
                sampling: SamplingParams::default(),
                max_new_tokens,
                stop: Vec::new(),
                n: 1,
            },
            idempotency: key.map(|k| Idempotency {
                scope: IdempotencyScope {
                    account: self.account,
                    route: "/v1/chat/completions".into(),
                    key: k.into(),
                },
                fingerprint: vec![7; 32],
            }),
            started: Instant::now(),
            fit_to_balance: false,
            image_labels: Vec::new(),
        }
    }
}

/// A `Mode::Complete` that stores the charge as the body.
fn complete() -> Mode {
    Mode::Complete(Box::new(|charge, _| StoredResponse {
        status: 200,
        body: charge.cost_micros.0.to_string(),
    }))
}

async fn run(r: &Rig, req: PaidRequest) -> Result<(Charge, StoredResponse), MeterError> {
    match r.meter.admit(req, complete()).await? {
        Admission::Completing(c) => c.wait().await,
        Admission::Replay(_) => panic!("not a replay"),
        Admission::Streaming(..) => panic!("not streamed"),
    }
}

#[tokio::test]
async fn a_completed_request_is_charged_its_tokens_and_leaves_no_hold() {
    let r = rig();
    let (charge, stored) = run(&r, r.request("req_a", 8, None)).await.unwrap();
    assert_eq!(charge.prompt_tokens, 4);
    assert!(charge.completion_tokens > 0 && charge.completion_tokens <= 8);
    let expected = 4 + 2 * charge.completion_tokens as i64;
    assert_eq!(
        charge.cost_micros,
        Micros(expected),
        "1 and 2 micros a token"
    );
    assert_eq!(stored.body, expected.to_string());
    assert_eq!(r.balance(), Micros(START.0 - expected));
    assert_eq!(r.reserved(), Micros::ZERO);
    let usage = r.ledger.recent_usage(r.account, 1).unwrap();
    assert_eq!(
        (usage[0].status, usage[0].cost_micros),
        (UsageStatus::Ok, Micros(expected))
    );
    assert!(r.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn a_hold_the_balance_cannot_cover_writes_nothing() {
    let r = rig();
    // 4 + 2 * 1,000,000 micros of hold against a balance of 1,000,000.
    let err = run(&r, r.request("req_b", 1_000_000, None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, MeterError::InsufficientBalance { .. }),
        "{err:?}"
    );
    assert_eq!(r.balance(), START);
    assert_eq!(r.reserved(), Micros::ZERO);
    assert!(r.ledger.recent_usage(r.account, 1).unwrap().is_empty());
}

#[tokio::test]
async fn without_max_tokens_the_output_is_cut_to_what_the_balance_covers() {
    let r = rig();
    // 20 micros: the 4 prompt tokens (4 micros) and 8 output tokens (2 micros each).
    let poor = r
        .ledger
        .create_account("poor@example.com", Micros(20))
        .unwrap()
        .id;
    let mut req = r.request("req_fit", 200, None);
    req.account = poor;
    req.fit_to_balance = true;
    let (charge, _) = run(&r, req).await.unwrap();
    assert_eq!(charge.completion_tokens, 8, "{charge:?}");
    assert_eq!(charge.cost_micros, Micros(20));
    assert_eq!(r.ledger.account(poor).unwrap().balance_micros, Micros::ZERO);
    // Not even the prompt and one token: 402, nothing written.
    let broke = r
        .ledger
        .create_account("broke@example.com", Micros(5))
        .unwrap()
        .id;
    let mut req = r.request("req_fit2", 200, None);
    req.account = broke;
    req.fit_to_balance = true;
    let err = run(&r, req).await.unwrap_err();
    assert!(
        matches!(err, MeterError::InsufficientBalance { .. }),
        "{err:?}"
    );
    assert_eq!(r.ledger.account(broke).unwrap().balance_micros, Micros(5));
    // With `max_tokens` given, the same shortfall is 402.
    let other = r
        .ledger
        .create_account("other@example.com", Micros(20))
        .unwrap()
        .id;
    let mut req = r.request("req_fit3", 200, None);
    req.account = other;
    let err = run(&r, req).await.unwrap_err();
    assert!(
        matches!(err, MeterError::InsufficientBalance { .. }),
        "{err:?}"
    );
    assert!(r.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn a_failed_generation_voids_its_hold_and_charges_nothing() {
    let r = rig();
    r.engine.set_fault(FakeFault::FailGeneration);
    let err = run(&r, r.request("req_c", 8, None)).await.unwrap_err();
    assert!(matches!(err, MeterError::EngineFailed(_)), "{err:?}");
    assert_eq!(r.balance(), START);
    assert_eq!(r.reserved(), Micros::ZERO);
    assert!(r.ledger.check().unwrap().is_empty());
}

#[tokio::test]
async fn a_full_queue_releases_the_hold() {
    let r = rig();
    r.engine.set_fault(FakeFault::Overloaded);
    let err = run(&r, r.request("req_d", 8, None)).await.unwrap_err();
    assert!(matches!(err, MeterError::Overloaded(_)), "{err:?}");
    assert_eq!((r.balance(), r.reserved()), (START, Micros::ZERO));
}

#[tokio::test]
async fn an_idempotent_retry_replays_the_stored_answer_and_charges_once() {
    let r = rig();
    let (charge, first) = run(&r, r.request("req_e1", 8, Some("k1"))).await.unwrap();
    let after_first = r.balance();
    assert_eq!(after_first, Micros(START.0 - charge.cost_micros.0));
    match r
        .meter
        .admit(r.request("req_e2", 8, Some("k1")), complete())
        .await
    {
        Ok(Admission::Replay(stored)) => assert_eq!(stored, first),
        _ => panic!("the retry must replay"),
    }
    assert_eq!(r.balance(), after_first, "charged once");
    let mut other = r.request("req_e3", 8, Some("k1"));
    other.idempotency.as_mut().unwrap().fingerprint = vec![9; 32];
    let err = run(&r, other).await.unwrap_err();
    assert!(matches!(err, MeterError::IdempotencyMismatch), "{err:?}");
    assert_eq!(r.balance(), after_first);
}

#[tokio::test]
async fn streaming_with_an_idempotency_key_is_refused_before_anything_is_held() {
    let r = rig();
    let err = r
        .meter
        .admit(r.request("req_f", 8, Some("k2")), Mode::Stream)
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, MeterError::StreamWithIdempotency), "{err:?}");
    assert_eq!(r.reserved(), Micros::ZERO);
}

fn units(r: &Rig, id: &str, seconds: u64) -> PaidUnits {
    PaidUnits {
        request_id: id.into(),
        account: r.account,
        key: None,
        model: "fake-whisper".into(),
        units: Units::AudioMs {
            ms: seconds * 1000,
            per_minute: Some(UnitPrice(Micros(6_000))),
        },
        idempotency: None,
        started: Instant::now(),
        estimate_s: 1,
    }
}

#[tokio::test]
async fn unit_priced_work_is_charged_its_list_price_or_nothing_when_it_fails() {
    let r = rig();
    // 30 s at 6,000 micros a minute.
    let render = |cost: Micros, text: String| StoredResponse {
        status: 200,
        body: format!("{text} {}", cost.0),
    };
    let done = r
        .meter
        .run_units(
            units(&r, "req_g", 30),
            async { Ok::<_, String>("heard".to_owned()) },
            render,
        )
        .await
        .unwrap();
    match done {
        UnitsAdmission::Done(cost, stored) => {
            assert_eq!(cost, Micros(3_000));
            assert_eq!(stored.body, "heard 3000");
        }
        _ => panic!("the work succeeded"),
    }
    assert_eq!(r.balance(), Micros(START.0 - 3_000));
    let failed = r
        .meter
        .run_units(
            units(&r, "req_h", 30),
            async { Err::<String, _>("broken") },
            render,
        )
        .await
        .unwrap();
    assert!(matches!(failed, UnitsAdmission::Failed("broken")));
    assert_eq!(
        r.balance(),
        Micros(START.0 - 3_000),
        "the failure cost nothing"
    );
    assert_eq!(r.reserved(), Micros::ZERO);
    assert!(r.ledger.check().unwrap().is_empty());
}
