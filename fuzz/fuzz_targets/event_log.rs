//! Event-log replay: whatever bytes a log holds, reading it either names a damaged line or
//! gives events, and replaying those events into a scheduler never panics and leaves it
//! able to plan, report its status and mirror its facts.
#![no_main]

use cram_coordinator::state::{Checks, Scheduler};
use cram_coordinator::store::read_events;
use cram_coordinator::top::Top;
use cram_engine::{Board, DbSet, Mode};
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let Ok(read) = read_events(data) else { return };
    if let Some(at) = read.torn_at {
        assert!(at as usize <= data.len());
    }
    let board = Board::parse("3x7").expect("a board");
    let top = Top::new(&board, Mode::Nimber, false, Arc::new(DbSet::default()), 1, false);
    let checks = Checks { trust_after: 2, sample_one_in: 3 };
    let mut sched = Scheduler::new(top, Mode::Nimber, Duration::from_secs(10), checks);
    sched.replay(&read.replay.events);
    let _ = sched.answer();
    let _ = sched.index_facts();
    let now = Instant::now();
    let _ = sched.next_settlement(now + Duration::from_secs(60));
    let status = sched.status("3x7", Duration::from_secs(1), 0.0, now);
    let _ = serde_json::to_string(&status).expect("status serialises");
});
