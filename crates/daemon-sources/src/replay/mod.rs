//! A recorded JSON-lines watch trace replayed through the cache and the
//! endpoints map, writing what the proxy would see after each sync: the
//! engine of `proxyd replay`, whose input and output are a stable contract
//! (`docs/replay-format.md` in the repository).

pub mod output;
pub mod timing;

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};

use endpoints_map::{EndpointsMap, UpdateResult};
use informer_glue::wire::WireObject;
use slice_cache::EndpointSliceCache;
use slice_model::{Interner, IpFamily, ServiceInfo, ServiceName};

use informer_glue::wire::event::{Action, Event, decode_line};
use timing::{Timing, timed};

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A line is not a usable watch event.
    #[error("line {line}: {message}")]
    Line {
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        message: String,
    },
    /// Reading the input or writing the output failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Options of a replay.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The proxy's node.
    pub node_name: String,
    /// The family served.
    pub family: IpFamily,
    /// Print only the last sync's line.
    pub final_only: bool,
    /// Print no warnings.
    pub quiet: bool,
}

/// The state of a replay: the same cache and map the daemon uses.
pub struct Replayer<W: Write> {
    cache: EndpointSliceCache,
    map: EndpointsMap,
    interner: Interner,
    /// Services are tracked but do not change the output ([rule 10](slice_model::rules)).
    services: BTreeMap<ServiceName, ServiceInfo>,
    opts: Options,
    out: W,
    warn: Box<dyn FnMut(&str)>,
    /// Counters and phase times.
    pub timing: Timing,
    saw_sync: bool,
    events_since_sync: bool,
    last: Option<UpdateResult>,
}

impl<W: Write> Replayer<W> {
    /// A replayer writing sync lines to `out` and warnings to `warn`.
    pub fn new(opts: Options, out: W, warn: Box<dyn FnMut(&str)>) -> Self {
        Self {
            cache: EndpointSliceCache::new(opts.node_name.as_str(), opts.family),
            map: EndpointsMap::new(),
            interner: Interner::new(),
            services: BTreeMap::new(),
            opts,
            out,
            warn,
            timing: Timing::default(),
            saw_sync: false,
            events_since_sync: false,
            last: None,
        }
    }

    /// The services seen so far.
    pub fn services(&self) -> &BTreeMap<ServiceName, ServiceInfo> {
        &self.services
    }

    fn warn(&mut self, line: u64, msg: impl std::fmt::Display) {
        if !self.opts.quiet {
            (self.warn)(&format!("line {line}: {msg}"));
        }
    }

    /// Replays a whole input and runs the final sync.
    pub fn run(&mut self, input: impl Read) -> Result<(), ReplayError> {
        let mut reader = BufReader::with_capacity(1 << 20, input);
        // Lines are handled where they lie in the read buffer; only a line
        // that straddles two reads is copied, into `partial`.
        let mut partial = Vec::new();
        let mut line_no = 0u64;
        loop {
            let buf = reader.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            let mut start = 0;
            for end in memchr::memchr_iter(b'\n', buf) {
                line_no += 1;
                if partial.is_empty() {
                    self.line(line_no, &buf[start..end])?;
                } else {
                    partial.extend_from_slice(&buf[start..end]);
                    self.line(line_no, &partial)?;
                    partial.clear();
                }
                start = end + 1;
            }
            partial.extend_from_slice(&buf[start..]);
            let read = buf.len();
            reader.consume(read);
        }
        if !partial.is_empty() {
            line_no += 1;
            self.line(line_no, &partial)?;
        }
        self.finish()
    }

    /// Handles one line of input.
    pub fn line(&mut self, line_no: u64, line: &[u8]) -> Result<(), ReplayError> {
        let line = line.trim_ascii();
        if line.is_empty() {
            return Ok(());
        }
        let event = timed(&mut self.timing.decode_ns, || decode_line(line)).map_err(|e| ReplayError::Line {
            line: line_no,
            message: e.0,
        })?;
        match event {
            Event::Sync => self.sync()?,
            Event::Bookmark => {}
            Event::Object(action, object) => {
                self.timing.events += 1;
                self.events_since_sync = true;
                match object.kind() {
                    "EndpointSlice" => self.slice(line_no, action, &object),
                    "Service" => self.service(line_no, action, &object),
                    kind => self.warn(
                        line_no,
                        format_args!("skipping {action:?} event for an object of kind {kind:?}"),
                    ),
                }
            }
        }
        Ok(())
    }

    fn slice(&mut self, line_no: u64, action: Action, object: &WireObject<'_>) {
        let mut update_ns = 0;
        let outcome = timed(&mut update_ns, || match action {
            Action::Deleted => match object.deleted_slice_name() {
                Ok(name) => {
                    self.cache.remove(&name);
                    Ok(Vec::new())
                }
                Err(e) => Err(e.to_string()),
            },
            Action::Added | Action::Modified => match object.to_slice(&mut self.interner) {
                Ok((slice, warnings)) => {
                    self.cache.update(slice);
                    Ok(warnings.iter().map(ToString::to_string).collect())
                }
                Err(e) => Err(e.to_string()),
            },
        });
        self.timing.update_ns += update_ns;
        match outcome {
            Ok(warnings) => warnings.iter().for_each(|w| self.warn(line_no, w)),
            Err(e) => self.warn(line_no, e),
        }
    }

