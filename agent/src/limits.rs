//! Politeness per provider, enforced in each agent: most requests in flight, requests and
//! tokens per minute (this agent's share of the campaign's caps), the least gap between two
//! sends, and Retry-After pauses. See `latmesh_core::load::ProviderLimits`.
//!
//! # Design
//!
//! * **Opt-in.** A provider without any cap has no limiter at all: [`Limiters::acquire`]
//!   returns at once (no lock, no allocation, no time read) and [`Limiters::pause`] does
//!   nothing. Provider indexes outside the plan are unlimited too.
//! * **In flight.** `max_in_flight` is a fair (FIFO) tokio [`Semaphore`]; the [`Permit`]
//!   owns the semaphore permit, so dropping it (when the attempt ends) frees the slot.
//! * **Rates.** `requests_per_min` and `tokens_per_min` are GCRA buckets (virtual
//!   scheduling: the bucket is kept as the instant at which it would be empty again, so it
//!   refills continuously, without a timer). Each bucket holds **one second's worth** of
//!   budget (at least one request, at least one token); a request of more tokens than that
//!   costs the whole bucket, so it still passes, at most once a second. A bucket starts with
//!   room for its first request only: sends begin at the sustained rate (21 requests at
//!   600/min take 2 s, not 1 s), and only idle time saves up to a one-second burst. This
//!   keeps the start of every campaign run, when all agents begin together, within the rate.
//! * **Gap and pauses.** `min_gap_ms` is measured between two acquisitions (each acquisition
//!   is immediately followed by its send). A Retry-After [`Limiters::pause`] holds every
//!   acquisition of the provider until its end (pauses only ever extend).
//! * **Order and FIFO.** An acquirer first takes its in-flight slot, then queues on the
//!   provider's tokio [`Mutex`] (fair, FIFO) around the bucket state. The head of the queue
//!   computes when every cap lets it go (buckets, gap, pause), sleeps *holding the lock*
//!   until then, re-checks (a pause may have come meanwhile), and consumes the budget only
//!   at the instant it returns. So concurrent acquirers go one by one in arrival order,
//!   never wake together, and never overshoot a rate.
//! * **Deadlines.** Nothing is consumed for a request that is not sent: a deadline passing
//!   while waiting for the slot or the lock gives up the wait; a head whose go time falls
//!   after its deadline releases the lock and its slot at once (others are not held up by
//!   it) and returns `None` at the deadline. A go time never moves earlier (budget is only
//!   consumed, pauses only extend), so deciding early is exact. A request that may go
//!   right away goes even if its deadline has just passed: `None` means "the caps would
//!   have made it wait past its deadline". A future dropped while waiting (cancellation)
//!   releases everything and has consumed nothing either.
//! * **Clock.** Times are read with [`tokio::time::Instant`], which is the system's
//!   monotonic clock (the same as [`std::time::Instant`]) unless a test pauses tokio's time.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use latmesh_core::load::ProviderLimits;
use latmesh_core::plan::Plan;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant as TokioInstant;

/// Nanoseconds in a second: the size of every bucket, in time units.
const SECOND_NS: f64 = 1e9;

/// Longest time any computation may reach, ns after the limiter's creation (~31.7 years):
/// keeps instants representable and sums far from overflowing.
const FAR_NS: u64 = 1_000_000_000_000_000_000;

/// The limiters of one campaign run, one per provider of its plan.
#[derive(Debug, Default)]
pub struct Limiters {
    /// By provider index; `None` for a provider without caps.
    providers: Vec<Option<Limiter>>,
}

/// Held while a request is in flight; dropping it frees the provider's in-flight slot.
#[derive(Debug)]
pub struct Permit {
    /// The in-flight slot, when the provider has `max_in_flight`.
    _slot: Option<OwnedSemaphorePermit>,
}

impl Limiters {
    /// Limiters for `plan`'s providers, this agent's share when `agents` agents run it
    /// (rates divided by `agents`, see `ProviderLimits::per_agent`).
    pub fn new(plan: &Plan, agents: u32) -> Limiters {
        Limiters::from_limits(plan.providers.iter().map(|p| &p.limits), agents)
    }

