//! A transaction: typed operations on the table, applied all or nothing.
//! Text is made only when a transaction is handed to `nft`
//! ([`Transaction::write`]); the kernel model applies the operations
//! themselves.

use std::fmt::{self, Write};

use slice_model::IpFamily;

use crate::element::Element;
use crate::names::{ChainId, CounterId, FamilyWords, SetId, TABLE};
use crate::rule::Rule;

/// One operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Creates the table of a family (nothing if it exists).
    AddTable(IpFamily),
    /// Deletes the table of a family and everything in it (fails if it is
    /// missing).
    DeleteTable(IpFamily),
    /// Declares a set or map (nothing if it exists) with initial elements.
    AddSet(SetId, Vec<Element>),
    /// Deletes a set (fails if missing or referred to).
    DeleteSet(SetId),
    /// Declares a chain (nothing if it exists).
    AddChain(ChainId),
    /// Empties a chain (fails if missing).
    FlushChain(ChainId),
    /// Deletes a chain (fails if missing, not empty, or referred to).
    DeleteChain(ChainId),
    /// Appends a rule to a chain.
    AddRule(ChainId, Rule),
    /// Adds elements (fails if a key holds another value).
    AddElements(SetId, Vec<Element>),
    /// Deletes elements by key (fails if one is missing).
    DeleteElements(SetId, Vec<Element>),
    /// Empties a set (fails if it is missing).
    FlushSet(SetId),
    /// Declares a named counter (nothing if it exists: its values stay).
    AddCounter(CounterId),
}

/// Operations on one family's table, applied as one nft transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transaction {
    /// The family of the table the operations address.
    pub family: IpFamily,
    /// The table's name.
    pub table: &'static str,
    /// The operations, in order.
    pub ops: Vec<Op>,
}

/// Elements per `add element` command: one command per element would
/// double the text, one per set would make a line of megabytes (and an nft
/// error message that points at it useless).
const ELEMENTS_PER_COMMAND: usize = 1000;

impl Transaction {
    /// An empty transaction on `family`'s node table ([`TABLE`]).
    pub fn new(family: IpFamily) -> Self {
        Self::for_table(family, TABLE)
    }

    /// An empty transaction on `family`'s table `table`.
    pub fn for_table(family: IpFamily, table: &'static str) -> Self {
        Self {
            family,
            table,
            ops: Vec::new(),
        }
    }

    /// Removes `table` of `family` whether or not it exists (creating it
    /// first makes the delete valid either way).
    pub fn remove_table(family: IpFamily, table: &'static str) -> Self {
        Self {
            family,
            table,
            ops: vec![Op::AddTable(family), Op::DeleteTable(family)],
        }
    }

    /// Appends an operation.
    pub fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Counts the elements the transaction adds or deletes.
    pub fn element_count(&self) -> usize {
        self.ops
            .iter()
            .map(|op| match op {
                Op::AddSet(_, e) | Op::AddElements(_, e) | Op::DeleteElements(_, e) => e.len(),
                _ => 0,
            })
            .sum()
    }