    fn service(&mut self, line_no: u64, action: Action, object: &WireObject<'_>) {
        if action == Action::Deleted {
            if let Some(name) = object.name() {
                self.services.remove(&ServiceName::from(name));
            }
            return;
        }
        match object.to_service() {
            Ok((info, warnings)) => {
                warnings.iter().for_each(|w| self.warn(line_no, w));
                self.services.insert(info.name.clone(), info);
            }
            Err(e) => self.warn(line_no, e),
        }
    }

    /// Applies pending changes and prints (or keeps) the sync's line.
    pub fn sync(&mut self) -> Result<(), ReplayError> {
        let result = timed(&mut self.timing.sync_ns, || {
            let result = self.map.update(&mut self.cache);
            self.interner.prune_if_grown();
            result
        });
        self.timing.syncs += 1;
        self.saw_sync = true;
        self.events_since_sync = false;
        if self.opts.final_only {
            self.last = Some(result);
        } else {
            output::write_sync_line(&mut self.out, &self.map, &result)?;
        }
        Ok(())
    }

    /// Runs the implicit final sync if one is due and prints the final line
    /// in `--final-only` mode.
    pub fn finish(&mut self) -> Result<(), ReplayError> {
        if !self.saw_sync || self.events_since_sync {
            self.sync()?;
        }
        if let Some(result) = self.last.take() {
            output::write_sync_line(&mut self.out, &self.map, &result)?;
        }
        self.out.flush()?;
        Ok(())
    }

    /// Flushes what was written so far.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use proptest::prelude::*;

    use super::*;

    /// Hands out `data` a few bytes per read, so that lines straddle reads.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        sizes: Vec<usize>,
        reads: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let size = self.sizes[self.reads % self.sizes.len()];
            self.reads += 1;
            let n = size.min(buf.len()).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    /// What a replay printed and warned, and how it ended.
    fn replayed(
        drive: impl FnOnce(&mut Replayer<Vec<u8>>) -> Result<(), ReplayError>,
    ) -> (String, Vec<String>, String) {
        let warnings = Rc::new(RefCell::new(Vec::new()));
        let seen = warnings.clone();
        let opts = Options {
            node_name: "node-1".into(),
            ..Options::default()
        };
        let mut r = Replayer::new(
            opts,
            Vec::new(),
            Box::new(move |w| seen.borrow_mut().push(w.to_owned())),
        );
        let end = match drive(&mut r) {
            Ok(()) => "ok".to_owned(),
            Err(e) => e.to_string(),
        };
        let out = String::from_utf8_lossy(&r.out).into_owned();
        let warned = warnings.borrow().clone();
        (out, warned, end)
    }

    const LINES: &[&str] = &[
        r#"{"type":"ADDED","object":{"kind":"EndpointSlice","metadata":{"name":"s","namespace":"n","labels":{"kubernetes.io/service-name":"svc"}},"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.1"],"nodeName":"node-1"}],"ports":[{"name":"p","port":80}]}}"#,
        r#"{"type":"MODIFIED","object":{"kind":"EndpointSlice","metadata":{"name":"s","namespace":"n","labels":{"kubernetes.io/service-name":"svc"}},"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.2"]}],"ports":[{"name":"p","port":80}]}}"#,
        r#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"x","namespace":"n"}}}"#,
        r#"{"type":"SYNC"}"#,
        "",
        "\r",
        "  ",
        r#"{"type":"ERROR","object":{}}"#,
    ];

    proptest! {
        #[test]
        fn lines_that_straddle_reads_replay_as_whole_lines(
            picks in prop::collection::vec(0..LINES.len(), 0..12),
            trailing_newline in any::<bool>(),
            sizes in prop::collection::vec(1usize..40, 1..5),
        ) {
            let mut text = picks.iter().map(|i| LINES[*i]).collect::<Vec<_>>().join("\n");
            if trailing_newline {
                text.push('\n');
            }
            let trickled = replayed(|r| r.run(Trickle { data: text.clone().into_bytes(), at: 0, sizes, reads: 0 }));
            // The reference: every newline-separated piece is a line, the
            // last one too unless it is empty.
            let by_line = replayed(|r| {
                let mut pieces: Vec<&str> = text.split('\n').collect();
                if pieces.last() == Some(&"") {
                    pieces.pop();
                }
                for (i, piece) in pieces.iter().enumerate() {
                    r.line(i as u64 + 1, piece.as_bytes())?;
                }
                r.finish()
            });
            prop_assert_eq!(trickled, by_line);
        }
    }
}
