//! nft text: the fixed skeleton, a full ruleset, and the partial
//! transaction that turns one set of service fragments into another.
//!
//! ```text
//!  nat prerouting/output (-100) -> chain services:
//!    addr . proto . port  vmap @service-chains        ports with chains
//!    fib local: proto . port vmap @nodeport-chains
//!    @masq-frontends / @outside-masq-frontends / @masq-nodeports -> mark
//!    goto slot-dnat:
//!      dnat to addr . proto . port . (numgen mod W) map @service-slots-W
//!      fib local: dnat to proto . port . (numgen mod W) map @nodeport-slots-W
//!      (W = 1, 2, 4, 8, 16: a frontend uses the narrowest that fits)
//!  nat postrouting (100): marked -> masquerade; hairpin -> masquerade
//!  filter input/forward/output (-110), new connections:
//!    @no-endpoints / @nodeport-no-endpoints -> reject
//!    @no-local-endpoints / @nodeport-no-local-endpoints -> drop
//! ```
//!
//! Measured with nft 1.0.6 (issue #4): 10,000 services as a chain each took
//! 10.3 s of kernel time to load, as map elements 1.5 s; so the common
//! service is a few map elements and only the rarer kinds get chains (see
//! [`super::fragment`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::net::IpAddr;

use super::desired::DataplaneConfig;
use super::fragment::{Element, FamilyWords, Fragment, NODEPORT_SLOT_MAPS, SERVICE_SLOT_MAPS, WIDTHS};

/// The table every proxyd rule lives in.
pub const TABLE: &str = "proxyd";

/// The packet mark bit that asks for masquerading (kube-proxy's default,
/// bit 14).
pub const MASQUERADE_MARK: u32 = 0x4000;

/// The chain holding the two slot-map DNAT rules. nft 1.0.6 cannot add
/// these rules once the slot maps hold elements ("conflicting protocols
/// specified: tcp vs. th" when it reads the maps' `typeof` back), so only a
/// full sync writes this chain; the periodic re-assertion leaves it alone
/// and the hourly full sync repairs it.
const SLOT_DNAT: &str = "slot-dnat";

/// The element every incremental transaction adds first (a no-op when it
/// is there): if the table was removed or replaced from outside, its set is
/// gone, the add fails and the whole transaction with it, so the next sync
/// is a full one. Only an add: any element delete makes the kernel wait for
/// an RCU grace period at commit (8-15 ms measured here), which would
/// triple the cost of a sync that only adds.
const CANARY: &str = "add element {T} canary { 1 }\n";

/// A set or map of the skeleton and its declaration body.
fn declarations(words: FamilyWords) -> Vec<(&'static str, String)> {
    let a = words.addr;
    let at = words.addr_type;
    let ip_key = format!("{at} . inet_proto . inet_service");
    let port_key = "inet_proto . inet_service".to_owned();
    let mut all = vec![
        ("canary", "type inet_service".to_owned()),
        ("service-chains", format!("type {ip_key} : verdict")),
        ("nodeport-chains", format!("type {port_key} : verdict")),
        ("masq-frontends", format!("type {ip_key}")),
        ("outside-masq-frontends", format!("type {ip_key}")),
        ("masq-nodeports", format!("type {port_key}")),
        ("no-endpoints", format!("type {ip_key}")),
        ("no-local-endpoints", format!("type {ip_key}")),
        ("nodeport-no-endpoints", format!("type {port_key}")),
        ("nodeport-no-local-endpoints", format!("type {port_key}")),
        ("hairpin", format!("type {at} . {at}")),
    ];
    for (i, w) in WIDTHS.iter().enumerate() {
        all.push((
            SERVICE_SLOT_MAPS[i],
            format!("typeof {a} daddr . meta l4proto . th dport . numgen random mod {w} : {a} daddr . th dport"),
        ));
        all.push((
            NODEPORT_SLOT_MAPS[i],
            format!("typeof meta l4proto . th dport . numgen random mod {w} : {a} daddr . th dport"),
        ));
    }
    all
}

fn is_map(set: &str) -> bool {
    set.contains("-slots-") || set.ends_with("-chains")
}

