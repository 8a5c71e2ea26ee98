//! The seed papers' analyses as commands: `cram octal` (octal games and their periods).

use crate::Failure;
use clap::Args;
use cram_engine::octal::{proved_period, OctalGame};

/// Arguments of `cram octal`.
#[derive(Args, Debug)]
pub struct OctalArgs {
    /// The game's code, e.g. 0.07 (Dawson's Kayles = 1×n Cram), 0.77 (Kayles), 0.137.
    pub code: String,
    /// Compute heaps 0..=N.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub max: usize,
    /// Print JSON: {"code", "values", "period", "preperiod"} (period null when not proved).
    #[arg(long)]
    pub json: bool,
}

/// Runs `cram octal`.
pub fn run_octal(a: &OctalArgs) -> Result<(), Failure> {
    let game = OctalGame::parse(&a.code).map_err(Failure::input)?;
    if a.max > 1_000_000 {
        return Err(Failure::input("--max: at most 1000000 heaps"));
    }
    let values = game.values(a.max);
    let period = proved_period(&values, game.max_take());
    if a.json {
        let v = serde_json::json!({
            "code": game.to_string(),
            "values": values,
            "period": period.map(|p| p.period),
            "preperiod": period.map(|p| p.preperiod),
        });
        println!("{v}");
        return Ok(());
    }
    match period {
        Some(p) => println!(
            "{game}: period {} from heap {} (proved: the values repeat over heaps {}..{} and the \
             sufficient condition needs up to heap {})",
            p.period,
            p.preperiod,
            p.preperiod,
            a.max,
            2 * p.preperiod + 2 * p.period + game.max_take() - 1
        ),
        None => println!("{game}: no period proved within heaps 0..{}", a.max),
    }
    for (i, chunk) in values.chunks(20).enumerate() {
        let line: Vec<String> = chunk.iter().map(u32::to_string).collect();
        println!("{:>6}: {}", i * 20, line.join(" "));
    }
    Ok(())
}
