//! What an operation costs while the kernel holds the nftables lock for
//! its transaction, counted in elements added (the cheapest operation).
//!
//! A long transaction blocks every other nftables user of the node, so the
//! syncer cuts a large write into transactions of about the same cost.
//! Two things set the cost:
//!
//! - an operation on a chain or a rule (declared, flushed, a rule's
//!   expressions built and its jumps checked) costs several elements;
//! - the kernel finds a set by name by walking the table's list of sets
//!   from the start, comparing names. Every operation that names a set
//!   (declaring it, filling or emptying it, a rule that looks it up) walks
//!   that list, so in a table of thousands of sets a name costs more than
//!   the work done with it. An anonymous set (a rule's inline set or map)
//!   is named three times: declared, filled, looked up.
//!
//! The figures the constants come from are in `benches/RESULTS.md`.

use crate::rule::{Match, Rule};
use crate::transaction::Op;

/// An operation on a chain or a rule, in elements.
pub(crate) const CHAIN_OP: usize = 5;

/// Sets walked past, looking one up by name, that cost as much as one
/// element.
const SETS_PER_ELEMENT: usize = 50;

/// The cost of operations on a table holding a number of sets. The count
/// grows as operations declare sets: every later name walks past them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LockCost {
    sets: usize,
}

impl LockCost {
    /// For a table that holds `sets` sets (named and anonymous).
    pub(crate) fn with_sets(sets: usize) -> Self {
        Self { sets }
    }

    /// One set found by name (or a name found free).
    pub(crate) fn lookup(&self) -> usize {
        1 + self.sets / SETS_PER_ELEMENT
    }

    /// What `op` costs, counting the sets it declares from then on.
    pub(crate) fn charge(&mut self, op: &Op) -> usize {
        match op {
            Op::AddTable(_) | Op::DeleteTable(_) => CHAIN_OP,
            Op::AddChain(_) | Op::FlushChain(_) | Op::DeleteChain(_) | Op::AddCounter(_) => CHAIN_OP,
            Op::AddSet(_, elements) => {
                let filled = if elements.is_empty() { 0 } else { self.lookup() };
                let cost = self.lookup() + filled + elements.len();
                self.sets += 1;
                cost
            }
            Op::DeleteSet(_) | Op::FlushSet(_) => self.lookup(),
            Op::AddElements(_, elements) | Op::DeleteElements(_, elements) => self.lookup() + elements.len(),
            Op::AddRule(_, rule) => {
                let (named, _) = rule.references();
                let anonymous = anonymous_sets(rule);
                let cost = CHAIN_OP + (named.len() + 3 * anonymous) * self.lookup();
                self.sets += anonymous;
                cost
            }
        }
    }
}

/// The inline sets a rule's expressions need: several prefixes or
/// protocols are an inline set.
fn anonymous_sets(rule: &Rule) -> usize {
    let matches = rule.matches.iter().filter(|m| match m {
        Match::HasPorts => true,
        Match::LocalDestination(nets)
        | Match::SourceIn(nets)
        | Match::SourceNotIn(nets)
        | Match::DestinationIn(nets) => nets.len() != 1,
        _ => false,
    });
    matches.count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{ChainId, SetId};
    use crate::rule::Statement;
    use slice_model::Protocol;

    fn backends(n: usize) -> SetId {
        SetId::Backends(Protocol::Tcp, format!("svc-ns/s{n}/tcp/80"))
    }

    #[test]
    fn a_name_costs_more_as_sets_are_declared() {
        let mut cost = LockCost::with_sets(0);
        let first = cost.charge(&Op::AddElements(backends(0), Vec::new()));
        for n in 0..5_000 {
            cost.charge(&Op::AddSet(backends(n), Vec::new()));
        }
        let later = cost.charge(&Op::AddElements(backends(0), Vec::new()));
        assert_eq!(first, 1);
        assert_eq!(later, 1 + 5_000 / SETS_PER_ELEMENT);
    }

    #[test]
    fn chains_and_rules_cost_the_same_whatever_the_sets_but_a_lookup_does_not() {
        let mut small = LockCost::with_sets(10);
        let mut large = LockCost::with_sets(10_000);
        let chain = ChainId::Endpoint("ns/s/tcp/80/10.0.0.1/80".into());
        assert_eq!(
            small.charge(&Op::AddChain(chain.clone())),
            large.charge(&Op::AddChain(chain.clone()))
        );
        let plain = Rule::always(vec![Statement::Drop]);
        assert_eq!(small.charge(&Op::AddRule(chain.clone(), plain.clone())), CHAIN_OP);
        assert_eq!(large.charge(&Op::AddRule(chain.clone(), plain)), CHAIN_OP);
        let looks_up = Rule::new(
            vec![Match::KnownClient {
                clients: SetId::Clients("ns/s/tcp/80".into()),
                endpoint: "10.0.0.1:80".parse().unwrap(),
            }],
            vec![Statement::Goto(chain.clone())],
        );
        assert!(
            large.charge(&Op::AddRule(chain.clone(), looks_up.clone())) > small.charge(&Op::AddRule(chain, looks_up))
        );
    }

    #[test]
    fn an_inline_set_is_named_three_times_and_counted() {
        let mut cost = LockCost::with_sets(1_000);
        let chain = ChainId::Endpoint("ns/s/tcp/80/10.0.0.1/80".into());
        let nets = vec!["10.0.0.0/8".parse().unwrap(), "192.168.0.0/16".parse().unwrap()];
        let pick = Rule::new(vec![Match::SourceIn(nets)], vec![Statement::Goto(chain.clone())]);
        let lookup = cost.lookup();
        assert_eq!(cost.charge(&Op::AddRule(chain, pick)), CHAIN_OP + 3 * lookup);
        assert_eq!(cost.lookup(), 1 + 1_001 / SETS_PER_ELEMENT);
    }
}