/// The fixed chains and their rules.
fn static_chains(config: &DataplaneConfig) -> Vec<(&'static str, Option<String>, Vec<String>)> {
    let words = FamilyWords::of(config.family);
    let (a, t) = (words.addr, words.table);
    let frontend = format!("{a} daddr . meta l4proto . th dport");
    // Where node ports answer: every local address, or those of
    // --nodeport-addresses of this family.
    let family_nets: Vec<String> = config
        .family_nodeport_addresses()
        .iter()
        .map(ToString::to_string)
        .collect();
    let local = if family_nets.is_empty() {
        "fib daddr type local".to_owned()
    } else {
        format!("fib daddr type local {a} daddr {{ {} }}", family_nets.join(", "))
    };
    let mut services = vec![
        format!("{frontend} vmap @service-chains"),
        format!("{local} meta l4proto . th dport vmap @nodeport-chains"),
        format!("{frontend} @masq-frontends jump mark-for-masquerade"),
        format!("{local} meta l4proto . th dport @masq-nodeports jump mark-for-masquerade"),
    ];
    let cidrs = config.family_cluster_cidrs();
    if !cidrs.is_empty() {
        let nets: Vec<String> = cidrs.iter().map(ToString::to_string).collect();
        services.push(format!(
            "{frontend} @outside-masq-frontends {a} saddr != {{ {} }} jump mark-for-masquerade",
            nets.join(", ")
        ));
    }
    services.push(format!("goto {SLOT_DNAT}"));
    let mut slot_dnat = Vec::new();
    for (i, w) in WIDTHS.iter().enumerate() {
        slot_dnat.push(format!(
            "meta l4proto {{ tcp, udp, sctp }} dnat {t} to {frontend} . numgen random mod {w} map @{}",
            SERVICE_SLOT_MAPS[i]
        ));
        slot_dnat.push(format!(
            "{local} meta l4proto {{ tcp, udp, sctp }} dnat {t} to meta l4proto . th dport . numgen random mod {w} map @{}",
            NODEPORT_SLOT_MAPS[i]
        ));
    }
    let filter = vec![
        format!("ct state new {frontend} @no-endpoints reject"),
        format!("ct state new {frontend} @no-local-endpoints drop"),
        format!("ct state new {local} meta l4proto . th dport @nodeport-no-endpoints reject"),
        format!("ct state new {local} meta l4proto . th dport @nodeport-no-local-endpoints drop"),
    ];
    let hook =
        |kind: &str, hook: &str, prio: i32| Some(format!("type {kind} hook {hook} priority {prio}; policy accept;"));
    vec![
        (
            "mark-for-masquerade",
            None,
            vec![format!("meta mark set meta mark | {MASQUERADE_MARK:#x}")],
        ),
        (SLOT_DNAT, None, slot_dnat),
        ("services", None, services),
        (
            "nat-prerouting",
            hook("nat", "prerouting", -100),
            vec!["jump services".into()],
        ),
        ("nat-output", hook("nat", "output", -100), vec!["jump services".into()]),
        (
            "nat-postrouting",
            hook("nat", "postrouting", 100),
            vec![
                format!(
                    "meta mark & {MASQUERADE_MARK:#x} == {MASQUERADE_MARK:#x} meta mark set meta mark & {:#x} masquerade fully-random",
                    !MASQUERADE_MARK
                ),
                format!("ct status dnat {a} saddr . {a} daddr @hairpin masquerade"),
            ],
        ),
        ("filter-input", hook("filter", "input", -110), filter.clone()),
        ("filter-forward", hook("filter", "forward", -110), filter.clone()),
        ("filter-output", hook("filter", "output", -110), filter),
    ]
}

/// Writes a partial sync's `add element` / `delete element` commands, at most
/// [`ELEMENTS_PER_COMMAND`] elements each: one command per element would
/// double the text, one per set would make a line of megabytes (and an nft
/// error message that points at it useless).
struct ElementCommands<'o> {
    out: &'o mut String,
    open: Option<(&'static str, usize)>,
    verb: &'static str,
    table: &'o str,
}

