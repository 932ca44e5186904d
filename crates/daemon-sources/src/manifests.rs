//! Services, EndpointSlices, Nodes, ServiceCIDRs and Pods (for multus mode) from manifest files (YAML or JSON, one
//! or many documents, `List` objects too), for `--manifests`: the proxy
//! without an API server.
//!
//! A reload is handed to an [`EventFold`] as a
//! relist, so objects that vanished from the files become deletes and
//! changed ones updates, exactly as after a watch's relist.
//!
//! A daemon reads the files once ([`Texts`]), checks every object, then
//! converts them again one at a time as it hands them over
//! ([`Texts::for_each`]): a broken file changes nothing, and memory never
//! holds a cluster's worth of typed objects.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;

use informer_glue::fold::{EventFold, EventHandler, Keep};

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The path cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file is not YAML or JSON.
    #[error("{path}: not valid YAML or JSON: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A document is not a valid object of its kind.
    #[error("{path}: document {document} ({kind} {name}): {message}")]
    Object {
        /// The file.
        path: PathBuf,
        /// The document's position in the file (from 1).
        document: usize,
        /// Its kind.
        kind: String,
        /// Its namespace/name, as far as known.
        name: String,
        /// What is wrong.
        message: String,
    },
}

/// The objects of a set of manifests.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    /// Services (namespace defaulted to `default`).
    pub services: Vec<Service>,
    /// EndpointSlices (namespace defaulted to `default`).
    pub slices: Vec<EndpointSlice>,
    /// Nodes (for the proxy's own zone label).
    pub nodes: Vec<Node>,
    /// Pods (namespace defaulted to `default`; multus mode).
    pub pods: Vec<Pod>,
    /// The ranges of the ServiceCIDRs, each object's.
    pub service_cidrs: Vec<Vec<IpNet>>,
    /// Documents of other kinds, skipped: `path: kind name`.
    pub skipped: Vec<String>,
}

impl Manifests {
    /// The zone label (`topology.kubernetes.io/zone`) of node `name`.
    pub fn node_zone(&self, name: &str) -> Option<String> {
        informer_glue::node::zone_of_named(&self.nodes, name)
    }

    /// The union of the ServiceCIDRs' ranges.
    pub fn service_cidrs(&self) -> Vec<IpNet> {
        informer_glue::service_cidr::union(self.service_cidrs.iter().map(Vec::as_slice))
    }
}

/// What a checking pass over [`Texts`] found: counts, the (few) Nodes and
/// the skipped documents, without keeping the Services and slices.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Services.
    pub services: usize,
    /// EndpointSlices.
    pub slices: usize,
    /// Nodes (for the proxy's own zone label).
    pub nodes: Vec<Node>,
    /// Pods.
    pub pods: usize,
    /// The ranges of the ServiceCIDRs, each object's.
    pub service_cidrs: Vec<Vec<IpNet>>,
    /// Documents of other kinds, skipped: `path: kind name`.
    pub skipped: Vec<String>,
}

impl Summary {
    /// The zone label (`topology.kubernetes.io/zone`) of node `name`.
    pub fn node_zone(&self, name: &str) -> Option<String> {
        informer_glue::node::zone_of_named(&self.nodes, name)
    }

    /// The union of the ServiceCIDRs' ranges.
    pub fn service_cidrs(&self) -> Vec<IpNet> {
        informer_glue::service_cidr::union(self.service_cidrs.iter().map(Vec::as_slice))
    }
}

/// One object read from a manifest (boxed: the k8s-openapi types are
/// hundreds of bytes each, and of very different sizes).
#[derive(Clone, Debug)]
pub enum Object {
    /// A Service (namespace defaulted to `default`).
    Service(Box<Service>),
    /// An EndpointSlice (namespace defaulted to `default`).
    Slice(Box<EndpointSlice>),
    /// A Node.
    Node(Box<Node>),
    /// A Pod (namespace defaulted to `default`).
    Pod(Box<Pod>),
    /// A ServiceCIDR's ranges.
    ServiceCidr(Vec<IpNet>),
    /// A document of another kind, skipped: `path: kind name`.
    Skipped(String),
}

impl Manifests {
    fn add(&mut self, object: Object) {
        match object {
            Object::Service(s) => self.services.push(*s),
            Object::Slice(s) => self.slices.push(*s),
            Object::Node(n) => self.nodes.push(*n),
            Object::Pod(p) => self.pods.push(*p),
            Object::ServiceCidr(c) => self.service_cidrs.push(c),
            Object::Skipped(s) => self.skipped.push(s),
        }
    }
}