    /// The nft text of the transaction.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = self.write(&mut s);
        s
    }

    /// Writes the nft text as it goes (a full sync of a large cluster is
    /// megabytes, streamed to nft rather than held).
    ///
    /// An [`Op::AddTable`] right after an [`Op::DeleteTable`] of the same
    /// family opens a `table … { … }` block holding the declarations that
    /// follow it, each set with its elements: the kernel then sizes each set
    /// for its initial elements (measured with nft 1.0.6: a full load 30%
    /// faster, later single-element transactions about twice as fast).
    pub fn write(&self, out: &mut (impl Write + ?Sized)) -> fmt::Result {
        let words = FamilyWords::of(self.family);
        let t = words.table;
        let name = self.table;
        let mut in_block = false;
        let mut previous: Option<&Op> = None;
        for op in &self.ops {
            let block_item = matches!(op, Op::AddSet(..) | Op::AddChain(_) | Op::AddCounter(_));
            if in_block && !block_item {
                out.write_str("}\n")?;
                in_block = false;
            }
            match op {
                Op::AddTable(f) if matches!(previous, Some(Op::DeleteTable(g)) if g == f) => {
                    writeln!(out, "table {} {name} {{", FamilyWords::of(*f).table)?;
                    in_block = true;
                }
                Op::AddTable(f) => writeln!(out, "add table {} {name}", FamilyWords::of(*f).table)?,
                Op::DeleteTable(f) => writeln!(out, "delete table {} {name}", FamilyWords::of(*f).table)?,
                Op::AddSet(set, elements) if in_block => {
                    write_set_block(out, words, set, elements)?;
                }
                Op::AddSet(set, elements) => {
                    let kind = set_word(set);
                    writeln!(out, "add {kind} {t} {name} {set} {{ {}; }}", set.declaration(words))?;
                    write_elements(out, t, name, "add", set, elements)?;
                }
                Op::DeleteSet(set) => writeln!(out, "delete set {t} {name} {set}")?,
                Op::FlushSet(set) => writeln!(out, "flush {} {t} {name} {set}", set_word(set))?,
                Op::AddChain(chain) if in_block => {
                    write!(out, "\tchain {chain} {{")?;
                    if let Some(h) = hook_text(chain) {
                        write!(out, " {h}")?;
                    }
                    out.write_str(" }\n")?;
                }
                Op::AddChain(chain) => match hook_text(chain) {
                    Some(h) => writeln!(out, "add chain {t} {name} {chain} {{ {h} }}")?,
                    None => writeln!(out, "add chain {t} {name} {chain}")?,
                },
                Op::FlushChain(chain) => writeln!(out, "flush chain {t} {name} {chain}")?,
                Op::AddCounter(counter) if in_block => writeln!(out, "\tcounter {counter} {{ }}")?,
                Op::AddCounter(counter) => writeln!(out, "add counter {t} {name} {counter}")?,
                Op::DeleteChain(chain) => writeln!(out, "delete chain {t} {name} {chain}")?,
                Op::AddRule(chain, rule) => {
                    write!(out, "add rule {t} {name} {chain} ")?;
                    rule.write(out, words)?;
                    out.write_char('\n')?;
                }
                Op::AddElements(set, elements) => write_elements(out, t, name, "add", set, elements)?,
                Op::DeleteElements(set, elements) => write_elements(out, t, name, "delete", set, elements)?,
            }
            previous = Some(op);
        }
        if in_block {
            out.write_str("}\n")?;
        }
        Ok(())
    }
}

impl fmt::Display for Transaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f)
    }
}

fn hook_text(chain: &ChainId) -> Option<String> {
    let b = chain.base()?;
    let kind = if b.nat { "nat" } else { "filter" };
    let hook = match b.hook {
        crate::names::Hook::Prerouting => "prerouting",
        crate::names::Hook::Input => "input",
        crate::names::Hook::Forward => "forward",
        crate::names::Hook::Output => "output",
        crate::names::Hook::Postrouting => "postrouting",
    };
    Some(format!(
        "type {kind} hook {hook} priority {}; policy accept;",
        b.priority
    ))
}

/// nft's word for a set of this kind: `set` or `map`.
fn set_word(set: &SetId) -> &'static str {
    if set.kind() == crate::names::SetKind::Set {
        "set"
    } else {
        "map"
    }
}

fn write_set_block(
    out: &mut (impl Write + ?Sized),
    words: FamilyWords,
    set: &SetId,
    elements: &[Element],
) -> fmt::Result {
    let kind = set_word(set);
    write!(out, "\t{kind} {set} {{\n\t\t")?;
    // The block form takes one statement per line.
    out.write_str(&set.declaration(words).replace("; ", "\n\t\t"))?;
    out.write_char('\n')?;
    for (i, e) in elements.iter().enumerate() {
        out.write_str(if i == 0 {
            "\t\telements = {\n\t\t\t"
        } else {
            ",\n\t\t\t"
        })?;
        write!(out, "{e}")?;
    }
    if !elements.is_empty() {
        out.write_str("\n\t\t}\n")?;
    }
    out.write_str("\t}\n")
}

fn write_elements(
    out: &mut (impl Write + ?Sized),
    t: &str,
    table: &str,
    verb: &str,
    set: &SetId,
    elements: &[Element],
) -> fmt::Result {
    for chunk in elements.chunks(ELEMENTS_PER_COMMAND) {
        write!(out, "{verb} element {t} {table} {set} {{ ")?;
        for (i, e) in chunk.iter().enumerate() {
            if i > 0 {
                out.write_str(", ")?;
            }
            // A delete names keys only.
            if verb == "delete" {
                write!(out, "{}", e.key)?;
            } else {
                write!(out, "{e}")?;
            }
        }
        out.write_str(" }\n")?;
    }
    Ok(())
}
