//! Test support: a scratch network namespace and running commands.

#![allow(dead_code, reason = "each test file uses part of it")]

use std::process::Command;

use linux_dataplane::Netns;

/// A scratch network namespace, deleted on drop.
pub struct Scratch(pub String);

impl Scratch {
    /// A new namespace named for `tag` and this process.
    pub fn new(tag: &str) -> Self {
        let name = format!("ld-{tag}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "delete", &name]).status();
        run(&["ip", "netns", "add", &name]);
        Self(name)
    }

    /// `ip -n NS ARGS`: its output.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["ip", "-n", &self.0];
        all.extend(args);
        run(&all)
    }

    /// A command run inside the namespace: its output.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut all = vec!["ip", "netns", "exec", &self.0];
        all.extend(args);
        run(&all)
    }

    /// The namespace, as the crate names it.
    pub fn netns(&self) -> Netns {
        Netns::Named(self.0.clone())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "delete", &self.0]).status();
    }
}

/// Runs a command that must succeed: its output.
pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("the command starts");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