    /// Limiters for providers `0, 1, …` with these campaign-wide caps, this agent's share
    /// when `agents` agents share them.
    pub fn from_limits<'a>(
        limits: impl IntoIterator<Item = &'a ProviderLimits>,
        agents: u32,
    ) -> Limiters {
        let base = TokioInstant::now();
        Limiters {
            providers: limits
                .into_iter()
                .map(|l| Limiter::new(&l.per_agent(agents), base))
                .collect(),
        }
    }

    /// Waits until provider `provider` may send a request of about `tokens` tokens (a free
    /// in-flight slot, requests/min and tokens/min budget, its least gap since the last send,
    /// no Retry-After pause), in arrival order. The budget is consumed when this returns
    /// `Some`: send at once, and hold the [`Permit`] while the request is in flight. `None`
    /// when the caps would make it wait past `deadline` (returned at the deadline; nothing is
    /// taken then). Unlimited providers return at once.
    pub async fn acquire(
        &self,
        provider: usize,
        tokens: u32,
        deadline: Option<Instant>,
    ) -> Option<Permit> {
        match self.limiter(provider) {
            None => Some(Permit { _slot: None }),
            Some(l) => l.acquire(tokens, deadline).await,
        }
    }

    /// A throttled answer's Retry-After: no request to `provider` starts before `until`
    /// (only for providers with caps configured: politeness is opt-in).
    pub fn pause(&self, provider: usize, until: Instant) {
        if let Some(l) = self.limiter(provider) {
            let ns = l.ns(TokioInstant::from_std(until));
            l.paused_until_ns.fetch_max(ns, Ordering::Relaxed);
        }
    }

    /// Whether `provider` has any cap configured.
    pub fn is_limited(&self, provider: usize) -> bool {
        self.limiter(provider).is_some()
    }

    fn limiter(&self, provider: usize) -> Option<&Limiter> {
        self.providers.get(provider).and_then(Option::as_ref)
    }
}

/// One provider's caps and state. Times are ns after `base`.
#[derive(Debug)]
struct Limiter {
    /// Origin of the ns times below.
    base: TokioInstant,
    /// In-flight slots (`max_in_flight`).
    slots: Option<Arc<Semaphore>>,
    /// End of the latest Retry-After pause, ns (0: none).
    paused_until_ns: AtomicU64,
    /// Buckets and gap, behind the FIFO lock that orders acquirers.
    rate: Mutex<RateState>,
}

impl Limiter {
    /// `None` when `limits` has no cap.
    fn new(limits: &ProviderLimits, base: TokioInstant) -> Option<Limiter> {
        if limits.is_empty() {
            return None;
        }
        Some(Limiter {
            base,
            // Validation rejects 0; were it to come, 1 keeps the provider usable.
            slots: limits
                .max_in_flight
                .map(|n| Arc::new(Semaphore::new(n.max(1) as usize))),
            paused_until_ns: AtomicU64::new(0),
            rate: Mutex::new(RateState::new(limits)),
        })
    }

    async fn acquire(&self, tokens: u32, deadline: Option<Instant>) -> Option<Permit> {
        let deadline = deadline.map(TokioInstant::from_std);
        let slot = match &self.slots {
            None => None,
            Some(s) => Some(
                until(deadline, s.clone().acquire_owned())
                    .await?
                    .expect("the in-flight semaphore is never closed"),
            ),
        };
        let mut state = until(deadline, self.rate.lock()).await?;
        loop {
            let now = self.ns(TokioInstant::now());
            let go = state.earliest(tokens, self.paused_until_ns.load(Ordering::Relaxed));
            if go <= now {
                state.take(now, tokens);
                return Some(Permit { _slot: slot });
            }
            let go = self.instant(go);
            if let Some(deadline) = deadline
                && go > deadline
            {
                // It can only get later: give the queue and the slot back now.
                drop(state);
                drop(slot);
                tokio::time::sleep_until(deadline).await;
                return None;
            }
            // Sleep at the head of the queue, then check again (a pause may have come).
            tokio::time::sleep_until(go).await;
        }
    }

    /// `t` as ns after `base` (0 before it).
    fn ns(&self, t: TokioInstant) -> u64 {
        let ns = t.saturating_duration_since(self.base).as_nanos();
        u64::try_from(ns).unwrap_or(u64::MAX).min(FAR_NS)
    }

    /// The instant `ns` after `base`.
    fn instant(&self, ns: u64) -> TokioInstant {
        self.base + Duration::from_nanos(ns.min(FAR_NS))
    }
}

