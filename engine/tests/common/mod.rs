//! Reference code shared by the engine's tests: a brute-force Cram solver that knows nothing
//! of regions, canonical forms or databases, and a small deterministic random generator.

#![allow(dead_code)]

use std::collections::HashMap;

/// Nimber of every subset of an R×C board, by the mex rule in increasing mask order.
pub fn all_values(rows: u32, cols: u32) -> Vec<u8> {
    let n = rows * cols;
    let mut v = vec![0u8; 1 << n];
    for m in 0..1u32 << n {
        let mut seen = 0u64;
        for i in 0..n {
            if m >> i & 1 == 0 {
                continue;
            }
            if i % cols + 1 < cols && m >> (i + 1) & 1 == 1 {
                seen |= 1 << v[(m & !(3 << i)) as usize];
            }
            if i + cols < n && m >> (i + cols) & 1 == 1 {
                seen |= 1 << v[(m & !(1 << i | 1 << (i + cols))) as usize];
            }
        }
        v[m as usize] = (!seen).trailing_zeros() as u8;
    }
    v
}

/// Nimber of one position by memoised recursion over masks (boards up to 128 cells).
pub fn brute(mask: u128, rows: u32, cols: u32, memo: &mut HashMap<u128, u8>) -> u8 {
    if let Some(&v) = memo.get(&mask) {
        return v;
    }
    let n = rows * cols;
    let mut seen = 0u64;
    for i in 0..n {
        if mask >> i & 1 == 0 {
            continue;
        }
        if i % cols + 1 < cols && mask >> (i + 1) & 1 == 1 {
            seen |= 1 << brute(mask & !(3 << i), rows, cols, memo);
        }
        if i + cols < n && mask >> (i + cols) & 1 == 1 {
            seen |= 1 << brute(mask & !(1 << i | 1 << (i + cols)), rows, cols, memo);
        }
    }
    let v = (!seen).trailing_zeros() as u8;
    memo.insert(mask, v);
    v
}

/// A linear congruential generator: deterministic test data without dependencies.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next pseudo-random number (47 bits).
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 17
    }
}
