//! The seed harness of the model tests (`exactly_once.rs`, `ledger.rs`):
//! one generated history per seed, a fixed committed set of seeds in the test command, fresh
//! random seeds only through `scripts/model-soak.sh`, and a failing seed shrunk to a minimal input
//! and printed with the command that replays it.

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::fmt::Debug;

/// The seeds the test command runs, one generated history per seed. Committed, so that a model
/// test passes or fails the same way on every machine and every run; fresh seeds are drawn only
/// by `scripts/model-soak.sh`, and a seed it reports failing is replayed with `KBQ_MODEL_SEED`.
pub const COMMITTED_SEEDS: std::ops::Range<u64> = 0..3000;

/// A model test's histories and how one runs: `run` panics on a broken invariant.
pub struct Suite<S: Strategy> {
    /// The test binary (`cargo test --test <test>`) and the filter that selects its fixed-seed
    /// test, for the replay command a failure prints.
    pub test: &'static str,
    pub filter: &'static str,
    pub histories: S,
    pub run: fn(&S::Value),
}

impl<S: Strategy> Suite<S>
where
    S::Value: Debug,
{
    /// The history seed `seed` generates, without running it.
    pub fn history(&self, seed: u64) -> S::Value {
        history_of(&self.histories, seed)
    }

    fn check(&self, seed: u64) -> Result<(), String> {
        check_seed(&self.histories, seed, &self.run)
    }

    fn failing(&self, seed: u64, why: &str) -> String {
        failing_seed(self.test, self.filter, seed, why)
    }

    /// Every committed seed, or only `KBQ_MODEL_SEED` when it is set (to replay a failure): the
    /// first failing seed panics with its shrunk input and its replay command.
    pub fn run_committed_seeds(&self) {
        for seed in seeds_to_run(COMMITTED_SEEDS) {
            if let Err(why) = self.check(seed) {
                panic!("{}", self.failing(seed, &why));
            }
        }
    }

    /// Fresh random seeds for as long as `scripts/model-soak.sh` asks.
    pub fn soak(&self) {
        soak(&|seed| self.check(seed), &|seed, why| {
            self.failing(seed, why)
        });
    }
}

/// The random source of seed `seed`: the same history on every machine and proptest version
/// (ChaCha is proptest's portable algorithm).
fn seeded_rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

fn history_of<S: Strategy>(strategy: &S, seed: u64) -> S::Value {
    let mut runner = TestRunner::new_with_rng(Config::default(), seeded_rng(seed));
    strategy
        .new_tree(&mut runner)
        .expect("the strategy never rejects")
        .current()
}

/// Runs `h`; a broken invariant comes back as the panic's message.
fn outcome_of<H>(h: &H, run: &dyn Fn(&H)) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(h))).map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".into())
    })
}

thread_local! {
    /// Set while this thread shrinks a failure: the panics of its attempts are not printed.
    static SHRINKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs the history of seed `seed`; on a failure, shrinks it (proptest's own simplify and
/// complicate steps) and returns the reason with the minimal input, ready to be kept as a
/// regression test.
fn check_seed<S>(strategy: &S, seed: u64, run: &dyn Fn(&S::Value)) -> Result<(), String>
where
    S: Strategy,
    S::Value: Debug,
{
    let mut runner = TestRunner::new_with_rng(Config::default(), seeded_rng(seed));
    let mut tree = strategy
        .new_tree(&mut runner)
        .expect("the strategy never rejects");
    let Err(first) = outcome_of(&tree.current(), run) else {
        return Ok(());
    };
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| {
        let print = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !SHRINKING.with(|s| s.get()) {
                print(info);
            }
        }));
    });
    SHRINKING.with(|s| s.set(true));
    let (mut reason, mut minimal) = (first, tree.current());
    let mut steps = 0;
    if tree.simplify() {
        while steps < 20_000 {
            steps += 1;
            let h = tree.current();
            let shrunk = match outcome_of(&h, run) {
                Err(why) => {
                    (reason, minimal) = (why, h);
                    tree.simplify()
                }
                Ok(()) => tree.complicate(),
            };
            if !shrunk {
                break;
            }
        }
    }
    SHRINKING.with(|s| s.set(false));
    Err(format!(
        "{reason}\nminimal failing input ({steps} shrink steps): {minimal:#?}"
    ))
}

