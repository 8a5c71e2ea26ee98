//! Certificates of Cram values, and their checker.
//!
//! A certificate proves the value of a position: it holds facts "region R has nimber v"
//! (equivalently, "R + *v is a loss for the player to move") on canonical regions, with
//! hints that name, for each option of R that is not settled by the other facts, a reply
//! that is. [`check`] verifies one by the rules of the game alone, with its own move
//! generation, decomposition into regions and memoised mex for small regions
//! ([`rules`]); it shares no code with the solver, uses no transposition table, database,
//! pairing shortcut or pruning. [`format`] is the file layout (docs/certificates.md).

#![warn(missing_docs)]

pub mod check;
pub mod format;
pub mod rules;

pub use check::{check, Checked, Rejection};
pub use format::{Certificate, Claim, Fact, FormatError};
pub use rules::Shape;
