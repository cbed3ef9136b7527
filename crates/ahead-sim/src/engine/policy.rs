//! What reads ahead in a simulation: one of the library's policies, or
//! `ahead run` (`preload.rs`).

use ahead::ra::PolicyKind;

/// What reads ahead in a simulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SimPolicy {
    /// One of the library's policies, deciding what the engine reads.
    Engine(PolicyKind),
    /// `ahead run`: the kernel's `ondemand` reads for the program, and the
    /// preload's hints arrive on top (`preload.rs` models which reads the
    /// preload hands its `ahead` policy).
    Run,
}

impl SimPolicy {
    /// The library's policies, baseline first (what `--policy` defaults
    /// to).
    pub const ENGINES: [SimPolicy; 3] = [
        SimPolicy::Engine(PolicyKind::Legacy),
        SimPolicy::Engine(PolicyKind::OnDemand),
        SimPolicy::Engine(PolicyKind::Ahead),
    ];

    /// The name as typed on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SimPolicy::Engine(k) => k.name(),
            SimPolicy::Run => "run",
        }
    }

    /// The policy that decides what the engine itself reads.
    pub fn kind(self) -> PolicyKind {
        match self {
            SimPolicy::Engine(k) => k,
            SimPolicy::Run => PolicyKind::OnDemand,
        }
    }
}

impl std::str::FromStr for SimPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().eq_ignore_ascii_case("run") {
            return Ok(SimPolicy::Run);
        }
        s.parse::<PolicyKind>().map(SimPolicy::Engine).map_err(|_| {
            format!("unknown readahead policy '{s}' (expected legacy, ondemand, ahead or run)")
        })
    }
}

impl From<PolicyKind> for SimPolicy {
    fn from(k: PolicyKind) -> SimPolicy {
        SimPolicy::Engine(k)
    }
}
