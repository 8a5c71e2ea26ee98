//! The questions a search answers about one canonical region, and their stable names: the
//! vocabulary a cluster's coordinator and workers share (a work unit is a [`Question`]).
//!
//! A question asks a region for its exact nimber, or whether its nimber is `k` (is
//! `R + *k` a loss for the player to move). Its name is the region's key and the query,
//! `3x7:1fffff=` or `3x7:1fffff?2`: the same in every run, so answers match questions
//! across restarts. [`SharedFact`] is what a search learnt about a region at some cost,
//! worth handing to another machine.

use crate::facts::Facts;
use crate::region::AnyRegion;
use crate::solver::{Res, Solver};
use std::fmt;
use std::str::FromStr;

/// What is asked of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Query {
    /// The exact nimber.
    Nimber,
    /// Is the nimber this value?
    IsValue(u8),
}

impl Query {
    /// True when `facts` answer the question.
    pub fn answered_by(self, facts: Facts) -> bool {
        match self {
            Query::Nimber => facts.value().is_some(),
            Query::IsValue(k) => facts.value().is_some() || facts.rules_out(k),
        }
    }

    /// The part of `facts` that answers the question: the value, or `g ≠ k` (values of 32
    /// and above cannot be held apart from the rest, and are kept whole). What a second
    /// answer to the same question can be compared with.
    pub fn answer_only(self, facts: Facts) -> Facts {
        match (self, facts.value()) {
            (Query::IsValue(k), v) if k < 32 && v != Some(k) => Facts { excluded: 1 << k, upper: u8::MAX },
            (_, Some(v)) if v < 32 => Facts::exact(v),
            _ => facts,
        }
    }
}

/// A question about one canonical region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Question {
    /// The canonical region asked about.
    pub region: AnyRegion,
    /// What is asked.
    pub query: Query,
}

impl Question {
    /// Asks the region's exact nimber.
    pub fn nimber(region: AnyRegion) -> Question {
        Question { region, query: Query::Nimber }
    }
}

impl fmt::Display for Question {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.query {
            Query::Nimber => write!(f, "{}=", self.region.key()),
            Query::IsValue(k) => write!(f, "{}?{k}", self.region.key()),
        }
    }
}

/// A name that is not a question's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} names no question (a region key followed by `=` or `?k`)")]
pub struct BadQuestion(pub String);

impl FromStr for Question {
    type Err = BadQuestion;

    fn from_str(s: &str) -> Result<Question, BadQuestion> {
        let bad = || BadQuestion(s.chars().take(80).collect());
        let (key, query) = match s.strip_suffix('=') {
            Some(key) => (key, Query::Nimber),
            None => {
                let (key, k) = s.rsplit_once('?').ok_or_else(bad)?;
                (key, Query::IsValue(k.parse().map_err(|_| bad())?))
            }
        };
        Ok(Question { region: AnyRegion::from_key(key).ok_or_else(bad)?, query })
    }
}

/// In logs a question is its name.
#[cfg(feature = "serde")]
impl serde::Serialize for Question {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Question {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Question, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// What a search learnt about a region at a cost: the facts, and the search nodes they
/// took. A cluster's workers hand such facts to each other, costly ones first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedFact {
    /// The region.
    pub region: AnyRegion,
    /// What is known of its nimber.
    pub facts: Facts,
    /// The search nodes it cost.
    pub nodes: u64,
}

impl SharedFact {
    /// True when the facts leave the region a value (`g ≤ cells / 2`, some value not
    /// excluded): facts that do not can only come from a faulty search.
    pub fn is_possible(&self) -> bool {
        !self.facts.is_contradictory() && self.facts.floor() as u32 <= self.region.cells() / 2
    }
}

/// In logs a shared fact is `[region key, excluded, upper, nodes]`.
#[cfg(feature = "serde")]
impl serde::Serialize for SharedFact {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.region.key(), self.facts.excluded, self.facts.upper, self.nodes).serialize(s)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for SharedFact {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SharedFact, D::Error> {
        let (key, excluded, upper, nodes) = <(String, u32, u8, u64)>::deserialize(d)?;
        let region = AnyRegion::from_key(&key)
            .ok_or_else(|| serde::de::Error::custom(format!("{key:?} is not a region key")))?;
        Ok(SharedFact { region, facts: Facts { excluded, upper }, nodes })
    }
}

impl Solver {
    /// Answers `q` by search: the facts it establishes about the region (the value, or
    /// `g ≠ k`), merged with whatever else the table then knows of it.
    pub fn answer(&mut self, q: Question) -> Res<Facts> {
        let facts = match q.query {
            Query::Nimber => Facts::exact(self.nimber(q.region)?),
            Query::IsValue(k) if self.is_value(q.region, k)? => Facts::exact(k),
            Query::IsValue(k) => Facts::excluding(k),
        };
        Ok(facts.merge(self.bounds(&q.region)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, DbSet};
    use std::sync::Arc;

    #[test]
    fn names_survive_their_text_form_and_bad_ones_are_refused() {
        let r = AnyRegion::from_key("3x7:1fffff").unwrap();
        for q in [Query::Nimber, Query::IsValue(0), Query::IsValue(12)] {
            let question = Question { region: r, query: q };
            assert_eq!(question.to_string().parse::<Question>(), Ok(question));
        }
        assert_eq!(Question::nimber(r).to_string(), "3x7:1fffff=");
        for bad in ["3x7:1fffff", "3x7:1fffff?", "3x7:1fffff?300", "x?1", "3x7:9=?1", ""] {
            assert!(bad.parse::<Question>().is_err(), "{bad}");
        }
    }

    #[test]
    fn what_answers_a_query() {
        let exact = Facts::exact(3);
        assert!(Query::Nimber.answered_by(exact) && Query::IsValue(5).answered_by(exact));
        let not_two = Facts::excluding(2);
        assert!(Query::IsValue(2).answered_by(not_two) && !Query::IsValue(1).answered_by(not_two));
        // Of "g ≠ 2, g ≤ 0" only "g ≠ 2" answers "is it 2".
        let extra = Facts { excluded: 0b100, upper: 0 };
        assert_eq!(Query::IsValue(2).answer_only(extra), not_two);
        assert_eq!(Query::IsValue(0).answer_only(extra), Facts::exact(0));
    }

    #[test]
    fn answers_by_search_match_the_nimber() {
        let mut s = Solver::new(&Config { tt_bytes: 4 << 20, pairing: true }, Arc::new(DbSet::default()));
        let r = AnyRegion::from_key("3x6:3ffff").unwrap();
        let v = s.nimber(r).unwrap();
        for k in 0..6 {
            let facts = s.answer(Question { region: r, query: Query::IsValue(k) }).unwrap();
            assert_eq!(facts.rules_out(k), k != v, "is it {k}");
        }
        assert_eq!(s.answer(Question::nimber(r)).unwrap().value(), Some(v));
    }

    #[test]
    fn possible_facts() {
        let r = AnyRegion::from_key("2x5:3ff").unwrap();
        let fact = |facts| SharedFact { region: r, facts, nodes: 1 };
        assert!(fact(Facts::exact(1)).is_possible());
        assert!(!fact(Facts::exact(6)).is_possible(), "above half the cells");
        assert!(!fact(Facts { excluded: 0b11, upper: 1 }).is_possible());
    }
}
