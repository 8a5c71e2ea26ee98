use cram_engine::*;
use std::sync::Arc;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = if args.get(2).map(|s| s.as_str()) == Some("o") { Mode::Outcome } else { Mode::Nimber };
    let pairing = args.get(3).map(|s| s.as_str()) != Some("np");
    let b = Board::parse(&args[1]).unwrap();
    let mut s = Solver::new(&Config { pairing, ..Config::default() }, Arc::new(DbSet::default()));
    let t = std::time::Instant::now();
    let r = s.solve(&b, mode).unwrap();
    println!(
        "{} {:?} nodes={} t={:.3}s tt={:?} bytes={}",
        b,
        r,
        s.nodes(),
        t.elapsed().as_secs_f64(),
        s.table_stats(),
        s.table_bytes()
    );
}
