//! A model of knowledge with owners, to measure what it would save before any network is
//! built for it (docs/cluster.md, "Knowledge with owners, measured"). Workers in one
//! process, each with a table of its own as on separate machines (`cram solve --workers N
//! --separate-tables --model-owners …`), tell one store every fact their searches establish
//! about a region of at least some size, and ask it before they search such a region they
//! do not know exactly, as they would ask the region's owner. What a network adds is
//! modelled by two delays: a told fact is heard only some time after it was told, and an
//! answer reaches the asker only a round trip after it asked (the search goes on without
//! it meanwhile). The counters say how many messages that knowledge takes.

use cram_engine::facts::Facts;
use cram_engine::region::AnyRegion;
use cram_engine::solver::Remote;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which facts go through the store and what the network costs them:
/// `CELLS,NODES,DELAY_MS,LATENCY_US` on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnersSpec {
    /// Regions of at least this many cells are asked for and told.
    pub min_cells: u32,
    /// Facts that cost fewer nodes are not told.
    pub min_nodes: u64,
    /// A told fact is heard by others only this long after it was told.
    pub delay: Duration,
    /// An answer reaches the asker this long after it asked; zero: before its search
    /// goes on (a lookup as fast as its own table's).
    pub latency: Duration,
}

impl std::str::FromStr for OwnersSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<OwnersSpec, String> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let number = |i: usize| -> Result<u64, String> {
            parts[i].parse().map_err(|_| format!("{:?} is not a whole number (in {s:?})", parts[i]))
        };
        if parts.len() != 4 {
            return Err(format!("{s:?}: expected CELLS,NODES,DELAY_MS,LATENCY_US, e.g. 8,1,100,0"));
        }
        Ok(OwnersSpec {
            min_cells: u32::try_from(number(0)?).map_err(|_| format!("{s:?}: too many cells"))?,
            min_nodes: number(1)?,
            delay: Duration::from_millis(number(2)?),
            latency: Duration::from_micros(number(3)?),
        })
    }
}

/// What the store was asked and told during a run.
#[derive(Serialize, Debug, Default, Clone, PartialEq, Eq)]
pub struct OwnersReport {
    /// Asks sent (one per region and asker while an answer is awaited).
    pub asks: u64,
    /// Asks the store answered with facts (counted when it answers: with a latency, some
    /// answers arrive after the asker searched the region itself).
    pub answered: u64,
    /// Asks the store answered with the region's exact value (counted as `answered`).
    pub exact: u64,
    /// Answers with facts that reached a search which then read them: `answered` with a
    /// latency of zero; fewer with a latency.
    pub used: u64,
    /// Facts told.
    pub tells: u64,
    /// Regions the store holds facts about at the end.
    pub keys: u64,
}

/// What the store holds of a region.
struct Entry {
    /// The facts the others have heard, and the most nodes any of them cost.
    heard: (Facts, u64),
    /// Facts told less than the delay ago, with when each was told: each is heard once its
    /// own delay has passed (a later tell does not hold back an earlier one).
    pending: Vec<(Facts, u64, Instant)>,
}

impl Entry {
    /// Moves to `heard` the pending facts told at least `delay` ago.
    fn hear(&mut self, delay: Duration) {
        let heard = &mut self.heard;
        self.pending.retain(|&(facts, nodes, told)| {
            let due = told.elapsed() >= delay;
            if due {
                *heard = (heard.0.merge(facts), heard.1.max(nodes));
            }
            !due
        });
    }
}

/// Locks over the store, so that the workers' threads rarely wait for each other.
const SHARDS: usize = 64;

/// The store the workers of one process share (see the module documentation); clones
/// share it.
#[derive(Clone)]
pub struct OwnersModel {
    spec: OwnersSpec,
    shards: Arc<Vec<Mutex<HashMap<AnyRegion, Entry>>>>,
    asks: Arc<AtomicU64>,
    answered: Arc<AtomicU64>,
    exact: Arc<AtomicU64>,
    used: Arc<AtomicU64>,
    tells: Arc<AtomicU64>,
}

