//! The Cram solver engine: positions as bitboards, canonical regions, the nimber search with
//! its transposition table, the half-turn pairing certificate and endgame databases.
//!
//! Cram is impartial, so every position is worth a nimber; a position split into regions is
//! worth the XOR of the regions. The engine answers "what is the nimber of this position"
//! and "is this position a loss for the player to move" exactly. It does no async work and
//! no I/O besides reading and writing database files.
//!
//! ```
//! use cram_engine::{Board, Config, DbSet, Mode, Solver};
//! use std::sync::Arc;
//!
//! let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
//! let board = Board::parse("3x6").unwrap();
//! let solution = solver.solve(&board, Mode::Nimber).unwrap();
//! assert_eq!(solution.outcome, cram_engine::Outcome::First);
//! assert_eq!(solution.nimber, Some(4));
//! ```

#![warn(missing_docs)]

pub mod bits;
pub mod board;
pub mod db;
pub mod facts;
pub mod octal;
pub mod options;
pub mod pairing;
pub mod parallel;
pub mod proof;
pub mod question;
pub mod region;
pub mod shapes;
pub mod solver;
pub mod table;

pub use board::{Board, BoardError};
pub use db::{Database, DbError, DbSet};
pub use facts::{Facts, Outcome};
pub use parallel::ParallelSolver;
pub use question::{Query, Question, SharedFact};
pub use solver::{BadMode, Config, Interrupted, Mode, Search, Solution, Solver};
