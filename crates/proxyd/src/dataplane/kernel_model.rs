//! A model of the kernel's side of the subset of nft that proxyd writes:
//! named sets/maps with their elements and chains with their rules, with
//! nft's transaction rules (all or nothing; deleting what is missing or
//! still referenced fails; a key holds one value). Tests apply partial
//! transactions to it and compare the result with a fresh full render.

use std::collections::BTreeMap;

use super::{Dataplane, DataplaneError};

/// The table's contents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelModel {
    /// Sets and maps: key -> value (`None` for plain sets).
    pub sets: BTreeMap<String, BTreeMap<String, Option<String>>>,
    /// Chains and their rules.
    pub chains: BTreeMap<String, Vec<String>>,
    /// Whether the table exists.
    pub exists: bool,
}

fn err(line: &str, why: &str) -> DataplaneError {
    DataplaneError::Rejected {
        status: "model".into(),
        stderr: format!("{why}: {line}"),
    }
}

/// Names a rule or element refers to: `@set`, `goto chain`, `jump chain`.
fn references(text: &str) -> (Vec<String>, Vec<String>) {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut sets = Vec::new();
    let mut chains = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if let Some(s) = w.strip_prefix('@') {
            sets.push(s.to_owned());
        }
        if (*w == "goto" || *w == "jump") && i + 1 < words.len() {
            chains.push(words[i + 1].trim_end_matches([',', '}']).to_owned());
        }
    }
    (sets, chains)
}

impl KernelModel {
    fn check_refs(&self, text: &str, line: &str) -> Result<(), DataplaneError> {
        let (sets, chains) = references(text);
        if let Some(s) = sets.iter().find(|s| !self.sets.contains_key(*s)) {
            return Err(err(line, &format!("no set {s}")));
        }
        if let Some(c) = chains.iter().find(|c| !self.chains.contains_key(*c)) {
            return Err(err(line, &format!("no chain {c}")));
        }
        Ok(())
    }

    fn referenced(&self, name: &str, as_set: bool) -> bool {
        let in_text = |t: &str| {
            let (sets, chains) = references(t);
            if as_set {
                sets.iter().any(|s| s == name)
            } else {
                chains.iter().any(|c| c == name)
            }
        };
        self.chains.values().flatten().any(|r| in_text(r))
            || self
                .sets
                .values()
                .flat_map(|s| s.values())
                .flatten()
                .any(|v| in_text(v))
    }

    fn add_element(&mut self, set: &str, item: &str, line: &str) -> Result<(), DataplaneError> {
        let (key, value) = match item.split_once(" : ") {
            Some((k, v)) => (k.trim().to_owned(), Some(v.trim().to_owned())),
            None => (item.trim().to_owned(), None),
        };
        if let Some(v) = &value {
            self.check_refs(v, line)?;
        }
        let s = self.sets.get_mut(set).ok_or_else(|| err(line, "no such set"))?;
        match s.get(&key) {
            Some(old) if *old != value => Err(err(line, "element exists with another value")),
            _ => {
                s.insert(key, value);
                Ok(())
            }
        }
    }

    /// Applies one script as one transaction.
    pub fn apply_script(&mut self, script: &str) -> Result<(), DataplaneError> {
        let mut next = self.clone();
        next.apply_lines(script)?;
        *self = next;
        Ok(())
    }