/// The message of a failing seed: the seed and how to replay it.
fn failing_seed(test: &str, filter: &str, seed: u64, why: &str) -> String {
    format!(
        "model seed {seed} fails; replay it with \
         `KBQ_MODEL_SEED={seed} cargo test -p kbq-core --test {test} {filter}`\n{why}"
    )
}

/// The committed seeds, or only `KBQ_MODEL_SEED` when it is set (to replay a failure).
fn seeds_to_run(committed: std::ops::Range<u64>) -> Vec<u64> {
    match std::env::var("KBQ_MODEL_SEED") {
        Ok(seed) => vec![seed.parse().expect("KBQ_MODEL_SEED is a u64")],
        Err(_) => committed.collect(),
    }
}

/// Fresh random seeds for as long as asked (`scripts/model-soak.sh`): `KBQ_MODEL_SOAK_SEEDS`
/// seeds, or seeds until `KBQ_MODEL_SOAK_MINUTES` have passed. Every failing seed is printed
/// (`FAILING SEED <seed>`) and the run goes on; it fails at the end if any did.
fn soak(check: &dyn Fn(u64) -> Result<(), String>, failing: &dyn Fn(u64, &str) -> String) {
    use std::hash::{BuildHasher, Hasher};
    use std::time::{Duration, Instant};
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| v.parse::<u64>().expect(name))
    };
    let max_seeds = env("KBQ_MODEL_SOAK_SEEDS");
    let until = env("KBQ_MODEL_SOAK_MINUTES").map(|m| Instant::now() + Duration::from_secs(m * 60));
    assert!(
        max_seeds.is_some() || until.is_some(),
        "set KBQ_MODEL_SOAK_SEEDS or KBQ_MODEL_SOAK_MINUTES"
    );
    let started = Instant::now();
    let mut last_report = started;
    let (mut passed, mut failed) = (0u64, Vec::new());
    // A seed that never ends is a failure too, but cannot be stopped from inside: a watcher
    // prints the seed that has run for a minute, with the command that replays it.
    let current = std::sync::Arc::new(std::sync::Mutex::new((0u64, Instant::now(), false)));
    let watched = std::sync::Arc::downgrade(&current);
    std::thread::spawn(move || {
        while let Some(current) = watched.upgrade() {
            {
                let mut c = current.lock().expect("the soak's current seed");
                if !c.2 && c.1.elapsed() > Duration::from_secs(60) {
                    c.2 = true;
                    eprintln!(
                        "SLOW SEED {}: running for over 60 s (a history that never ends is a \
                         failure; replay it with KBQ_MODEL_SEED={})",
                        c.0, c.0
                    );
                }
            }
            drop(current);
            std::thread::sleep(Duration::from_secs(5));
        }
    });
    while max_seeds.is_none_or(|n| passed + (failed.len() as u64) < n)
        && until.is_none_or(|u| Instant::now() < u)
    {
        // The standard library's randomly keyed hasher: a fresh, unpredictable seed per draw.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(started.elapsed().as_nanos());
        let seed = hasher.finish();
        *current.lock().expect("the soak's current seed") = (seed, Instant::now(), false);
        match check(seed) {
            Ok(()) => passed += 1,
            Err(why) => {
                eprintln!("FAILING SEED {seed}\n{}", failing(seed, &why));
                failed.push(seed);
            }
        }
        if last_report.elapsed() >= Duration::from_secs(60) {
            last_report = Instant::now();
            eprintln!(
                "soak: {passed} seeds passed, {} failed, {:.0} s",
                failed.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    eprintln!(
        "soak done: {passed} seeds passed, {} failed {failed:?}, {:.0} s",
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
}
