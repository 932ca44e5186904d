//! The kernel's extended acknowledgement of a refused request: its message
//! (where it gives one) and where in the request the attribute it refuses
//! starts, named in nftables' terms (`expression 3 (immediate), attribute
//! 2.2.2`).

/// `NLM_F_CAPPED`: the error echoes only the request's header.
const CAPPED: u16 = 0x100;
/// `NLM_F_ACK_TLVS`: attributes follow the error.
const ACK_TLVS: u16 = 0x200;
/// `NLMSGERR_ATTR_MSG`: a text.
const ATTR_MSG: u16 = 1;
/// `NLMSGERR_ATTR_OFFS`: the refused attribute's offset in the request.
const ATTR_OFFS: u16 = 2;
/// `NLA_TYPE_MASK`: an attribute's type without its nested and byte-order
/// flags.
const TYPE_MASK: u16 = 0x3fff;
/// A netlink header's length; nftables' `nfgenmsg` follows it.
const HEADER: usize = 16;
const NFGENMSG: usize = 4;

/// What the kernel said of a refused request beyond its errno.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Extack<'a> {
    /// The kernel's message.
    pub(crate) message: Option<&'a str>,
    /// Where the refused attribute starts, from the start of the request.
    pub(crate) offset: Option<u32>,
}

/// The extended acknowledgement of an error message whose header has
/// `flags` and whose payload (after the header) is `payload`.
pub(crate) fn parse(flags: u16, payload: &[u8]) -> Extack<'_> {
    let mut out = Extack::default();
    if flags & ACK_TLVS == 0 {
        return out;
    }
    // The errno, the request's header, and its payload unless capped.
    let echoed = if flags & CAPPED != 0 {
        HEADER
    } else {
        match payload.get(4..8).and_then(|b| <[u8; 4]>::try_from(b).ok()) {
            Some(len) => usize::try_from(u32::from_ne_bytes(len)).unwrap_or(usize::MAX),
            None => return out,
        }
    };
    let Some(tlvs) = payload.get(4usize.saturating_add(echoed).next_multiple_of(4)..) else {
        return out;
    };
    for (kind, value) in Attributes(tlvs) {
        match kind {
            ATTR_MSG => {
                out.message = std::str::from_utf8(value)
                    .ok()
                    .map(|s| s.trim_end_matches('\0'))
                    .filter(|s| !s.is_empty());
            }
            ATTR_OFFS => {
                out.offset = value
                    .get(..4)
                    .and_then(|b| <[u8; 4]>::try_from(b).ok())
                    .map(u32::from_ne_bytes);
            }
            _ => {}
        }
    }
    out
}

/// The attributes of a run, as (type without flags, value); stops at the
/// first that does not fit.
struct Attributes<'a>(&'a [u8]);

impl<'a> Iterator for Attributes<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let (len, kind) = attribute_header(self.0)?;
        let value = self.0.get(4..len)?;
        self.0 = self.0.get(len.next_multiple_of(4)..).unwrap_or_default();
        Some((kind, value))
    }
}

fn attribute_header(data: &[u8]) -> Option<(usize, u16)> {
    let len = usize::from(u16::from_ne_bytes(data.get(..2)?.try_into().ok()?));
    let kind = u16::from_ne_bytes(data.get(2..4)?.try_into().ok()?) & TYPE_MASK;
    (len >= 4 && len <= data.len()).then_some((len, kind))
}

/// Whether `data` is a run of attributes that fills it exactly.
fn is_nested(data: &[u8]) -> bool {
    let mut rest = data;
    while !rest.is_empty() {
        let Some((len, _)) = attribute_header(rest) else {
            return false;
        };
        rest = rest.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    !data.is_empty()
}

/// The attribute of nftables request `message` (header included) that
/// starts at `offset`, named: `expression 3 (immediate), attribute
/// 2.2.2`, `element 17, data`, `chain name`. `None` when the offset is not
/// an attribute's start.
pub(crate) fn attribute_at(message: &[u8], offset: u32) -> Option<String> {
    let offset = usize::try_from(offset).ok()?;
    let kind = u16::from_ne_bytes(message.get(4..6)?.try_into().ok()?) & 0xff;
    let mut attrs = message.get(HEADER + NFGENMSG..)?;
    let mut at = HEADER + NFGENMSG;
    // The types from the top down to the attribute at `offset`, each with
    // its place among its siblings and its value.
    let mut path: Vec<(u16, usize, &[u8])> = Vec::new();
    'down: loop {
        let mut rest = attrs;
        let mut index = 0;
        while let Some((len, t)) = attribute_header(rest) {
            let value = rest.get(4..len)?;
            if at == offset {
                path.push((t, index, value));
                break 'down;
            }
            if offset > at && offset < at + len && is_nested(value) {
                path.push((t, index, value));
                attrs = value;
                at += 4;
                continue 'down;
            }
            let step = len.next_multiple_of(4);
            at += step;
            rest = rest.get(step..).unwrap_or_default();
            index += 1;
        }
        return None;
    }
    Some(name(kind, &path))
}