/// `f`, given up when `deadline` passes first.
async fn until<F: Future>(deadline: Option<TokioInstant>, f: F) -> Option<F::Output> {
    match deadline {
        None => Some(f.await),
        Some(d) => tokio::time::timeout_at(d, f).await.ok(),
    }
}

/// The rate caps of one provider: buckets and least gap. Times are ns after the limiter's
/// base.
#[derive(Clone, Debug, PartialEq)]
struct RateState {
    /// `requests_per_min` (unit: one request).
    requests: Option<Bucket>,
    /// `tokens_per_min` (unit: one token).
    tokens: Option<Bucket>,
    /// `min_gap_ms`, ns (0: none).
    min_gap_ns: u64,
    /// The latest acquisition.
    last_ns: Option<u64>,
}

impl RateState {
    fn new(limits: &ProviderLimits) -> RateState {
        RateState {
            requests: Bucket::per_min(limits.requests_per_min),
            tokens: Bucket::per_min(limits.tokens_per_min),
            min_gap_ns: limits
                .min_gap_ms
                .map_or(0, |ms| ms.saturating_mul(1_000_000).min(FAR_NS)),
            last_ns: None,
        }
    }

    /// The earliest time, ns, at which a request of `tokens` tokens may go, given a pause
    /// until `paused_until` ns.
    fn earliest(&self, tokens: u32, paused_until: u64) -> u64 {
        let mut go = paused_until;
        if let Some(b) = &self.requests {
            go = go.max(b.earliest(b.cost(1)));
        }
        if let Some(b) = &self.tokens {
            go = go.max(b.earliest(b.cost(tokens)));
        }
        if let Some(last) = self.last_ns {
            go = go.max(last.saturating_add(self.min_gap_ns));
        }
        go
    }

    /// Consumes one request of `tokens` tokens sent at `now` ns.
    fn take(&mut self, now: u64, tokens: u32) {
        if let Some(b) = &mut self.requests {
            b.take(now, b.cost(1));
        }
        if let Some(b) = &mut self.tokens {
            b.take(now, b.cost(tokens));
        }
        self.last_ns = Some(now);
    }
}

/// A GCRA bucket kept in time units: a unit of budget costs `unit_ns` ns of the bucket's
/// `cap_ns` ns; the bucket is empty again (full of budget) at `empty_at_ns`.
#[derive(Clone, Debug, PartialEq)]
struct Bucket {
    /// Time one unit (a request, a token) is worth at the sustained rate, ns.
    unit_ns: f64,
    /// Bucket size, ns: one second, at least one unit.
    cap_ns: u64,
    /// When the consumed budget has all drained (GCRA's theoretical arrival time), ns;
    /// `None` before the first request.
    empty_at_ns: Option<u64>,
}

impl Bucket {
    /// A bucket for `per_min` units a minute; `None` without a usable rate.
    fn per_min(per_min: Option<f64>) -> Option<Bucket> {
        let per_min = per_min.filter(|r| r.is_finite() && *r > 0.0)?;
        let unit_ns = (60.0 * SECOND_NS / per_min).min(FAR_NS as f64);
        Some(Bucket {
            unit_ns,
            cap_ns: unit_ns.ceil().max(SECOND_NS) as u64,
            empty_at_ns: None,
        })
    }

    /// What `units` units cost, ns: never more than the whole bucket.
    fn cost(&self, units: u32) -> u64 {
        ((f64::from(units) * self.unit_ns).round() as u64).min(self.cap_ns)
    }

    /// The earliest time, ns, at which `cost` fits in the bucket.
    fn earliest(&self, cost: u64) -> u64 {
        self.empty_at_ns
            .map_or(0, |e| e.saturating_add(cost).saturating_sub(self.cap_ns))
    }

    /// Consumes `cost` at `now` ns. The first request fills the bucket: sends start at the
    /// sustained rate, with no saved burst.
    fn take(&mut self, now: u64, cost: u64) {
        self.empty_at_ns = Some(match self.empty_at_ns {
            None => now.saturating_add(self.cap_ns),
            Some(e) => e.max(now).saturating_add(cost),
        });
    }
}

#[cfg(test)]
mod tests {
    //! The bucket arithmetic is checked exactly on simulated time (the `schedule` helper);
    //! the async tests run in real time (the workspace's tokio has no `test-util`, so no
    //! paused clock), with short spans and bounds that leave room for scheduling delays.

