//! Image requirements: the `NVIDIA_REQUIRE_*` rules a container sets, and
//! whether one GPU of this host meets them.
//!
//! This module owns the requirement grammar and its evaluation, nothing more.
//! It is pure: it never reads the host, so callers gather only the [`Facts`]
//! that [`Requirements::needs`] asks for and pass them in. It must never
//! panic, whatever the image's environment holds: a malformed rule is an
//! [`enum@Error`] that names the variable and the offending text, and a fact a
//! rule needs but the caller could not determine is an error too, never a
//! silent pass.
//!
//! The grammar is NVIDIA's, because images in the wild are written for it:
//! whitespace separates alternatives (OR), a comma separates the terms of one
//! alternative (AND), and a term is `KEY OP VALUE` with the keys `cuda`,
//! `driver`, `arch` and `brand`. Where NVIDIA's parsers disagree or are
//! silent, the choice made here is noted at the code that makes it.

mod legacy;
mod refusal;
mod term;
#[cfg(test)]
mod tests;

use std::fmt;

use thiserror::Error;

use crate::driver::CudaVersion;
use crate::request::env_var;
pub use refusal::Unsatisfied;
use term::{Key, Term};

/// Longest rule value we parse; anything longer is refused, not parsed.
const MAX_VALUE_LEN: usize = 4096;

/// Every variable with this prefix is one rule...
const RULE_PREFIX: &str = "NVIDIA_REQUIRE_";

/// ...except these, which describe Jetson host mounts, not requirements.
const JETPACK_PREFIX: &str = "NVIDIA_REQUIRE_JETPACK";

/// Why requirements could not be parsed or decided, or were not met.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Error {
    #[error("{name} is {len} bytes long; at most {MAX_VALUE_LEN} are accepted", name = Shown(.var))]
    TooLong { var: String, len: usize },
    #[error("{name} {value:?}: bad term {term:?}: {reason}", name = Shown(.var))]
    BadTerm {
        var: String,
        value: String,
        term: String,
        reason: String,
    },
    #[error(
        "CUDA_VERSION {value:?} is not a version NVIDIA's hook accepts \
         ([v]MAJOR[.MINOR[.PATCH[-PRERELEASE][+BUILD]]], numbers without leading zeros, \
         MAJOR and MINOR below 2^32), so the requirement cuda>=MAJOR.MINOR that an image \
         without NVIDIA_REQUIRE_CUDA implies cannot be formed; fix CUDA_VERSION, set \
         NVIDIA_REQUIRE_CUDA, or set NVIDIA_DISABLE_REQUIRE=true"
    )]
    BadLegacyCudaVersion { value: String },
    #[error("{rule}: cannot check {term}{on}: {missing}", on = on_device(.device.as_deref()))]
    UnknownFact {
        rule: String,
        device: Option<String>,
        term: String,
        missing: String,
    },
    #[error("{0}")]
    Unsatisfied(Box<Unsatisfied>),
}

/// Result of parsing or checking requirements.
pub type Result<T> = std::result::Result<T, Error>;

/// The requirements of one container: every rule must hold on every GPU it gets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirements {
    rules: Vec<Rule>,
}

/// Which host facts the rules use, so callers compute only those: `arch` and
/// `brand` need NVML, `cuda` needs loading libcuda.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// The driver's CUDA version (`cuda` terms).
    pub cuda: bool,
    /// The driver version (`driver` terms).
    pub driver: bool,
    /// Each GPU's compute capability (`arch` terms).
    pub arch: bool,
    /// Each GPU's brand (`brand` terms).
    pub brand: bool,
}

/// What the rules are checked against: the host driver, and one GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The kernel module's version, e.g. `535.261.03`; `driver` terms compare with it.
    pub driver: String,
    /// The CUDA version the host driver supports, e.g. 12.2 for 535.
    pub cuda: Option<CudaVersion>,
    /// The CUDA version of the forward-compatibility libraries the image
    /// ships, when they will be used; `cuda` terms then compare with the
    /// newer of this and [`Facts::cuda`].
    pub compat_cuda: Option<CudaVersion>,
    /// The GPU being checked (a MIG device's parent); `None` when the
    /// container gets no GPU, and then `arch` and `brand` terms hold, as in
    /// NVIDIA's hook.
    pub device: Option<DeviceFacts>,
}