/// Elements per `add element` command.
const ELEMENTS_PER_COMMAND: usize = 1000;

impl<'o> ElementCommands<'o> {
    fn new(out: &'o mut String, verb: &'static str, table: &'o str) -> Self {
        Self {
            out,
            open: None,
            verb,
            table,
        }
    }

    fn push(&mut self, set: &'static str, key: &str, value: Option<&str>) {
        match &mut self.open {
            Some((open, n)) if *open == set && *n < ELEMENTS_PER_COMMAND => {
                *n += 1;
                self.out.push_str(", ");
            }
            _ => {
                self.close();
                self.open = Some((set, 1));
                let _ = write!(self.out, "{} element {} {set} {{ ", self.verb, self.table);
            }
        }
        self.out.push_str(key);
        if let Some(v) = value {
            self.out.push_str(" : ");
            self.out.push_str(v);
        }
    }

    fn close(&mut self) {
        if self.open.take().is_some() {
            self.out.push_str(" }\n");
        }
    }
}

impl Drop for ElementCommands<'_> {
    fn drop(&mut self) {
        self.close();
    }
}

fn hairpin_key(ip: IpAddr) -> String {
    format!("{ip} . {ip}")
}

/// The whole ruleset, replacing whatever the table held, as one
/// transaction: there is no moment without rules.
///
/// See [`write_full`]; this collects the text. Measured with nft
/// 1.0.6: declaring the elements there, rather than adding them to empty
/// sets after the block, makes the full load 30% faster and later
/// single-element transactions about twice as fast (the kernel sizes the
/// set for its initial elements).
pub fn render_full<'a>(
    config: &DataplaneConfig,
    fragments: impl IntoIterator<Item = &'a Fragment>,
    hairpin: impl IntoIterator<Item = IpAddr>,
) -> String {
    let mut out = String::new();
    let _ = write_full(&mut out, config, fragments, hairpin);
    out
}

/// Writes the whole ruleset (see [`render_full`]) as it goes: a full sync
/// of a large cluster is megabytes of text, which [`super::NftCommand`]
/// streams to nft rather than holding. Each set and map has its elements
/// in its declaration. Measured with nft 1.0.6: declaring them there,
/// rather than adding them to empty sets after the block, makes the full
/// load 30% faster and later single-element transactions about twice as
/// fast (the kernel sizes the set for its initial elements).
pub fn write_full<'a, W: Write + ?Sized>(
    out: &mut W,
    config: &DataplaneConfig,
    fragments: impl IntoIterator<Item = &'a Fragment>,
    hairpin: impl IntoIterator<Item = IpAddr>,
) -> std::fmt::Result {
    let words = FamilyWords::of(config.family);
    let fragments: Vec<&Fragment> = fragments.into_iter().collect();
    let mut by_set: HashMap<&'static str, Vec<&Element>> = HashMap::new();
    for e in fragments.iter().flat_map(|f| &f.elements) {
        by_set.entry(e.set()).or_default().push(e);
    }
    let mut hairpin = hairpin.into_iter();
    let t = words.table;
    // Creating the table first makes the delete valid whether or not it
    // exists.
    writeln!(out, "add table {t} {TABLE}")?;
    writeln!(out, "delete table {t} {TABLE}")?;
    writeln!(out, "table {t} {TABLE} {{")?;
    for (name, decl) in declarations(words) {
        let kind = if is_map(name) { "map" } else { "set" };
        writeln!(out, "\t{kind} {name} {{\n\t\t{decl}")?;
        let mut items = ElementList::new(out);
        match name {
            "canary" => items.push("1", None),
            "hairpin" => hairpin.by_ref().for_each(|ip| items.push(&hairpin_key(ip), None)),
            _ => {}
        }
        for e in by_set.get(name).into_iter().flatten() {
            e.for_each_entry(|_, key, value| items.push(&key, value.as_deref()));
        }
        items.finish()?;
        writeln!(out, "\t}}")?;
    }
    for s in fragments.iter().flat_map(|f| &f.affinity_sets) {
        writeln!(
            out,
            "\tset {s} {{\n\t\ttype {}\n\t\tflags dynamic,timeout\n\t}}",
            words.addr_type
        )?;
    }
    for c in fragments.iter().flat_map(|f| &f.chains) {
        writeln!(out, "\tchain {} {{", c.name)?;
        for r in &c.rules {
            writeln!(out, "\t\t{r}")?;
        }
        writeln!(out, "\t}}")?;
    }
    for (name, hook, rules) in static_chains(config) {
        writeln!(out, "\tchain {name} {{")?;
        if let Some(h) = hook {
            writeln!(out, "\t\t{h}")?;
        }
        for r in rules {
            writeln!(out, "\t\t{r}")?;
        }
        writeln!(out, "\t}}")?;
    }
    writeln!(out, "}}")
}