    use super::*;

    const MS: u64 = 1_000_000;

    fn limits(f: impl FnOnce(&mut ProviderLimits)) -> ProviderLimits {
        let mut l = ProviderLimits::default();
        f(&mut l);
        l
    }

    /// Greedy sequential sends of these token counts, each as early as the caps allow,
    /// the first no earlier than `start` ns: the send times, ns.
    fn schedule(state: &mut RateState, start: u64, tokens: &[u32]) -> Vec<u64> {
        let mut now = start;
        tokens
            .iter()
            .map(|&t| {
                now = now.max(state.earliest(t, 0));
                state.take(now, t);
                now
            })
            .collect()
    }

    fn one(l: ProviderLimits) -> Limiters {
        Limiters::from_limits([&l], 1)
    }

    fn elapsed_ms(t: Instant) -> f64 {
        t.elapsed().as_secs_f64() * 1e3
    }

    #[test]
    fn requests_per_min_spaces_sends_and_saves_at_most_a_second() {
        let mut s = RateState::new(&limits(|l| l.requests_per_min = Some(600.0)));
        let times = schedule(&mut s, 0, &[1; 21]);
        // No burst at the start: 10/s from the first send, the 21st at 2.0 s.
        assert_eq!(times, (0..21).map(|i| i * 100 * MS).collect::<Vec<_>>());
        // After 3 s idle, one second's worth (10) goes at once, then 10/s again.
        let times = schedule(&mut s, 5_000 * MS, &[1; 12]);
        assert_eq!(&times[..10], &[5_000 * MS; 10]);
        assert_eq!(&times[10..], &[5_100 * MS, 5_200 * MS]);
        // Rates below one a second: the bucket holds one request.
        let mut s = RateState::new(&limits(|l| l.requests_per_min = Some(30.0)));
        let times = schedule(&mut s, 0, &[1; 3]);
        assert_eq!(times, [0, 2_000 * MS, 4_000 * MS]);
        let times = schedule(&mut s, 60_000 * MS, &[1; 2]);
        assert_eq!(times, [60_000 * MS, 62_000 * MS]);
    }

    #[test]
    fn tokens_per_min_caps_by_tokens_and_passes_oversized_requests() {
        // 100 tokens/s: 50-token requests every 0.5 s, 10-token ones every 0.1 s.
        let mut s = RateState::new(&limits(|l| l.tokens_per_min = Some(6_000.0)));
        let times = schedule(&mut s, 0, &[50, 50, 50, 10, 10]);
        assert_eq!(times, [0, 500 * MS, 1_000 * MS, 1_100 * MS, 1_200 * MS]);
        // A request over the bucket (100 tokens) costs the whole bucket: once a second.
        let times = schedule(&mut s, 10_000 * MS, &[1_000_000, 1_000_000, 50]);
        assert_eq!(times, [10_000 * MS, 11_000 * MS, 11_500 * MS]);
        // Both buckets: the tighter one rules each send.
        let mut s = RateState::new(&limits(|l| {
            l.requests_per_min = Some(600.0);
            l.tokens_per_min = Some(6_000.0);
        }));
        // (the first request fills both buckets; the 50-token one waits for its tokens; the
        // next 1-token one only for 10 ms of tokens, the requests bucket having saved time).
        let times = schedule(&mut s, 0, &[1, 1, 50, 1]);
        assert_eq!(times, [0, 100 * MS, 510 * MS, 520 * MS]);
    }

    #[test]
    fn min_gap_and_pause_set_the_earliest_send() {
        let mut s = RateState::new(&limits(|l| l.min_gap_ms = Some(100)));
        assert_eq!(
            schedule(&mut s, 0, &[1; 4]),
            [0, 100 * MS, 200 * MS, 300 * MS]
        );
        assert_eq!(s.earliest(1, 0), 400 * MS);
        assert_eq!(s.earliest(1, 1_000 * MS), 1_000 * MS);
    }

    #[test]
    fn per_agent_share_divides_the_rates() {
        let campaign = limits(|l| {
            l.max_in_flight = Some(4);
            l.requests_per_min = Some(600.0);
            l.min_gap_ms = Some(10);
        });
        let lim = Limiters::from_limits([&campaign], 3);
        let l = lim.limiter(0).unwrap();
        assert_eq!(l.slots.as_ref().unwrap().available_permits(), 4);
        let mut s = l.rate.try_lock().unwrap().clone();
        // 200/min: one every 300 ms; the gap is not split.
        assert_eq!(schedule(&mut s, 0, &[1; 3]), [0, 300 * MS, 600 * MS]);
        assert_eq!(s.min_gap_ns, 10 * MS);
    }

