//! Event-log replay: whatever bytes a log holds, reading it either names a damaged line or
//! gives events (a torn last line aside, every line keeps the seal chain), and replaying
//! those events into a scheduler never panics and leaves it able to plan, search and report
//! its status.
#![no_main]

use cram_coordinator::events::read_events;
use cram_coordinator::scheduler::{CheckPolicy, Scheduler};
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
    let mut sched = Scheduler::new(top, Mode::Nimber, Duration::from_secs(10), 1000, CheckPolicy { sample_one_in: 3, decisive: true }, false);
    sched.replay(&read.replay.events);
    let _ = sched.answer();
    let _ = sched.results_digest();
    let now = Instant::now();
    if let Some(q) = sched.next_search(true) {
        for e in sched.searched(q, cram_engine::Facts::UNKNOWN, 1, 1) {
            sched.apply(&e);
        }
    }
    let status = sched.status("3x7", Duration::from_secs(1), 0.0, now);
    let _ = serde_json::to_string(&status).expect("status serialises");
});
