//! How a file is opened: [`OpenOptions`].

use crate::ra::PolicyKind;
use crate::Mode;

/// How [`Engine::open_with`](crate::Engine::open_with) opens a file.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OpenOptions {
    /// Direct (the default), Buffered or Uncached.
    pub mode: Mode,
    /// The readahead policy; `None` takes the engine's.
    pub policy: Option<PolicyKind>,
    /// Buffered mode: send kernel hints for the streams the kernel does not
    /// detect (on by default).
    pub hints: bool,
    /// Uncached mode: use `RWF_DONTCACHE` where the kernel and file system
    /// have it (on by default); off, the residency fallback is used.
    pub dontcache: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            mode: Mode::Direct,
            policy: None,
            hints: true,
            dontcache: true,
        }
    }
}

impl OpenOptions {
    /// The defaults: Direct mode, the engine's policy, hints on.
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }
    /// Sets the mode.
    pub fn mode(mut self, mode: Mode) -> OpenOptions {
        self.mode = mode;
        self
    }
    /// Sets the readahead policy.
    pub fn policy(mut self, policy: PolicyKind) -> OpenOptions {
        self.policy = Some(policy);
        self
    }
    /// Lets Uncached mode use `RWF_DONTCACHE` (on) or always the residency
    /// fallback (off).
    pub fn dontcache(mut self, on: bool) -> OpenOptions {
        self.dontcache = on;
        self
    }
    /// Turns Buffered mode's kernel hints on or off.
    pub fn hints(mut self, on: bool) -> OpenOptions {
        self.hints = on;
        self
    }
}
