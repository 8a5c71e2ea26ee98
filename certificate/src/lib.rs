//! Certificates of Cram values, and their checker.
//!
//! A certificate proves the value of a position: it holds facts "region R has nimber v"
//! (equivalently, "R + *v is a loss for the player to move") on canonical regions, with
//! hints that name, for each option of R that is not settled by the other facts, a reply
//! that is. [`check`] verifies one by the rules of the game alone, with its own move
//! generation, decomposition into regions and memoised mex for small regions
//! ([`rules`]); it shares no code with the solver, uses no transposition table, database,
//! pairing shortcut or pruning. [`format`] is the file layout (docs/certificates.md).
//! [`Ledger`] verifies proofs one at a time by the same rule (a cluster's coordinator
//! checks each worker's proof as it arrives).

#![warn(missing_docs)]

pub mod check;
pub mod format;
pub mod ledger;
pub mod rules;
pub mod varint;

pub use check::{check, Checked, Rejection};
pub use format::{Certificate, Claim, Fact, FormatError};
pub use ledger::{ExportedFact, Ledger};
pub use rules::Shape;
