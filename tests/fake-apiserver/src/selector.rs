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

/// A parsed label selector, with field requirements (`spec.nodeName=X`,
/// `!=`) when a `fieldSelector` was given; the empty selector matches
/// everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(Vec<Requirement>, Vec<Requirement>);

/// The fields the API server lets a field selector name (for the kinds
/// served here).
const FIELDS: [&str; 4] = ["metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"];

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
        Ok(Self(reqs, Vec::new()))
    }

    /// Adds a field selector (`a.b=v`, `a.b==v`, `a.b!=v`); a field the
    /// API server does not index is refused, as the server does.
    pub fn with_fields(mut self, s: &str) -> Result<Self, String> {
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let req = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else {
                return Err(format!("invalid field selector requirement {part:?}"));
            };
            let (Requirement::Equals(k, _)
            | Requirement::NotEquals(k, _)
            | Requirement::Exists(k)
            | Requirement::NotExists(k)) = &req;
            if !FIELDS.contains(&k.as_str()) {
                return Err(format!("field label not supported: {k}"));
            }
            self.1.push(req);
        }
        Ok(self)
    }

    /// Whether an object's `metadata.labels` (and fields) match.
    pub fn matches(&self, obj: &Value) -> bool {
        let label = |k: &str| {
            obj.pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        // A field that is not set compares as the empty string.
        let field = |k: &str| {
            let pointer = format!("/{}", k.replace('.', "/"));
            Some(obj.pointer(&pointer).and_then(Value::as_str).unwrap_or("").to_owned())
        };
        self.0.iter().all(|r| holds(r, &label)) && self.1.iter().all(|r| holds(r, &field))
    }
}

fn holds(r: &Requirement, get: &dyn Fn(&str) -> Option<String>) -> bool {
    match r {
        Requirement::Exists(k) => get(k).is_some(),
        Requirement::NotExists(k) => get(k).is_none(),
        Requirement::Equals(k, v) => get(k).as_deref() == Some(v.as_str()),
        Requirement::NotEquals(k, v) => get(k).as_deref() != Some(v.as_str()),
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

    #[test]
    fn field_selectors_match_the_indexed_fields() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "node-1"}});
        let unscheduled = json!({"metadata": {"name": "q"}, "spec": {}});
        let f = |s: &str, o: &Value| Selector::default().with_fields(s).unwrap().matches(o);
        assert!(f("spec.nodeName=node-1", &pod) && !f("spec.nodeName=node-2", &pod));
        assert!(!f("spec.nodeName=node-1", &unscheduled) && f("spec.nodeName=", &unscheduled));
        assert!(f("spec.nodeName!=node-2,metadata.name==p", &pod));
        assert!(
            Selector::default().with_fields("spec.hostNetwork=true").is_err(),
            "not indexed"
        );
    }
}
