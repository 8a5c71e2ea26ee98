//! Octal games (Guy–Smith): heaps of tokens; code digit `d_i` says what removing `i` tokens
//! may leave — bit 1: no heap (the whole heap taken), bit 2: one heap, bit 4: two heaps.
//! Dawson's Kayles, `·07`, is Cram on a 1×n strip. Values come from the octal recursion,
//! and a period is *proved* by the standard sufficient condition: if `G(n+p) = G(n)` for
//! every `n` with `n0 ≤ n < 2·n0 + p + k` (k = the largest number of tokens a move removes),
//! it holds for every `n ≥ n0`.

use std::fmt;

/// An octal game: `digits[i-1]` is the digit for removing `i` tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OctalGame {
    digits: Vec<u8>,
}

/// Why an octal code was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {0:?} as an octal game code: expected a point and octal digits, e.g. 0.07, .07 or ·137")]
pub struct OctalError(pub String);

impl OctalGame {
    /// Parses `0.07`, `.07`, `·07` or `0·137` (digits 0–7 after the point, at least one
    /// nonzero).
    pub fn parse(code: &str) -> Result<OctalGame, OctalError> {
        let bad = || OctalError(code.to_string());
        let t = code.trim();
        let rest = t.strip_prefix('0').unwrap_or(t);
        let digits = rest.strip_prefix('.').or_else(|| rest.strip_prefix('·')).ok_or_else(bad)?;
        let mut d: Vec<u8> =
            digits.chars().map(|c| c.to_digit(8).map(|x| x as u8)).collect::<Option<_>>().ok_or_else(bad)?;
        while d.last() == Some(&0) {
            d.pop();
        }
        if d.is_empty() {
            return Err(bad());
        }
        Ok(OctalGame { digits: d })
    }

    /// The largest number of tokens one move removes.
    pub fn max_take(&self) -> usize {
        self.digits.len()
    }

    /// Nim values of heaps 0..=max.
    pub fn values(&self, max: usize) -> Vec<u32> {
        let mut g = vec![0u32; max + 1];
        let mut seen = Vec::new();
        for n in 1..=max {
            seen.clear();
            for (i, &d) in self.digits.iter().enumerate() {
                let take = i + 1;
                if take > n {
                    break;
                }
                let left = n - take;
                if d & 1 == 1 && left == 0 {
                    seen.push(0);
                }
                if d & 2 == 2 && left > 0 {
                    seen.push(g[left]);
                }
                if d & 4 == 4 && left >= 2 {
                    for a in 1..=left / 2 {
                        seen.push(g[a] ^ g[left - a]);
                    }
                }
            }
            seen.sort_unstable();
            seen.dedup();
            g[n] = seen.iter().enumerate().find(|&(i, &v)| i as u32 != v).map_or(seen.len() as u32, |(i, _)| i as u32);
        }
        g
    }
}

impl fmt::Display for OctalGame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0.")?;
        self.digits.iter().try_for_each(|d| write!(f, "{d}"))
    }
}

/// A proved period: `G(n + period) = G(n)` for every `n ≥ preperiod`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    /// The period p.
    pub period: usize,
    /// The first heap n0 from which the values repeat.
    pub preperiod: usize,
}

/// The shortest period (and for it the earliest start) that the values computed prove by the
/// sufficient condition, if any.
pub fn proved_period(values: &[u32], max_take: usize) -> Option<Period> {
    let n = values.len();
    for p in 1..n {
        // The earliest n0 from which G(m + p) = G(m) holds for every computed m.
        let mut n0 = n - p;
        while n0 > 0 && values[n0 - 1] == values[n0 - 1 + p] {
            n0 -= 1;
        }
        // Checked for every m with m + p < n; the theorem needs m < 2·n0 + p + k.
        if 2 * n0 + 2 * p + max_take <= n {
            return Some(Period { period: p, preperiod: n0 });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_codes() {
        assert_eq!(OctalGame::parse("0.07").unwrap().to_string(), "0.07");
        assert_eq!(OctalGame::parse(".137").unwrap().max_take(), 3);
        assert_eq!(OctalGame::parse("·770").unwrap().to_string(), "0.77");
        for bad in ["07", "0.", "0.08", "0.000", "x.1", ""] {
            assert!(OctalGame::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dawsons_kayles_has_period_34() {
        let g = OctalGame::parse("0.07").unwrap();
        let v = g.values(2000);
        // 1×n Cram, seed 000 Table 1, n = 1..29.
        let cram = [0, 1, 1, 2, 0, 3, 1, 1, 0, 3, 3, 2, 2, 4, 0, 5, 2, 2, 3, 3, 0, 1, 1, 3, 0, 2, 1, 1, 0];
        assert_eq!(&v[1..30], &cram);
        let p = proved_period(&v, g.max_take()).unwrap();
        assert_eq!(p.period, 34);
        for n in p.preperiod..=2000 - 34 {
            assert_eq!(v[n], v[n + 34]);
        }
        assert_ne!(v[p.preperiod - 1], v[p.preperiod - 1 + 34]);
        assert_eq!(p.preperiod, 53);
    }

    #[test]
    fn other_octal_games_match_published_values() {
        // Kayles (·77): period 12, last exception at heap 70.
        let kayles = OctalGame::parse("0.77").unwrap();
        let v = kayles.values(400);
        assert_eq!(&v[..12], &[0, 1, 2, 3, 1, 4, 3, 2, 1, 4, 2, 6]);
        assert_eq!(proved_period(&v, 2), Some(Period { period: 12, preperiod: 71 }));
        // Dawson's chess (·137) is Dawson's Kayles shifted by one heap.
        let chess = OctalGame::parse("0.137").unwrap().values(300);
        let dk = OctalGame::parse("0.07").unwrap().values(301);
        assert_eq!(&chess[..], &dk[1..]);
        // ·3: take one or two tokens from the end of a heap: values n mod 3.
        let v = OctalGame::parse("0.33").unwrap().values(50);
        assert!(v.iter().enumerate().all(|(n, &g)| g == (n % 3) as u32));
        // Too few values computed: no proof.
        assert_eq!(proved_period(&OctalGame::parse("0.07").unwrap().values(100), 2), None);
    }
}