/// The `elements = { … }` clause of a declaration, written as items come
/// (nothing when none does).
struct ElementList<'o, W: ?Sized> {
    out: &'o mut W,
    any: bool,
    result: std::fmt::Result,
}

impl<'o, W: Write + ?Sized> ElementList<'o, W> {
    fn new(out: &'o mut W) -> Self {
        Self {
            out,
            any: false,
            result: Ok(()),
        }
    }

    fn push(&mut self, key: &str, value: Option<&str>) {
        if self.result.is_err() {
            return;
        }
        let start = if self.any {
            ",\n\t\t\t"
        } else {
            "\t\telements = {\n\t\t\t"
        };
        self.any = true;
        self.result = (|| {
            self.out.write_str(start)?;
            self.out.write_str(key)?;
            if let Some(v) = value {
                self.out.write_str(" : ")?;
                self.out.write_str(v)?;
            }
            Ok(())
        })();
    }

    fn finish(self) -> std::fmt::Result {
        self.result?;
        if self.any {
            self.out.write_str("\n\t\t}\n")?;
        }
        Ok(())
    }
}

/// Commands that put the skeleton back as it should be without touching
/// any service's elements: declarations are re-added (a no-op when they
/// exist) and the fixed chains are flushed and refilled.
pub fn render_skeleton_reassert(config: &DataplaneConfig, out: &mut String) {
    let words = FamilyWords::of(config.family);
    let t = format!("{} {TABLE}", words.table);
    for (name, decl) in declarations(words) {
        let kind = if is_map(name) { "map" } else { "set" };
        let _ = writeln!(out, "add {kind} {t} {name} {{ {decl}; }}");
    }
    for (name, hook, rules) in static_chains(config) {
        match hook {
            Some(h) => {
                let _ = writeln!(out, "add chain {t} {name} {{ {h} }}");
            }
            None => {
                let _ = writeln!(out, "add chain {t} {name}");
            }
        }
        if name == SLOT_DNAT {
            continue;
        }
        let _ = writeln!(out, "flush chain {t} {name}");
        for r in rules {
            let _ = writeln!(out, "add rule {t} {name} {r}");
        }
    }
}

/// One service's before and after.
pub struct FragmentChange<'a> {
    /// What is programmed now (`None`: nothing).
    pub old: Option<&'a Fragment>,
    /// What should be (`None`: nothing).
    pub new: Option<&'a Fragment>,
}