    #[tokio::test]
    async fn unlimited_providers_never_wait() {
        let past = Some(Instant::now() - Duration::from_secs(1));
        let lim = Limiters::default();
        assert!(!lim.is_limited(0));
        lim.pause(3, Instant::now() + Duration::from_secs(3_600));
        let t = Instant::now();
        for i in 0..10_000 {
            assert!(lim.acquire(i % 7, u32::MAX, past).await.is_some());
        }
        // Providers without caps and indexes outside the plan, in a real plan's limiters.
        let lim = Limiters::from_limits(
            [
                &ProviderLimits::default(),
                &limits(|l| l.max_in_flight = Some(1)),
            ],
            3,
        );
        assert!(!lim.is_limited(0) && lim.is_limited(1) && !lim.is_limited(2));
        lim.pause(0, Instant::now() + Duration::from_secs(3_600));
        lim.pause(2, Instant::now() + Duration::from_secs(3_600));
        let held: Vec<_> =
            futures::future::join_all((0..100).map(|i| lim.acquire(i % 2 * 2, 1, None))).await;
        assert!(held.iter().all(Option::is_some));
        assert!(elapsed_ms(t) < 500.0, "{} ms", elapsed_ms(t));
    }

    #[tokio::test]
    async fn in_flight_cap_makes_a_third_wait_for_a_dropped_permit() {
        let lim = Arc::new(one(limits(|l| l.max_in_flight = Some(2))));
        let a = lim.acquire(0, 1, None).await.unwrap();
        let _b = lim.acquire(0, 1, None).await.unwrap();
        let third = tokio::spawn({
            let lim = lim.clone();
            async move { lim.acquire(0, 1, None).await.map(|_| Instant::now()) }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !third.is_finished(),
            "the third got a slot while two were held"
        );
        let freed = Instant::now();
        drop(a);
        let got = third.await.unwrap().unwrap();
        assert!(got >= freed && got - freed < Duration::from_millis(50));
    }

    #[tokio::test]
    async fn requests_per_min_600_sends_21_in_about_2_s() {
        let lim = one(limits(|l| l.requests_per_min = Some(600.0)));
        let t = Instant::now();
        for _ in 0..21 {
            lim.acquire(0, 1, None).await.unwrap();
        }
        let ms = elapsed_ms(t);
        assert!((1_990.0..2_200.0).contains(&ms), "{ms} ms");
    }

    #[tokio::test]
    async fn concurrent_acquirers_go_in_arrival_order_at_the_rate() {
        // 100/s over 10 tasks started together: in order, about 10 ms apart.
        let lim = Arc::new(one(limits(|l| l.requests_per_min = Some(6_000.0))));
        let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
        let t = Instant::now();
        let tasks: Vec<_> = (0..10)
            .map(|i| {
                let (lim, sent) = (lim.clone(), sent.clone());
                tokio::spawn(async move {
                    let _p = lim.acquire(0, 1, None).await.unwrap();
                    sent.lock().unwrap().push((i, Instant::now()));
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let sent = sent.lock().unwrap();
        assert_eq!(
            sent.iter().map(|s| s.0).collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
        let span = (sent[9].1 - t).as_secs_f64() * 1e3;
        assert!((89.0..200.0).contains(&span), "{span} ms");
    }

    #[tokio::test]
    async fn tokens_per_min_waits_for_the_tokens() {
        // 1000 tokens/s: 100-token requests every 100 ms.
        let lim = one(limits(|l| l.tokens_per_min = Some(60_000.0)));
        let t = Instant::now();
        for _ in 0..4 {
            lim.acquire(0, 100, None).await.unwrap();
        }
        let ms = elapsed_ms(t);
        assert!((299.0..400.0).contains(&ms), "{ms} ms");
    }

    #[tokio::test]
    async fn min_gap_spaces_sends() {
        let lim = Arc::new(one(limits(|l| l.min_gap_ms = Some(100))));
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let lim = lim.clone();
                tokio::spawn(async move {
                    let _p = lim.acquire(0, 1, None).await.unwrap();
                    Instant::now()
                })
            })
            .collect();
        let mut times = Vec::new();
        for task in tasks {
            times.push(task.await.unwrap());
        }
        times.sort();
        for w in times.windows(2) {
            assert!(
                w[1] - w[0] >= Duration::from_millis(99),
                "{:?}",
                w[1] - w[0]
            );
        }
        assert!(times[3] - times[0] < Duration::from_millis(450));
    }

    #[tokio::test]
    async fn pause_holds_a_limited_provider_until_its_end() {
        let lim = Limiters::from_limits(
            [
                &limits(|l| l.max_in_flight = Some(8)),
                &ProviderLimits::default(),
            ],
            1,
        );
        let t = Instant::now();
        lim.pause(0, t + Duration::from_millis(300));
        lim.pause(0, t + Duration::from_millis(100)); // pauses only extend
        lim.pause(1, t + Duration::from_millis(300)); // unlimited: ignored
        lim.acquire(1, 1, None).await.unwrap();
        assert!(elapsed_ms(t) < 50.0);
        // A deadline before the pause's end: dropped at the deadline.
        assert!(
            lim.acquire(0, 1, Some(t + Duration::from_millis(100)))
                .await
                .is_none()
        );
        let ms = elapsed_ms(t);
        assert!((99.0..200.0).contains(&ms), "{ms} ms");
        lim.acquire(0, 1, None).await.unwrap();
        let ms = elapsed_ms(t);
        assert!((299.0..400.0).contains(&ms), "{ms} ms");
    }

    #[tokio::test]
    async fn a_dropped_acquisition_takes_no_budget() {
        // 10/s and 1000 tokens/s.
        let lim = one(limits(|l| {
            l.requests_per_min = Some(600.0);
            l.tokens_per_min = Some(60_000.0);
        }));
        let t = Instant::now();
        lim.acquire(0, 10, None).await.unwrap();
        // Its turn would come at 100 ms: dropped at its 50 ms deadline.
        assert!(
            lim.acquire(0, 10, Some(t + Duration::from_millis(50)))
                .await
                .is_none()
        );
        let ms = elapsed_ms(t);
        assert!((49.0..95.0).contains(&ms), "{ms} ms");
        // A big request that cannot fit by its deadline does not delay a small one.
        assert!(
            lim.acquire(0, 900, Some(t + Duration::from_millis(60)))
                .await
                .is_none()
        );
        lim.acquire(0, 10, None).await.unwrap();
        let ms = elapsed_ms(t);
        assert!(
            (99.0..190.0).contains(&ms),
            "{ms} ms (not 200 ms: nothing was taken)"
        );
        // The in-flight cap: the deadline ends the wait, and the slot is not lost.
        let lim = one(limits(|l| l.max_in_flight = Some(1)));
        let t = Instant::now();
        let held = lim.acquire(0, 1, None).await.unwrap();
        assert!(
            lim.acquire(0, 1, Some(t + Duration::from_millis(50)))
                .await
                .is_none()
        );
        let ms = elapsed_ms(t);
        assert!((49.0..150.0).contains(&ms), "{ms} ms");
        drop(held);
        let t = Instant::now();
        lim.acquire(0, 1, None).await.unwrap();
        assert!(elapsed_ms(t) < 20.0);
    }

    #[tokio::test]
    async fn new_takes_this_agents_share_of_the_plan() {
        let text = r#"
[campaign]
name = "t"
regions = ["us-east"]
[rounds]
count = 4
interval_s = 10.0
gap_ms = 100
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-001"]
max_tokens = 48
[[providers]]
name = "capped"
base_url = "http://127.0.0.1:1/v1"
model_id = "m"
requests_per_min = 6000
[[providers]]
name = "free"
base_url = "http://127.0.0.1:1/v1"
model_id = "m"
"#;
        let plan = latmesh_core::campaign::load_toml_str(text, std::path::Path::new(".")).unwrap();
        let lim = Limiters::new(&plan, 3);
        assert!(lim.is_limited(0) && !lim.is_limited(1));
        // 6000/min over 3 agents: 2000/min here, one every 30 ms.
        let t = Instant::now();
        for _ in 0..11 {
            lim.acquire(0, 1, None).await.unwrap();
        }
        let ms = elapsed_ms(t);
        assert!((299.0..400.0).contains(&ms), "{ms} ms");
    }
}