/// What `arch` and `brand` terms are checked against: one GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceFacts {
    /// How messages name the GPU, e.g. `GPU 0 (GPU-8a3c…)`.
    pub name: String,
    /// Compute capability (major, minor), e.g. (8, 0) for an A100.
    pub arch: Option<(u32, u32)>,
    /// NVIDIA's brand name, e.g. `tesla`, `nvidia`, `geforce`, `quadro`.
    pub brand: Option<String>,
}

impl Requirements {
    /// The rules a container's `process.env` sets (`KEY=VALUE` entries, the
    /// last of a name winning), including the one a legacy CUDA image
    /// implies; none when `NVIDIA_DISABLE_REQUIRE` is true.
    pub fn from_env(env: &[String]) -> Result<Requirements> {
        if env_var(env, "NVIDIA_DISABLE_REQUIRE").is_some_and(is_true) {
            return Ok(Requirements::default());
        }
        let mut rules: Vec<Rule> = Vec::new();
        // One rule per variable name: a repeated name keeps its first
        // position and its last value, as `env_var` reads it.
        let mut named: Vec<(&str, &str)> = Vec::new();
        for entry in env {
            let Some((name, value)) = entry.split_once('=') else {
                continue;
            };
            if !name.starts_with(RULE_PREFIX) || name.starts_with(JETPACK_PREFIX) {
                continue;
            }
            match named.iter_mut().find(|(seen, _)| *seen == name) {
                Some(slot) => slot.1 = value,
                None => named.push((name, value)),
            }
        }
        for (name, value) in named {
            let source = Source::Variable {
                name: name.to_owned(),
                value: value.to_owned(),
            };
            rules.extend(Rule::parse(source, value)?);
        }
        // NVIDIA counts an empty NVIDIA_REQUIRE_CUDA or CUDA_VERSION as unset here.
        let require_cuda = env_var(env, "NVIDIA_REQUIRE_CUDA").unwrap_or("");
        let cuda_version = env_var(env, "CUDA_VERSION").unwrap_or("");
        if !cuda_version.is_empty() && require_cuda.is_empty() {
            rules.extend(Rule::legacy(cuda_version)?);
        }
        Ok(Requirements { rules })
    }

    /// Whether there is nothing to check, so callers can skip gathering facts.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Which facts evaluation needs, so callers only compute what is used
    /// (`arch` and `brand` need NVML; `cuda` needs loading libcuda).
    pub fn needs(&self) -> Needs {
        let mut needs = Needs::default();
        for term in self.rules.iter().flat_map(|r| &r.groups).flatten() {
            match term.key {
                Key::Cuda => needs.cuda = true,
                Key::Driver => needs.driver = true,
                Key::Arch => needs.arch = true,
                Key::Brand => needs.brand = true,
            }
        }
        needs
    }

    /// Checks every rule against one GPU's facts (called per selected GPU; a
    /// MIG device uses its parent's), stopping at the first that fails.
    pub fn check(&self, facts: &Facts) -> Result<()> {
        self.rules.iter().try_for_each(|rule| rule.check(facts))
    }
}

/// Whether `NVIDIA_DISABLE_REQUIRE` turns the checks off: exactly the values
/// Go's `strconv.ParseBool` reads as true, untrimmed, as NVIDIA's hook reads
/// them (cuda_image.go HasDisableRequire). Anything else, `yes` or ` true`
/// included, is false or a ParseBool error, which NVIDIA also takes as
/// false: the checks stay on.
fn is_true(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// Where a rule came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// An `NVIDIA_REQUIRE_*` variable and its value.
    Variable { name: String, value: String },
    /// `CUDA_VERSION` of an image without `NVIDIA_REQUIRE_CUDA`, and the rule it implies.
    Legacy { cuda_version: String, rule: String },
}

impl Source {
    fn variable(&self) -> &str {
        match self {
            Source::Variable { name, .. } => name,
            Source::Legacy { .. } => "CUDA_VERSION",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Variable { name, value } => write!(f, "{} {value:?}", Shown(name)),
            Source::Legacy { cuda_version, rule } => write!(
                f,
                "CUDA_VERSION {cuda_version:?} implies {rule:?} (no NVIDIA_REQUIRE_CUDA)"
            ),
        }
    }
}

/// One variable's rule: it holds when any alternative holds, and an
/// alternative holds when all its terms do.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    source: Source,
    groups: Vec<Vec<Term>>,
}