/// The text of every manifest file under a path, read once, so that
/// checking the objects and handing them over see the same bytes.
#[derive(Clone, Debug, Default)]
pub struct Texts {
    files: Vec<(PathBuf, String)>,
}

impl Texts {
    /// Reads the files under `path` (see [`files`]).
    pub fn read(path: &Path) -> Result<Self, ManifestError> {
        let files = files(path)?
            .into_iter()
            .map(|file| match std::fs::read_to_string(&file) {
                Ok(text) => Ok((file, text)),
                Err(source) => Err(ManifestError::Io { path: file, source }),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { files })
    }

    /// Converts every object once and drops it: the whole set is valid, or
    /// the first error says where it is not.
    pub fn check(&self) -> Result<Summary, ManifestError> {
        let mut summary = Summary::default();
        self.for_each(|o| match o {
            Object::Service(_) => summary.services += 1,
            Object::Slice(_) => summary.slices += 1,
            Object::Node(n) => summary.nodes.push(*n),
            Object::Pod(_) => summary.pods += 1,
            Object::ServiceCidr(c) => summary.service_cidrs.push(c),
            Object::Skipped(s) => summary.skipped.push(s),
        })?;
        Ok(summary)
    }

    /// Converts the objects one at a time, in file order, and hands each to
    /// `f`; stops at the first error (after handing over what came before
    /// it, so check with a first pass when that matters).
    pub fn for_each(&self, mut f: impl FnMut(Object)) -> Result<(), ManifestError> {
        self.files
            .iter()
            .try_for_each(|(file, text)| parse_each(file, text, &mut f))
    }
}

/// The manifest files under `path`: the file itself, or the `.yaml`,
/// `.yml` and `.json` files in the directory and its subdirectories, sorted.
pub fn files(path: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let io = |source| ManifestError::Io {
        path: path.to_owned(),
        source,
    };
    if !std::fs::metadata(path).map_err(io)?.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut out = Vec::new();
    let mut dirs = vec![path.to_owned()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| ManifestError::Io {
            path: dir.clone(),
            source,
        })?;
        for entry in entries {
            let p = entry
                .map_err(|source| ManifestError::Io {
                    path: dir.clone(),
                    source,
                })?
                .path();
            if p.is_dir() {
                dirs.push(p);
            } else if p
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// What the files under `path` look like now (names, sizes, times): a
/// cheap way to notice edits.
pub fn fingerprint(path: &Path) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    files(path)
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let meta = std::fs::metadata(&p).ok();
            let len = meta.as_ref().map_or(0, |m| m.len());
            let modified = meta.and_then(|m| m.modified().ok());
            (p, len, modified)
        })
        .collect()
}

/// Reads every manifest under `path`. Any error fails the whole load, so a
/// half-written file never makes objects disappear.
pub fn load(path: &Path) -> Result<Manifests, ManifestError> {
    let mut out = Manifests::default();
    Texts::read(path)?.for_each(|o| out.add(o))?;
    Ok(out)
}

/// YAML limits for manifests: large enough for a cluster's worth of
/// objects in one file (the parser's defaults stop at 250,000 nodes), while
/// keeping the defaults that stop alias and nesting bombs.
fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    // YAML 1.2 booleans only: a namespace or label value `n`, `no`, `on` or
    // `y` stays a string.
    options.strict_booleans = true;
    if let Some(budget) = options.budget.as_mut() {
        budget.max_events = 200_000_000;
        budget.max_nodes = 100_000_000;
        budget.max_documents = 10_000_000;
        budget.max_total_scalar_bytes = 1 << 32;
    }
    options
}

fn is_json(file: &Path, text: &str) -> bool {
    file.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with(['{', '['])
}

/// Parses one file's text into `out`: JSON (one or more values) for `.json`
/// files and text starting with `{` or `[`, else YAML (one or more
/// documents).
pub fn parse_into(file: &Path, text: &str, out: &mut Manifests) -> Result<(), ManifestError> {
    parse_each(file, text, &mut |o| out.add(o))
}

/// Parses one file's text (as [`parse_into`]), handing each object to `f`
/// as soon as it is converted.
pub fn parse_each(file: &Path, text: &str, f: &mut impl FnMut(Object)) -> Result<(), ManifestError> {
    let syntax = |message: String| ManifestError::Syntax {
        path: file.to_owned(),
        message: one_line(&message),
    };
    if is_json(file, text) {
        // Straight into the typed objects, without a `Value` tree: a
        // cluster's worth of JSON would otherwise cost several times its
        // size in memory.
        for (i, raw) in serde_json::Deserializer::from_str(text)
            .into_iter::<&RawValue>()
            .enumerate()
        {
            let raw = raw.map_err(|e| syntax(e.to_string()))?;
            add_document(file, i + 1, Doc::Json(raw), f)?;
        }
        return Ok(());
    }
    let docs: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, yaml_options()).map_err(|e| syntax(e.to_string()))?;
    for (i, doc) in docs.into_iter().enumerate() {
        add_document(file, i + 1, Doc::Yaml(doc), f)?;
    }
    Ok(())
}

