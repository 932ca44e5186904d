//! Long lists in what people read (`render`'s services table, `explain`):
//! the largest objects the API server accepts make lists of thousands, so
//! by default a list shows its first few items and how many there are, and
//! no line grows with an object's size.

/// How much of a long list a table or an explanation shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// Every item.
    All,
    /// The first this many, and how many there are.
    First(usize),
}

impl Shown {
    /// `items` as one cell: all of them, or the first few and the count
    /// (`10,000 endpoints (first 8: …)`), so that no line grows with the
    /// largest object the API server accepts.
    pub fn list(self, items: impl ExactSizeIterator<Item = String>, what: &str) -> String {
        self.joined(items, what, " ")
    }

    /// As [`Shown::list`], the items joined by `separator`.
    pub fn joined(self, items: impl ExactSizeIterator<Item = String>, what: &str, separator: &str) -> String {
        let total = items.len();
        match self {
            Self::First(n) if total > n => {
                let first: Vec<String> = items.take(n).collect();
                format!("{} {what} (first {n}: {})", thousands(total), first.join(separator))
            }
            _ => items.collect::<Vec<_>>().join(separator),
        }
    }
}

/// `10000` as `10,000`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `line` cut to at most `max` characters, saying how much was left out
/// (a rule holding a 10,000-element inline map is a 1.6 MB line).
pub fn cut(line: &str, max: usize) -> String {
    match line.char_indices().nth(max) {
        Some((at, _)) => format!(
            "{}… ({} more characters; `proxyd render --nft-only` prints it whole)",
            &line[..at],
            thousands(line.len() - at)
        ),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lists_show_their_first_items_and_their_count() {
        let items = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>().into_iter();
        assert_eq!(Shown::First(3).list(items(3), "endpoints"), "0 1 2");
        assert_eq!(
            Shown::First(3).list(items(1_234), "endpoints"),
            "1,234 endpoints (first 3: 0 1 2)"
        );
        assert_eq!(Shown::All.list(items(5), "endpoints"), "0 1 2 3 4");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(cut("abcdef", 10), "abcdef");
        assert!(cut(&"x".repeat(5_000), 10).starts_with("xxxxxxxxxx… (4,990 more characters"));
    }
}