    fn apply_lines(&mut self, script: &str) -> Result<(), DataplaneError> {
        let mut lines = script
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        while let Some(line) = lines.next() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let after = |n: usize| words.get(n..).map(|w| w.join(" ")).unwrap_or_default();
            match words.as_slice() {
                ["add", "table", _, _] => self.exists = true,
                ["delete", "table", _, _] => {
                    if !self.exists {
                        return Err(err(line, "no table"));
                    }
                    *self = Self::default();
                }
                ["table", _, _, "{"] => {
                    if self.exists {
                        return Err(err(line, "table block over an existing table is not used by proxyd"));
                    }
                    self.exists = true;
                    self.parse_block(&mut lines)?;
                }
                [_, _, _, _, ..] if !self.exists => return Err(err(line, "no table")),
                ["add", "set" | "map", _, _, name, ..] => {
                    self.sets.entry((*name).to_owned()).or_default();
                }
                ["delete", "set", _, _, name] => {
                    if !self.sets.contains_key(*name) || self.referenced(name, true) {
                        return Err(err(line, "set missing or in use"));
                    }
                    self.sets.remove(*name);
                }
                ["add", "chain", _, _, name, ..] => {
                    self.chains.entry((*name).to_owned()).or_default();
                }
                ["flush", "chain", _, _, name] => {
                    self.chains.get_mut(*name).ok_or_else(|| err(line, "no chain"))?.clear();
                }
                ["delete", "chain", _, _, name] => {
                    let empty = self.chains.get(*name).is_some_and(Vec::is_empty);
                    if !empty || self.referenced(name, false) {
                        return Err(err(line, "chain missing, not empty or in use"));
                    }
                    self.chains.remove(*name);
                }
                ["add", "rule", _, _, name, ..] => {
                    let rule = after(5);
                    self.check_refs(&rule, line)?;
                    self.chains
                        .get_mut(*name)
                        .ok_or_else(|| err(line, "no chain"))?
                        .push(rule);
                }
                ["add" | "delete", "element", _, _, set, "{", .., "}"] => {
                    let items = words[6..words.len() - 1].join(" ");
                    for item in items.split(", ") {
                        if words[0] == "add" {
                            self.add_element(set, item, line)?;
                        } else {
                            let s = self.sets.get_mut(*set).ok_or_else(|| err(line, "no such set"))?;
                            s.remove(item.trim()).ok_or_else(|| err(line, "no such element"))?;
                        }
                    }
                }
                _ => return Err(err(line, "not understood")),
            }
        }
        Ok(())
    }

    fn parse_block<'a>(&mut self, lines: &mut impl Iterator<Item = &'a str>) -> Result<(), DataplaneError> {
        // Rules may refer to chains declared later in the block: check them
        // once the block is read.
        let mut pending: Vec<(String, String)> = Vec::new();
        while let Some(line) = lines.next() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["}"] => break,
                ["set" | "map", name, "{"] => {
                    let name = (*name).to_owned();
                    self.sets.entry(name.clone()).or_default();
                    while let Some(l) = lines.next() {
                        if l == "}" {
                            break;
                        }
                        if l.starts_with("elements = {") {
                            for item in lines.by_ref() {
                                if item == "}" {
                                    break;
                                }
                                let item = item.trim_end_matches(',');
                                let (key, value) = match item.split_once(" : ") {
                                    Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
                                    None => (item.to_owned(), None),
                                };
                                if let Some(v) = &value {
                                    pending.push((v.clone(), line.to_owned()));
                                }
                                let set = self.sets.entry(name.clone()).or_default();
                                if set.insert(key, value).is_some() {
                                    return Err(err(item, "duplicate element"));
                                }
                            }
                        }
                    }
                }
                ["chain", name, "{"] => {
                    let name = (*name).to_owned();
                    let mut rules = Vec::new();
                    for l in lines.by_ref() {
                        if l == "}" {
                            break;
                        }
                        if !l.starts_with("type ") {
                            pending.push((l.to_owned(), l.to_owned()));
                            rules.push(l.to_owned());
                        }
                    }
                    if self.chains.insert(name.clone(), rules).is_some() {
                        return Err(err(&name, "duplicate chain"));
                    }
                }
                _ => return Err(err(line, "not understood in a table block")),
            }
        }
        for (text, line) in pending {
            self.check_refs(&text, &line)?;
        }
        Ok(())
    }
}

impl Dataplane for KernelModel {
    fn apply(&mut self, script: &str) -> Result<(), DataplaneError> {
        self.apply_script(script)
    }
}