impl OwnersModel {
    /// An empty store for `spec`.
    pub fn new(spec: OwnersSpec) -> OwnersModel {
        OwnersModel {
            spec,
            shards: Arc::new((0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect()),
            asks: Arc::default(),
            answered: Arc::default(),
            exact: Arc::default(),
            used: Arc::default(),
            tells: Arc::default(),
        }
    }

    /// What a solver is given: its link to the store, and the least cells and nodes of the
    /// facts that go through it ([`cram_engine::Solver::set_remote`]).
    pub fn link(&self) -> (Box<dyn Remote>, u32, u64) {
        (Box::new(Link::new(self.clone())), self.spec.min_cells, self.spec.min_nodes)
    }

    /// The counters so far.
    pub fn report(&self) -> OwnersReport {
        let keys = self.shards.iter().map(|s| s.lock().expect("owners lock").len() as u64).sum();
        OwnersReport {
            asks: self.asks.load(Ordering::Relaxed),
            answered: self.answered.load(Ordering::Relaxed),
            exact: self.exact.load(Ordering::Relaxed),
            used: self.used.load(Ordering::Relaxed),
            tells: self.tells.load(Ordering::Relaxed),
            keys,
        }
    }

    fn shard(&self, r: &AnyRegion) -> &Mutex<HashMap<AnyRegion, Entry>> {
        let mut h = DefaultHasher::new();
        r.hash(&mut h);
        &self.shards[(h.finish() % SHARDS as u64) as usize]
    }

    /// The owner's answer now: the facts heard of `r` (told at least the delay ago).
    fn answer(&self, r: &AnyRegion) -> Option<(Facts, u64)> {
        self.asks.fetch_add(1, Ordering::Relaxed);
        let mut shard = self.shard(r).lock().expect("owners lock");
        let entry = shard.get_mut(r)?;
        entry.hear(self.spec.delay);
        let (facts, nodes) = entry.heard;
        if facts == Facts::UNKNOWN {
            return None;
        }
        self.answered.fetch_add(1, Ordering::Relaxed);
        if facts.value().is_some() {
            self.exact.fetch_add(1, Ordering::Relaxed);
        }
        Some((facts, nodes))
    }

    fn tell(&self, r: &AnyRegion, facts: Facts, nodes: u64) {
        self.tells.fetch_add(1, Ordering::Relaxed);
        let mut shard = self.shard(r).lock().expect("owners lock");
        let entry = shard.entry(*r).or_insert(Entry { heard: (Facts::UNKNOWN, 0), pending: Vec::new() });
        let known = entry.pending.iter().fold(entry.heard.0, |known, p| known.merge(p.0));
        if known.merge(facts) != known {
            entry.pending.push((facts, nodes, Instant::now()));
            entry.hear(self.spec.delay);
        }
    }

    /// An answer as a search reads it, counted in `used` if it holds facts.
    fn read(&self, answer: Option<(Facts, u64)>) -> Option<(Facts, u64)> {
        if answer.is_some() {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
        answer
    }
}

/// How long an answer that has arrived waits to be used before it is forgotten: what keeps
/// a link's memory to the answers of the last second (a real near cache is bounded too).
const FORGET: Duration = Duration::from_secs(1);

/// One solver's link to the store: with a latency, the answers on their way to it.
struct Link {
    model: OwnersModel,
    /// Per region asked: the answer and when it arrives.
    awaited: HashMap<AnyRegion, (Option<(Facts, u64)>, Instant)>,
    /// The regions of `awaited` in the order their answers arrive (the latency is fixed).
    arrivals: VecDeque<(Instant, AnyRegion)>,
}

impl Link {
    fn new(model: OwnersModel) -> Link {
        Link { model, awaited: HashMap::new(), arrivals: VecDeque::new() }
    }

    /// Forgets the answers that arrived more than [`FORGET`] ago and were not used.
    fn forget(&mut self, now: Instant) {
        while let Some(&(arrives, r)) = self.arrivals.front() {
            if arrives + FORGET > now {
                break;
            }
            self.arrivals.pop_front();
            if self.awaited.get(&r).is_some_and(|a| a.1 == arrives) {
                self.awaited.remove(&r);
            }
        }
    }
}

impl Remote for Link {
    fn ask(&mut self, r: &AnyRegion) -> Option<(Facts, u64)> {
        if self.model.spec.latency.is_zero() {
            return self.model.read(self.model.answer(r));
        }
        let now = Instant::now();
        self.forget(now);
        match self.awaited.get(r) {
            Some(&(answer, arrives)) if arrives <= now => {
                self.awaited.remove(r);
                self.model.read(answer)
            }
            Some(_) => None,
            None => {
                let answer = self.model.answer(r);
                let arrives = now + self.model.spec.latency;
                self.awaited.insert(*r, (answer, arrives));
                self.arrivals.push_back((arrives, *r));
                None
            }
        }
    }

    fn tell(&mut self, r: &AnyRegion, facts: Facts, nodes: u64) {
        self.model.tell(r, facts, nodes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cram_engine::{Board, Config, DbSet, Mode, Solver};

    fn solver(model: Option<&OwnersModel>) -> Solver {
        let mut s = Solver::new(&Config { tt_bytes: 1 << 20, pairing: true }, Arc::new(DbSet::default()));
        s.set_remote(model.map(OwnersModel::link));
        s
    }

    #[test]
    fn a_spec_reads_four_numbers_and_says_what_is_wrong() {
        let spec: OwnersSpec = "8, 1,100,250".parse().unwrap();
        assert_eq!(spec.min_cells, 8);
        assert_eq!(spec.min_nodes, 1);
        assert_eq!(spec.delay, Duration::from_millis(100));
        assert_eq!(spec.latency, Duration::from_micros(250));
        assert!("8,1,100".parse::<OwnersSpec>().unwrap_err().contains("CELLS,NODES,DELAY_MS,LATENCY_US"));
        assert!("8,x,100,0".parse::<OwnersSpec>().unwrap_err().contains("\"x\""));
    }

    #[test]
    fn a_second_solver_hears_the_first_ones_facts_and_searches_less() {
        let model = OwnersModel::new("6,1,0,0".parse().unwrap());
        let board = Board::parse("4x5").unwrap();
        let alone = solver(None).solve(&board, Mode::Nimber).unwrap();
        let (mut one, mut two) = (solver(Some(&model)), solver(Some(&model)));
        let first = one.solve(&board, Mode::Nimber).unwrap();
        let told = model.report();
        assert!(told.tells > 0 && told.keys > 0, "{told:?}");
        let second = two.solve(&board, Mode::Nimber).unwrap();
        assert_eq!((first.nimber, second.nimber), (alone.nimber, alone.nimber));
        assert!(two.nodes() * 10 < one.nodes(), "{} nodes after {}", two.nodes(), one.nodes());
        assert!(model.report().exact > told.exact);
    }

    #[test]
    fn facts_are_heard_only_after_the_delay_and_answers_arrive_after_the_latency() {
        let region = cram_engine::solver::board_regions(&Board::parse("4x4").unwrap()).0[0];
        let facts = Facts::exact(1);
        let late = OwnersModel::new("4,1,60000,0".parse().unwrap());
        late.tell(&region, facts, 100);
        assert_eq!(late.link().0.ask(&region), None, "told a minute too early to be heard");
        let soon = OwnersModel::new("4,1,1000,0".parse().unwrap());
        soon.tell(&region, Facts::excluding(0), 10);
        std::thread::sleep(Duration::from_millis(1100));
        soon.tell(&region, facts, 100);
        let mut link = soon.link().0;
        assert_eq!(link.ask(&region), Some((Facts::excluding(0), 10)), "a later tell holds back no earlier one");
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(link.ask(&region), Some((facts, 100)));
        assert_eq!((soon.report().answered, soon.report().used), (2, 2));
        let far = OwnersModel::new("4,1,0,500000".parse().unwrap());
        far.tell(&region, facts, 100);
        let mut link = Link::new(far.clone());
        assert_eq!(link.ask(&region), None, "the answer is on its way");
        assert_eq!(link.ask(&region), None, "still on its way, and asked once");
        assert_eq!(far.report().asks, 1);
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(link.ask(&region), Some((facts, 100)));
        assert_eq!((far.report().answered, far.report().used), (1, 1));
        assert_eq!(link.ask(&region), None, "asked again: a new answer on its way");
        std::thread::sleep(FORGET + Duration::from_millis(600));
        let other = cram_engine::solver::board_regions(&Board::parse("4x5").unwrap()).0[0];
        assert_eq!(link.ask(&other), None);
        assert_eq!(far.report().asks, 3);
        assert_eq!((far.report().answered, far.report().used), (2, 1), "one answer was never read");
        assert_eq!(link.awaited.len(), 1, "the answers unused for a second are forgotten");
        assert!(link.awaited.contains_key(&other));
    }
}