impl Rule {
    /// Parses a rule's text; `None` when it has no terms (an empty value),
    /// which NVIDIA treats as always true.
    fn parse(source: Source, text: &str) -> Result<Option<Rule>> {
        let var = source.variable();
        if text.len() > MAX_VALUE_LEN {
            return Err(Error::TooLong {
                var: var.to_owned(),
                len: text.len(),
            });
        }
        let mut groups = Vec::new();
        // NVIDIA splits on single spaces and skips empty pieces; any run of
        // whitespace (tabs too) separates alternatives here.
        for group_text in text.split_whitespace() {
            let mut terms = Vec::new();
            // A stray comma (`cuda>=12.0,`) is skipped, as both of NVIDIA's
            // parsers do: images written for them may carry one.
            for term_text in group_text.split(',').filter(|t| !t.is_empty()) {
                let term = Term::parse(term_text).map_err(|reason| Error::BadTerm {
                    var: var.to_owned(),
                    value: text.to_owned(),
                    term: term_text.to_owned(),
                    reason,
                })?;
                terms.push(term);
            }
            if !terms.is_empty() {
                groups.push(terms);
            }
        }
        Ok((!groups.is_empty()).then_some(Rule { source, groups }))
    }

    /// The rule `cuda>=MAJOR.MINOR` a legacy image's `CUDA_VERSION` implies,
    /// formed as NVIDIA's hook forms it; a value it refuses is refused.
    fn legacy(cuda_version: &str) -> Result<Option<Rule>> {
        if cuda_version.len() > MAX_VALUE_LEN {
            return Err(Error::TooLong {
                var: "CUDA_VERSION".to_owned(),
                len: cuda_version.len(),
            });
        }
        let (major, minor) =
            legacy::major_minor(cuda_version).ok_or_else(|| Error::BadLegacyCudaVersion {
                value: cuda_version.to_owned(),
            })?;
        let rule = format!("cuda>={major}.{minor}");
        let source = Source::Legacy {
            cuda_version: cuda_version.to_owned(),
            rule: rule.clone(),
        };
        Rule::parse(source, &rule)
    }

    /// Three-valued: a group with a false term fails even if another of its
    /// terms is unknown, and one true group is enough for the rule; only when
    /// the answer hangs on an unknown fact is that an error.
    fn check(&self, facts: &Facts) -> Result<()> {
        let mut failing: Vec<Term> = Vec::new();
        let mut unknown: Option<(&Term, String)> = None;
        for group in &self.groups {
            let mut group_unknown = None;
            let mut group_false = None;
            for term in group {
                match term.eval(facts) {
                    Ok(true) => {}
                    Ok(false) => {
                        group_false = Some(term);
                        break;
                    }
                    Err(missing) => {
                        group_unknown.get_or_insert((term, missing));
                    }
                }
            }
            match (group_false, group_unknown) {
                (Some(term), _) => {
                    if !failing.contains(term) {
                        failing.push(term.clone());
                    }
                }
                (None, Some(first)) => {
                    unknown.get_or_insert(first);
                }
                (None, None) => return Ok(()),
            }
        }
        if let Some((term, missing)) = unknown {
            return Err(Error::UnknownFact {
                rule: self.source.to_string(),
                device: facts.device.as_ref().map(|d| d.name.clone()),
                term: term.text.clone(),
                missing,
            });
        }
        Err(Error::Unsatisfied(Box::new(Unsatisfied {
            source: self.source.clone(),
            failing,
            facts: facts.clone(),
        })))
    }
}

/// A variable name as messages show it: as is when it is plain, else quoted
/// with escapes and cut short, so that no name can break the message's line
/// or flood the log.
struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX_NAME_CHARS: usize = 128;
        let name = self.0;
        let plain = |c: char| c.is_ascii_graphic() && c != '"';
        if name.len() <= MAX_NAME_CHARS && name.chars().all(plain) {
            return f.write_str(name);
        }
        match name.char_indices().nth(MAX_NAME_CHARS) {
            Some((cut, _)) => write!(f, "{:?}...", &name[..cut]),
            None => write!(f, "{name:?}"),
        }
    }
}

fn on_device(device: Option<&str>) -> String {
    device.map(|d| format!(" on {d}")).unwrap_or_default()
}
