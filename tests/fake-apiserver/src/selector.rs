//! Equality-based label selectors (`a=b`, `a==b`, `a!=b`, `a`, `!a`), the
//! subset kube-proxy and the tests use.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
}

/// A parsed selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(Vec<Requirement>);

impl Selector {
    /// Parses a selector; set-based forms (`in`, `notin`) are not supported.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if part.contains(' ') || part.contains('(') {
                return Err(format!("unsupported label selector requirement {part:?}"));
            } else {
                Requirement::Exists(part.to_owned())
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether an object's `metadata.labels` match.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_match_like_the_api_server() {
        let obj = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let none = json!({"metadata": {}});
        let m = |s: &str, o: &Value| Selector::parse(s).unwrap().matches(o);
        assert!(m("", &obj) && m("", &none));
        assert!(m("a", &obj) && !m("a", &none));
        assert!(m("!c", &obj) && !m("!a", &obj));
        assert!(m("a=1,b==2", &obj) && !m("a=2", &obj));
        assert!(m("a!=2", &obj) && m("a!=2", &none) && !m("a!=1", &obj));
        assert!(Selector::parse("a in (x)").is_err());
    }
}