/// One document: a YAML tree, or raw JSON text parsed only as needed.
enum Doc<'a> {
    Yaml(Value),
    Json(&'a RawValue),
}

#[derive(Deserialize, Default)]
struct Head {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<HeadMeta>,
}

#[derive(Deserialize, Default)]
struct HeadMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Deserialize)]
struct ListItems<'a> {
    #[serde(default, borrow)]
    items: Option<Vec<&'a RawValue>>,
}

impl<'a> Doc<'a> {
    fn head(&self) -> Head {
        match self {
            Doc::Yaml(v) => Head::deserialize(v).unwrap_or_default(),
            Doc::Json(raw) => serde_json::from_str(raw.get()).unwrap_or_default(),
        }
    }

    fn is_null(&self) -> bool {
        match self {
            Doc::Yaml(v) => v.is_null(),
            Doc::Json(raw) => raw.get().trim() == "null",
        }
    }

    fn items(self) -> Result<Vec<Doc<'a>>, String> {
        match self {
            Doc::Yaml(mut v) => match v.get_mut("items").map(Value::take) {
                Some(Value::Array(items)) => Ok(items.into_iter().map(Doc::Yaml).collect()),
                Some(Value::Null) | None => Ok(Vec::new()),
                Some(_) => Err("items: expected a list".into()),
            },
            Doc::Json(raw) => {
                let list: ListItems<'a> = serde_json::from_str(raw.get()).map_err(|e| format!("items: {e}"))?;
                Ok(list.items.unwrap_or_default().into_iter().map(Doc::Json).collect())
            }
        }
    }

    /// Converts with the failing field's path in the message
    /// (`spec.ports[0].port: invalid type …`). Tracking the path slows
    /// every field down, so only a document that failed without it is
    /// converted again with it.
    fn typed<K: DeserializeOwned>(self) -> Result<K, String> {
        let path = |e: serde_path_to_error::Error<_>| format!("{}: {}", e.path(), e.inner());
        match self {
            Doc::Yaml(v) => K::deserialize(&v).or_else(|_| serde_path_to_error::deserialize(v).map_err(path)),
            Doc::Json(raw) => serde_json::from_str(raw.get()).or_else(|_| {
                serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(raw.get())).map_err(path)
            }),
        }
    }
}

/// A parser's message on one line: its first line, without the `error:`
/// prefix and the source excerpt some parsers add below it.
fn one_line(message: &str) -> String {
    let first = message.lines().next().unwrap_or_default().trim();
    first.strip_prefix("error:").unwrap_or(first).trim().to_owned()
}

/// `metadata.namespace` defaults to `default`, as kubectl applies it.
fn default_namespace(meta: &mut ObjectMeta) {
    if meta.namespace.as_deref().is_none_or(str::is_empty) {
        meta.namespace = Some("default".into());
    }
}

fn add_document(file: &Path, document: usize, doc: Doc<'_>, f: &mut impl FnMut(Object)) -> Result<(), ManifestError> {
    if doc.is_null() {
        return Ok(()); // an empty document, e.g. after a trailing `---`
    }
    let head = doc.head();
    let kind = head.kind.unwrap_or_default();
    let meta = head.metadata.unwrap_or_default();
    let namespaced = !matches!(kind.as_str(), "Node" | "ServiceCIDR") && !kind.ends_with("List");
    let name = match (meta.namespace, meta.name) {
        (Some(ns), Some(n)) => format!("{ns}/{n}"),
        (None, Some(n)) if namespaced => format!("default/{n}"),
        (None, Some(n)) => n,
        _ => "(no name)".into(),
    };
    let fail = |message: String| ManifestError::Object {
        path: file.to_owned(),
        document,
        kind: if kind.is_empty() {
            "(no kind)".into()
        } else {
            kind.clone()
        },
        name: name.clone(),
        message,
    };
    let needs_name = matches!(
        kind.as_str(),
        "Service" | "EndpointSlice" | "Node" | "Pod" | "ServiceCIDR"
    );
    if needs_name && name == "(no name)" {
        return Err(fail("metadata.name is missing".into()));
    }
    if kind.ends_with("List") {
        for item in doc.items().map_err(fail)? {
            add_document(file, document, item, f)?;
        }
        return Ok(());
    }
    match kind.as_str() {
        "Service" => {
            let mut svc: Service = doc.typed().map_err(fail)?;
            default_namespace(&mut svc.metadata);
            f(Object::Service(Box::new(svc)));
        }
        "EndpointSlice" => {
            let mut slice: EndpointSlice = doc.typed().map_err(fail)?;
            default_namespace(&mut slice.metadata);
            f(Object::Slice(Box::new(slice)));
        }
        "Node" => f(Object::Node(Box::new(doc.typed().map_err(fail)?))),
        "Pod" => {
            let mut pod: Pod = doc.typed().map_err(fail)?;
            default_namespace(&mut pod.metadata);
            f(Object::Pod(Box::new(pod)));
        }
        "ServiceCIDR" => {
            let obj: ServiceCIDR = doc.typed().map_err(fail)?;
            // A range that is not a CIDR fails the file, as any bad field.
            let (cidrs, warnings) = informer_glue::service_cidr::cidrs_of(&obj);
            if let Some(w) = warnings.first() {
                return Err(fail(w.clone()));
            }
            f(Object::ServiceCidr(cidrs));
        }
        "" => return Err(fail("no `kind`".into())),
        other => f(Object::Skipped(format!("{}: {other} {name}", file.display()))),
    }
    Ok(())
}