type Entries = HashMap<(&'static str, String), Option<String>>;

fn entries(f: Option<&Fragment>) -> Entries {
    let mut all = Entries::new();
    for e in f.map(|f| &f.elements[..]).unwrap_or(&[]) {
        e.for_each_entry(|set, key, value| {
            all.insert((set, key), value);
        });
    }
    all
}

/// The transaction that turns the old fragments into the new ones, plus
/// hairpin elements to add and delete. Only what differs is written;
/// `reassert` adds the skeleton re-assertion of a periodic sync.
pub fn render_partial(
    config: &DataplaneConfig,
    changes: &[FragmentChange<'_>],
    hairpin_added: &[IpAddr],
    hairpin_removed: &[IpAddr],
    reassert: bool,
) -> String {
    let words = FamilyWords::of(config.family);
    let t = format!("{} {TABLE}", words.table);
    let mut out = CANARY.replace("{T}", &t);
    if reassert {
        render_skeleton_reassert(config, &mut out);
    }
    let none = Fragment::default();
    let pairs: Vec<(&Fragment, &Fragment)> = changes
        .iter()
        .map(|c| (c.old.unwrap_or(&none), c.new.unwrap_or(&none)))
        .filter(|(o, n)| o != n)
        .collect();

    // 1. New sets and chains exist before anything refers to them.
    for (old, new) in &pairs {
        for s in new.affinity_sets.iter().filter(|s| !old.affinity_sets.contains(s)) {
            let _ = writeln!(
                out,
                "add set {t} {s} {{ type {}; flags dynamic,timeout; }}",
                words.addr_type
            );
        }
        for c in new
            .chains
            .iter()
            .filter(|c| !old.chains.iter().any(|o| o.name == c.name))
        {
            let _ = writeln!(out, "add chain {t} {}", c.name);
        }
    }
    // 2. Chains that are new or changed are rewritten.
    for (old, new) in &pairs {
        for c in new.chains.iter().filter(|c| !old.chains.contains(c)) {
            let _ = writeln!(out, "flush chain {t} {}", c.name);
            for r in &c.rules {
                let _ = writeln!(out, "add rule {t} {} {r}", c.name);
            }
        }
    }
    // 3. Elements: deletes first, so a key whose value changes is replaced;
    // one command per set (nft's cost is per element, not per command, but
    // the text is a third shorter).
    let mut deletes: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    let mut adds: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for (old, new) in &pairs {
        let (before, after) = (entries(Some(old)), entries(Some(new)));
        let mut gone: Vec<(&'static str, &String)> = before
            .iter()
            .filter(|((set, key), value)| after.get(&(*set, key.clone())) != Some(*value))
            .map(|((set, key), _)| (*set, key))
            .collect();
        gone.sort_unstable();
        for (set, key) in gone {
            deletes.entry(set).or_default().push(key.clone());
        }
        let mut came: Vec<(&'static str, &String, &Option<String>)> = after
            .iter()
            .filter(|((set, key), value)| before.get(&(*set, key.clone())) != Some(*value))
            .map(|((set, key), value)| (*set, key, value))
            .collect();
        came.sort_unstable();
        for (set, key, value) in came {
            let item = match value {
                Some(v) => format!("{key} : {v}"),
                None => key.clone(),
            };
            adds.entry(set).or_default().push(item);
        }
    }
    deletes
        .entry("hairpin")
        .or_default()
        .extend(hairpin_removed.iter().map(|ip| hairpin_key(*ip)));
    adds.entry("hairpin")
        .or_default()
        .extend(hairpin_added.iter().map(|ip| hairpin_key(*ip)));
    for (verb, items) in [("delete", &deletes), ("add", &adds)] {
        let mut commands = ElementCommands::new(&mut out, verb, &t);
        for (set, items) in items {
            for item in items {
                commands.push(set, item, None);
            }
        }
    }
    // 4. What is gone: flush every removed chain before deleting any (they
    // may jump to each other), then the sets only they used.
    for (old, new) in &pairs {
        for c in old
            .chains
            .iter()
            .filter(|c| !new.chains.iter().any(|n| n.name == c.name))
        {
            let _ = writeln!(out, "flush chain {t} {}", c.name);
        }
    }
    for (old, new) in &pairs {
        for c in old
            .chains
            .iter()
            .filter(|c| !new.chains.iter().any(|n| n.name == c.name))
        {
            let _ = writeln!(out, "delete chain {t} {}", c.name);
        }
        for s in old.affinity_sets.iter().filter(|s| !new.affinity_sets.contains(s)) {
            let _ = writeln!(out, "delete set {t} {s}");
        }
    }
    out
}

/// Removes proxyd's tables of both families, whether or not they exist, in
/// one transaction (`proxyd cleanup`).
pub fn render_cleanup() -> String {
    let mut out = String::new();
    for family in ["ip", "ip6"] {
        let _ = writeln!(out, "add table {family} {TABLE}");
        let _ = writeln!(out, "delete table {family} {TABLE}");
    }
    out
}