fn name(message: u16, path: &[(u16, usize, &[u8])]) -> String {
    let Some(&(top, _, _)) = path.first() else {
        return String::new();
    };
    let numbers = |rest: &[(u16, usize, &[u8])]| rest.iter().map(|(t, _, _)| t.to_string()).collect::<Vec<_>>();
    // NEWRULE's expressions and NEWSETELEM's elements are lists: name the
    // item, then number what lies inside it.
    let list = match (message, top) {
        (6..=8, 4) => Some("expression"),
        (12..=14, 3) => Some("element"),
        _ => None,
    };
    if let (Some(item), Some(&(_, index, value))) = (list, path.get(1)) {
        let mut out = format!("{item} {}", index + 1);
        if item == "expression"
            && let Some(expr) = Attributes(value)
                .find(|(t, _)| *t == 1)
                .and_then(|(_, v)| std::str::from_utf8(v).ok().map(|s| s.trim_end_matches('\0')))
        {
            out.push_str(&format!(" ({expr})"));
        }
        let inner = numbers(path.get(2..).unwrap_or_default());
        if !inner.is_empty() {
            out.push_str(&format!(", attribute {}", inner.join(".")));
        }
        return out;
    }
    let top_name = top_level_name(message, top).map_or_else(|| format!("attribute {top}"), str::to_owned);
    let inner = numbers(path.get(1..).unwrap_or_default());
    if inner.is_empty() {
        top_name
    } else {
        format!("{top_name}, attribute {}", inner.join("."))
    }
}

/// The name of a top-level attribute of an nftables message.
fn top_level_name(message: u16, kind: u16) -> Option<&'static str> {
    Some(match (message, kind) {
        (0..=2, 1) => "table name",
        (0..=2, 2) => "table flags",
        (3..=5, 1) => "table",
        (3..=5, 3) => "chain name",
        (3..=5, 4) => "chain hook",
        (3..=5, 5) => "chain policy",
        (3..=5, 7) => "chain type",
        (3..=5, 10) => "chain flags",
        (6..=8, 1) => "table",
        (6..=8, 2) => "chain",
        (6..=8, 3) => "rule handle",
        (6..=8, 6) => "rule position",
        (9..=11, 1) => "table",
        (9..=11, 2) => "set name",
        (9..=11, 3) => "set flags",
        (9..=11, 4) => "set key type",
        (9..=11, 5) => "set key length",
        (9..=11, 6) => "set data type",
        (9..=11, 7) => "set data length",
        (9..=11, 9) => "set description",
        (9..=11, 11) => "set timeout",
        (12..=14, 1) => "table",
        (12..=14, 2) => "set",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend(u16::try_from(4 + value.len()).unwrap().to_ne_bytes());
        out.extend(kind.to_ne_bytes());
        out.extend(value);
        out.resize(out.len().next_multiple_of(4), 0);
        out
    }

    /// A NEWRULE message: table, chain, two expressions (the second an
    /// immediate whose data holds a verdict with a chain name).
    fn rule() -> (Vec<u8>, usize) {
        let verdict = attr(
            2 | 0x8000,
            &[attr(1, &0u32.to_ne_bytes()), attr(2, b"nowhere\0")].concat(),
        );
        let immediate = attr(
            1,
            &[
                attr(1, b"immediate\0"),
                attr(
                    2 | 0x8000,
                    &[attr(1, &0u32.to_ne_bytes()), attr(2 | 0x8000, &verdict)].concat(),
                ),
            ]
            .concat(),
        );
        let counter = attr(1, &attr(1, b"counter\0"));
        let exprs = attr(4 | 0x8000, &[counter, immediate].concat());
        let body = [attr(1, b"proxyd\0"), attr(2, b"svc-x\0"), exprs].concat();
        let mut msg = Vec::new();
        msg.extend(u32::try_from(HEADER + NFGENMSG + body.len()).unwrap().to_ne_bytes());
        msg.extend(((10u16 << 8) | 6).to_ne_bytes());
        msg.extend([0u8; 10]);
        msg.extend([2u8, 0, 0, 0]);
        msg.extend(&body);
        // The verdict's chain name attribute: search for its bytes.
        let at = msg.windows(8).position(|w| w == b"nowhere\0").unwrap() - 4;
        (msg, at)
    }

    #[test]
    fn an_offset_is_named_in_nftables_terms() {
        let (msg, chain_name) = rule();
        assert_eq!(
            attribute_at(&msg, u32::try_from(chain_name).unwrap()).as_deref(),
            Some("expression 2 (immediate), attribute 2.2.2.2")
        );
        assert_eq!(attribute_at(&msg, 20).as_deref(), Some("table"));
        assert_eq!(attribute_at(&msg, 7), None, "not an attribute's start");
        assert_eq!(attribute_at(&msg, 1 << 20), None);
        assert_eq!(attribute_at(&msg[..10], 20), None, "a short message");
    }

    #[test]
    fn the_message_and_offset_are_read_from_the_error() {
        let mut payload = (-2i32).to_ne_bytes().to_vec();
        payload.extend([0u8; HEADER]);
        payload.extend(attr(ATTR_MSG, b"Chain not found\0"));
        payload.extend(attr(ATTR_OFFS, &84u32.to_ne_bytes()));
        let ext = parse(CAPPED | ACK_TLVS, &payload);
        assert_eq!(ext.message, Some("Chain not found"));
        assert_eq!(ext.offset, Some(84));
        assert_eq!(parse(CAPPED, &payload), Extack::default(), "no attributes flagged");
        for cut in 0..payload.len() {
            let _ = parse(CAPPED | ACK_TLVS, &payload[..cut]);
            let _ = parse(ACK_TLVS, &payload[..cut]);
        }
    }
}