/// Hands a complete set of objects to `fold` as a relist: new objects are
/// added, changed ones updated, and ones no longer present deleted.
pub fn relist<K, P: Keep<K>>(
    fold: &mut EventFold<K, P>,
    objects: impl IntoIterator<Item = K>,
    handler: &mut impl EventHandler<K>,
) where
    K: kube::Resource + Clone,
    K::DynamicType: Default,
{
    fold.apply(Event::Init, handler);
    for obj in objects {
        fold.apply(Event::InitApply(obj), handler);
    }
    fold.apply(Event::InitDone, handler);
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 10.96.0.10
  ports: [{port: 80, protocol: TCP}]
---
apiVersion: v1
kind: List
items:
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: web-1
    namespace: shop
    labels: {kubernetes.io/service-name: web}
  addressType: IPv4
  endpoints: [{addresses: [10.1.0.1]}]
  ports: [{port: 8080}]
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: other}
---
apiVersion: v1
kind: Node
metadata:
  name: node-1
  labels: {topology.kubernetes.io/zone: zone-a}
---
"#;

    #[test]
    fn yaml_documents_and_lists_are_read() {
        let mut m = Manifests::default();
        parse_into(Path::new("x.yaml"), TEXT, &mut m).unwrap();
        assert_eq!(m.services.len(), 1);
        assert_eq!(m.services[0].metadata.namespace.as_deref(), Some("default"));
        assert_eq!(m.slices[0].metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(m.skipped, ["x.yaml: ConfigMap default/other"]);
        assert_eq!(m.node_zone("node-1").as_deref(), Some("zone-a"));
        assert_eq!(m.node_zone("node-2"), None);
    }

    #[test]
    fn texts_are_checked_whole_then_streamed() {
        let dir = std::env::temp_dir().join(format!("manifests-texts-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a.yaml"), TEXT).unwrap();
        std::fs::write(
            dir.join("sub/b.json"),
            r#"{"kind":"Service","metadata":{"name":"b","namespace":"n"},"spec":{"clusterIP":"10.0.0.2"}}"#,
        )
        .unwrap();
        let texts = Texts::read(&dir).unwrap();
        let summary = texts.check().unwrap();
        assert_eq!((summary.services, summary.slices), (2, 1));
        assert_eq!(summary.node_zone("node-1").as_deref(), Some("zone-a"));
        assert_eq!(summary.skipped.len(), 1);
        let mut seen = Vec::new();
        texts
            .for_each(|o| {
                seen.push(match o {
                    Object::Service(s) => format!("svc {}", s.metadata.name.unwrap_or_default()),
                    Object::Slice(s) => format!("slice {}", s.metadata.name.unwrap_or_default()),
                    Object::Node(n) => format!("node {}", n.metadata.name.unwrap_or_default()),
                    Object::Pod(p) => format!("pod {}", p.metadata.name.unwrap_or_default()),
                    Object::ServiceCidr(c) => format!("service cidrs {c:?}"),
                    Object::Skipped(s) => format!("skipped {s}"),
                });
            })
            .unwrap();
        assert_eq!(seen.len(), 5, "{seen:?}");
        assert_eq!(seen[0], "svc web");
        assert_eq!(seen[4], "svc b", "files in path order, documents in file order");

        // A broken second file: the check fails and names it.
        std::fs::write(
            dir.join("sub/b.json"),
            r#"{"kind":"Service","metadata":{"name":"b"},"spec":{"ports":7}}"#,
        )
        .unwrap();
        let e = Texts::read(&dir).unwrap().check().unwrap_err().to_string();
        assert!(
            e.contains("b.json") && e.contains("Service default/b") && e.contains("spec.ports"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn service_cidrs_are_read_and_a_bad_range_names_its_object() {
        let mut m = Manifests::default();
        let text = "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {name: kubernetes}\n\
                    spec: {cidrs: [10.96.0.0/16, 'fd00:96::/112']}\n---\nkind: ServiceCIDR\n\
                    metadata: {name: extra}\nspec: {cidrs: [10.97.0.0/16, 10.96.0.0/16]}\n";
        parse_into(Path::new("cidrs.yaml"), text, &mut m).unwrap();
        assert_eq!(
            m.service_cidrs().iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["10.96.0.0/16", "10.97.0.0/16", "fd00:96::/112"]
        );
        let bad = "kind: ServiceCIDR\nmetadata: {name: broken}\nspec: {cidrs: [10.96.0.0]}\n";
        let e = parse_into(Path::new("bad.yaml"), bad, &mut m).unwrap_err().to_string();
        assert!(
            e.contains("bad.yaml") && e.contains("ServiceCIDR broken") && e.contains("spec.cidrs[0]"),
            "{e}"
        );
    }

    #[test]
    fn yaml_one_one_booleans_stay_strings() {
        let mut m = Manifests::default();
        let text = "kind: Service\nmetadata: {name: y, namespace: no, labels: {a: on}}\nspec: {clusterIP: 10.0.0.1}\n";
        parse_into(Path::new("a.yaml"), text, &mut m).unwrap();
        assert_eq!(m.services[0].metadata.namespace.as_deref(), Some("no"));
        assert_eq!(m.services[0].metadata.name.as_deref(), Some("y"));
    }

    #[test]
    fn json_is_yaml_too() {
        let mut m = Manifests::default();
        let json = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"n"},"spec":{"clusterIP":"10.0.0.1"}}"#;
        parse_into(Path::new("a.json"), json, &mut m).unwrap();
        assert_eq!(m.services[0].metadata.name.as_deref(), Some("a"));
    }

    #[test]
    fn large_files_are_read() {
        let mut yaml = String::new();
        let mut json = String::from("[");
        for i in 0..3000 {
            yaml.push_str(&format!(
                "---\nkind: Service\nmetadata: {{name: s{i}, namespace: n}}\nspec: {{clusterIP: 10.0.0.1, ports: [{{port: 80}}, {{port: 81}}, {{port: 82}}]}}\n"
            ));
            json.push_str(&format!(
                "{}{{\"kind\":\"List\",\"items\":[{{\"kind\":\"Service\",\"metadata\":{{\"name\":\"j{i}\"}},\"spec\":{{\"ports\":[{{\"port\":80}}]}}}}]}}",
                if i == 0 { "" } else { "," }
            ));
        }
        json.push(']');
        let mut m = Manifests::default();
        parse_into(Path::new("big.yaml"), &yaml, &mut m).unwrap();
        assert_eq!(m.services.len(), 3000);
        // A top-level JSON array is not an object: each element is read.
        let e = parse_into(Path::new("big.json"), &json, &mut m)
            .unwrap_err()
            .to_string();
        assert!(e.contains("(no kind)"), "{e}");
        let json = json
            .trim_start_matches('[')
            .trim_end_matches(']')
            .replace("},{\"kind\":\"List\"", "}\n{\"kind\":\"List\"");
        parse_into(Path::new("big.json"), &json, &mut m).unwrap();
        assert_eq!(m.services.len(), 6000, "concatenated JSON values");
    }

    #[test]
    fn errors_name_the_file_document_and_object() {
        let mut m = Manifests::default();
        let bad = "kind: Service\nmetadata: {name: web}\nspec: {ports: [{port: eighty}]}\n";
        let e = parse_into(Path::new("svc.yaml"), bad, &mut m).unwrap_err().to_string();
        assert_eq!(
            e,
            "svc.yaml: document 1 (Service default/web): spec.ports[0].port: invalid type: string \"eighty\", expected i32"
        );
        let e = parse_into(Path::new("b.yaml"), "a: [unclosed", &mut m)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("b.yaml: not valid YAML or JSON"), "{e}");
        let e = parse_into(Path::new("c.yaml"), "metadata: {name: x}\n", &mut m)
            .unwrap_err()
            .to_string();
        assert!(e.contains("(no kind)") && e.contains("no `kind`"), "{e}");
    }
}
