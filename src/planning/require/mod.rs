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
//! The grammar and its evaluation are NVIDIA's (`libnvidia-container`
//! `src/cli/dsl.c`), because images in the wild are written for it, and a
//! container NVIDIA starts must start here and one it refuses be refused: a
//! single space separates alternatives (OR), a comma separates the terms of
//! one alternative (AND), and a term is `KEY OP VALUE` with the keys `cuda`,
//! `driver`, `arch` and `brand`. Evaluation goes left to right and stops as
//! soon as the answer is known, and a term is only read when evaluation
//! reaches it: `cuda>=11.6 foo=bar` holds wherever `cuda>=11.6` does. Where
//! this module knowingly differs from NVIDIA, the code that does says why.

mod legacy;
mod refusal;
mod term;
#[cfg(test)]
mod tests;

use std::fmt;
use std::rc::Rc;

use thiserror::Error;

use crate::host::driver::CudaVersion;
use crate::planning::request::env_var;
pub use refusal::Unsatisfied;
use term::{Key, Op, Outcome, Term};

/// Longest rule value we read; anything longer is refused, not parsed. Not
/// NVIDIA's: a guard on what messages quote. Real CUDA images' rules are
/// under 2 KiB.
const MAX_VALUE_LEN: usize = 4096;

/// NVIDIA's CLI takes at most this many `--require` rules, one per
/// variable, and refuses a container with more (`cli.h` `reqs[32]`,
/// `configure.c` "too many requirements").
const MAX_RULES: usize = 32;

/// Every variable with this prefix is one rule...
const RULE_PREFIX: &str = "NVIDIA_REQUIRE_";

/// ...except these, which describe Jetson host mounts, not requirements.
const JETPACK_PREFIX: &str = "NVIDIA_REQUIRE_JETPACK";

/// Why requirements could not be parsed or decided, or were not met.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Error {
    #[error("{name} is {len} bytes long; at most {MAX_VALUE_LEN} are accepted", name = Shown(.var))]
    TooLong { var: String, len: usize },
    #[error(
        "{name} holds a NUL byte, which NVIDIA's hook cannot pass on (its container fails \
         there too); remove it",
        name = Shown(.var)
    )]
    NulByte { var: String },
    #[error(
        "{count} requirement rules (NVIDIA_REQUIRE_* variables, and CUDA_VERSION without \
         NVIDIA_REQUIRE_CUDA); NVIDIA's CLI refuses more than {MAX_RULES} as too many \
         requirements, so this image fails there too"
    )]
    TooMany { count: usize },
    #[error(
        "{name} {value:?}: invalid expression {term:?}{at}: {reason}; NVIDIA's CLI refuses \
         it too: fix the rule, or set NVIDIA_DISABLE_REQUIRE=true",
        name = Shown(.var),
        at = reached_on(.reached.as_deref())
    )]
    BadTerm {
        var: String,
        value: String,
        term: String,
        reason: String,
        /// Where evaluation reached the term, when that depends on the
        /// host; `None` for a first term, which is always reached.
        reached: Option<String>,
    },
    #[error(
        "{count} --require rules; NVIDIA's CLI refuses more than {MAX_RULES} as too many \
         requirements"
    )]
    TooManyOptions { count: usize },
    #[error(
        "CUDA_VERSION {value:?} is not a version NVIDIA's hook accepts \
         ([v]MAJOR[.MINOR[.PATCH[-PRERELEASE][+BUILD]]], numbers without leading zeros, \
         MAJOR and MINOR below 2^32), so the requirement cuda>=MAJOR.MINOR that an image \
         without NVIDIA_REQUIRE_CUDA implies cannot be formed; fix CUDA_VERSION, set \
         NVIDIA_REQUIRE_CUDA, or set NVIDIA_DISABLE_REQUIRE=true"
    )]
    BadLegacyCudaVersion { value: String },
    #[error(
        "{rule}: cannot check {shown}{on}: {missing}",
        shown = Shown(.term),
        on = on_device(.device.as_deref())
    )]
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

/// Which host facts the rules may use, so callers compute only those:
/// `arch` and `brand` need NVML, `cuda` needs loading libcuda.
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
    /// implies; none when `NVIDIA_DISABLE_REQUIRE` is true. Refuses here
    /// what NVIDIA refuses whatever the host: a malformed `CUDA_VERSION`, too
    /// many rules, and a rule whose first term, which is always read, is
    /// malformed.
    pub fn from_env(env: &[String]) -> Result<Requirements> {
        if env_var(env, "NVIDIA_DISABLE_REQUIRE").is_some_and(is_true) {
            return Ok(Requirements::default());
        }
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
        // NVIDIA counts an empty NVIDIA_REQUIRE_CUDA or CUDA_VERSION as unset
        // here (cuda_image.go IsLegacy).
        let require_cuda = env_var(env, "NVIDIA_REQUIRE_CUDA").unwrap_or("");
        let cuda_version = env_var(env, "CUDA_VERSION").unwrap_or("");
        let legacy = if !cuda_version.is_empty() && require_cuda.is_empty() {
            Rule::legacy(cuda_version)?
        } else {
            None
        };
        // In NVIDIA's order: the hook forms the legacy rule, then its exec
        // of the CLI fails on a NUL, then the CLI counts the rules, then it
        // evaluates them.
        for &(name, value) in &named {
            if value.contains('\0') {
                return Err(Error::NulByte {
                    var: name.to_owned(),
                });
            }
        }
        let count = named.len() + usize::from(legacy.is_some());
        if count > MAX_RULES {
            return Err(Error::TooMany { count });
        }
        let mut rules: Vec<Rule> = Vec::new();
        for (name, value) in named {
            let source = Source::Variable {
                name: name.to_owned(),
                value: value.to_owned(),
            };
            rules.extend(Rule::parse(source, value)?);
        }
        rules.extend(legacy);
        Ok(Requirements { rules })
    }

    /// The rules NVIDIA's CLI takes as `--require` options, in order, each
    /// an `NVIDIA_REQUIRE_*` value (NVIDIA's hook passes one per variable).
    /// Refused as [`Requirements::from_env`] refuses: more than NVIDIA's CLI
    /// takes, or a rule whose first term is malformed.
    pub fn from_rules(rules: &[String]) -> Result<Requirements> {
        if rules.len() > MAX_RULES {
            return Err(Error::TooManyOptions { count: rules.len() });
        }
        let mut parsed: Vec<Rule> = Vec::new();
        for value in rules {
            let source = Source::Option {
                value: value.clone(),
            };
            parsed.extend(Rule::parse(source, value)?);
        }
        Ok(Requirements { rules: parsed })
    }

    /// Whether there is nothing to check, so callers can skip gathering facts.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Which facts evaluation may need, so callers only compute what can be
    /// used (`arch` and `brand` need NVML; `cuda` needs loading libcuda).
    /// Every term with a known key counts, whether or not evaluation will
    /// reach it: which terms are reached depends on the facts.
    pub fn needs(&self) -> Needs {
        let mut needs = Needs::default();
        let texts = self.rules.iter().flat_map(|r| &r.groups).flatten();
        for key in texts.filter_map(|text| Key::of_text(text)) {
            match key {
                Key::Cuda => needs.cuda = true,
                Key::Driver => needs.driver = true,
                Key::Arch => needs.arch = true,
                Key::Brand => needs.brand = true,
            }
        }
        needs
    }

    /// The CUDA version the first `cuda>=` term of the rules asks for (a
    /// legacy image's `CUDA_VERSION` included), read by the rules' own
    /// grammar: what a remedy names the driver for.
    pub fn cuda_asked(&self) -> Option<CudaVersion> {
        self.rules
            .iter()
            .flat_map(|r| &r.groups)
            .flatten()
            .filter_map(|text| Term::parse(text).ok())
            .find(|term| term.key == Key::Cuda && term.op == Op::Ge)
            .and_then(|term| CudaVersion::parse(&term.value))
    }

    /// Checks every rule against one GPU's facts (called per selected GPU; a
    /// MIG device uses its parent's), stopping at the first that fails.
    pub fn check(&self, facts: &Facts) -> Result<()> {
        self.rules.iter().try_for_each(|rule| rule.check(facts))
    }

    /// [`Requirements::check`], asking `learn` for the facts a rule's
    /// answer hangs on when it cannot be decided without them (an `arch`
    /// or `brand` term whose value decides): `learn` fills them into
    /// `facts` and says whether it knew more, and the rule is decided again
    /// on them. Facts that cannot change the answer are never asked for.
    pub fn check_learning<E: From<Error>>(
        &self,
        facts: &mut Facts,
        learn: &mut dyn FnMut(&mut Facts) -> std::result::Result<bool, E>,
    ) -> std::result::Result<(), E> {
        for rule in &self.rules {
            match rule.check(facts) {
                Err(unknown @ Error::UnknownFact { .. }) => {
                    if !learn(facts)? {
                        return Err(unknown.into());
                    }
                    rule.check(facts)?;
                }
                checked => checked?,
            }
        }
        Ok(())
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
    /// A `--require` option of NVIDIA's CLI command line, and its value.
    Option { value: String },
}

impl Source {
    fn variable(&self) -> &str {
        match self {
            Source::Variable { name, .. } => name,
            Source::Legacy { .. } => "CUDA_VERSION",
            Source::Option { .. } => "--require",
        }
    }

    /// The rule's text.
    fn text(&self) -> &str {
        match self {
            Source::Variable { value, .. } => value,
            Source::Legacy { rule, .. } => rule,
            Source::Option { value } => value,
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
            Source::Option { value } => write!(f, "--require {value:?}"),
        }
    }
}

/// One variable's rule: it holds when an alternative holds, and an
/// alternative holds when all its terms do, evaluated as NVIDIA's
/// `dsl_evaluate` does (dsl.c:131-177).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    source: Source,
    /// The alternatives' terms as written, split as NVIDIA splits them:
    /// on single spaces, then on commas, empty pieces dropped (a tab or a
    /// newline is part of a term). An alternative of commas only keeps no
    /// terms, yet still counts: evaluation ends there (see [`Rule::check`]).
    groups: Vec<Vec<String>>,
}

/// How a rule came out on one GPU.
#[derive(Debug, Clone)]
enum Verdict {
    Holds,
    /// No alternative held.
    Fails(Failing),
    /// Evaluation reached a term NVIDIA calls an invalid expression.
    Invalid {
        term: String,
        reason: String,
    },
    /// The answer hangs on a fact the caller could not determine.
    Unknown {
        term: String,
        missing: String,
    },
}

/// The first false term of each alternative tried, first first: a shared
/// list, so that the two ways tried for an unknown fact share their tails.
#[derive(Debug, Clone, Default)]
struct Failing(Option<Rc<(Term, Failing)>>);

impl Failing {
    /// This list behind an alternative found false at `term`.
    fn behind(&self, term: Term) -> Failing {
        Failing(Some(Rc::new((term, self.clone()))))
    }

    /// The terms in order, repeated ones listed once.
    fn terms(&self) -> Vec<Term> {
        let mut terms: Vec<Term> = Vec::new();
        let mut link = &self.0;
        while let Some(node) = link {
            if !terms.contains(&node.0) {
                terms.push(node.0.clone());
            }
            link = &(node.1).0;
        }
        terms
    }
}

/// Reads and decides one term as written; `Err` is NVIDIA's invalid
/// expression, for a term that does not even read.
fn read(text: &str, facts: &Facts) -> std::result::Result<(Term, Outcome), String> {
    let term = Term::parse(text)?;
    let outcome = term.eval(facts);
    Ok((term, outcome))
}

impl Rule {
    /// Reads a rule's text; `None` when it holds without a term being read
    /// (no alternative, or a first alternative of commas only: dsl.c:143-157).
    /// Its first term is always read, so one NVIDIA refuses whatever the
    /// host is refused now; later terms are read only when evaluation
    /// reaches them.
    fn parse(source: Source, text: &str) -> Result<Option<Rule>> {
        let var = source.variable();
        if text.len() > MAX_VALUE_LEN {
            return Err(Error::TooLong {
                var: var.to_owned(),
                len: text.len(),
            });
        }
        let groups: Vec<Vec<String>> = text
            .split(' ')
            .filter(|group| !group.is_empty())
            .map(|group| {
                group
                    .split(',')
                    .filter(|term| !term.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .collect();
        let Some(first) = groups.first().and_then(|terms| terms.first()) else {
            return Ok(None);
        };
        let bad = |reason: String| Error::BadTerm {
            var: var.to_owned(),
            value: text.to_owned(),
            term: first.clone(),
            reason,
            reached: None,
        };
        let term = Term::parse(first).map_err(bad)?;
        if let Some(reason) = term.invalid_whatever_the_facts() {
            return Err(bad(reason));
        }
        Ok(Some(Rule { source, groups }))
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

    /// Evaluates the rule on one GPU as NVIDIA's `dsl_evaluate` does
    /// (dsl.c:143-158): alternatives left to right, each one's terms left to
    /// right, each term read only when reached; the first false term ends
    /// its alternative, the first alternative whose terms all hold ends the
    /// rule, and an invalid term ends it too.
    fn check(&self, facts: &Facts) -> Result<()> {
        let mut failing: Vec<Term> = Vec::new();
        let verdict = 'rule: {
            for (g, terms) in self.groups.iter().enumerate() {
                // Commas only: NVIDIA's term loop completes without a term,
                // which ends evaluation with the previous answer: true when
                // first, false after a failed alternative (dsl.c:156-157).
                if terms.is_empty() {
                    break 'rule if g == 0 {
                        Verdict::Holds
                    } else {
                        Verdict::Fails(Failing::default())
                    };
                }
                let mut held = true;
                for (i, text) in terms.iter().enumerate() {
                    match read(text, facts) {
                        Ok((_, Outcome::True)) => {}
                        Ok((term, Outcome::False)) => {
                            if !failing.contains(&term) {
                                failing.push(term);
                            }
                            held = false;
                            break;
                        }
                        Err(reason) | Ok((_, Outcome::Invalid(reason))) => {
                            break 'rule Verdict::Invalid {
                                term: text.clone(),
                                reason,
                            }
                        }
                        Ok((_, Outcome::Unknown { .. })) => {
                            break 'rule self.exhaustive(g, i, facts)
                        }
                    }
                }
                if held {
                    break 'rule Verdict::Holds;
                }
            }
            // Past the last alternative: each one failed, if there was one.
            if self.groups.is_empty() {
                Verdict::Holds
            } else {
                Verdict::Fails(Failing::default())
            }
        };
        match verdict {
            Verdict::Holds => Ok(()),
            Verdict::Fails(rest) => {
                for term in rest.terms() {
                    if !failing.contains(&term) {
                        failing.push(term);
                    }
                }
                Err(Error::Unsatisfied(Box::new(Unsatisfied {
                    source: self.source.clone(),
                    failing,
                    facts: facts.clone(),
                })))
            }
            Verdict::Invalid { term, reason } => Err(Error::BadTerm {
                var: self.source.variable().to_owned(),
                value: self.source.text().to_owned(),
                term,
                reason,
                reached: Some(reached(facts)),
            }),
            Verdict::Unknown { term, missing } => Err(Error::UnknownFact {
                rule: self.source.to_string(),
                device: facts.device.as_ref().map(|d| d.name.clone()),
                term,
                missing,
            }),
        }
    }

    /// The verdict from term `i` of alternative `g` on, where that term's
    /// fact is unknown. NVIDIA would know it, so each unknown term is tried
    /// both ways, and the answer stands only if both agree. Both ways meet
    /// again at the next alternative, so the verdicts are computed from the
    /// last alternative back, each once: every later term is read, which
    /// changes nothing but the cost, as reading has no effect.
    fn exhaustive(&self, g: usize, i: usize, facts: &Facts) -> Verdict {
        // Past the last alternative, one having failed.
        let mut rest = Verdict::Fails(Failing::default());
        for h in (g + 1..self.groups.len()).rev() {
            rest = self.alternative(h, 0, &rest, facts);
        }
        self.alternative(g, i, &rest, facts)
    }

    /// The verdict from term `from` of alternative `g` on, given `rest`,
    /// the verdict should the alternative fail; its terms are decided from
    /// the last back, each once.
    fn alternative(&self, g: usize, from: usize, rest: &Verdict, facts: &Facts) -> Verdict {
        let terms = self.groups.get(g).map_or(&[][..], Vec::as_slice);
        let mut verdict = if terms.is_empty() && g > 0 {
            Verdict::Fails(Failing::default())
        } else {
            Verdict::Holds
        };
        for text in terms.iter().skip(from).rev() {
            verdict = match read(text, facts) {
                Ok((_, Outcome::True)) => verdict,
                Ok((term, Outcome::False)) => match rest {
                    Verdict::Fails(failing) => Verdict::Fails(failing.behind(term)),
                    other => other.clone(),
                },
                Err(reason) | Ok((_, Outcome::Invalid(reason))) => Verdict::Invalid {
                    term: text.clone(),
                    reason,
                },
                Ok((
                    _,
                    Outcome::Unknown {
                        missing,
                        may_be_invalid,
                    },
                )) => {
                    let agreed = match (&verdict, rest) {
                        (Verdict::Holds, Verdict::Holds)
                        | (Verdict::Fails(_), Verdict::Fails(_)) => !may_be_invalid,
                        (Verdict::Invalid { .. }, Verdict::Invalid { .. }) => true,
                        _ => false,
                    };
                    if agreed {
                        verdict
                    } else {
                        Verdict::Unknown {
                            term: text.clone(),
                            missing,
                        }
                    }
                }
            };
        }
        verdict
    }
}

/// A name or a term as messages show it: as is when it is plain, else
/// quoted with escapes and cut short, so that nothing an image writes can
/// break the message's line or flood the log.
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

/// The host facts that led evaluation where it went, for messages.
fn reached(facts: &Facts) -> String {
    let mut on = String::new();
    if let Some(device) = &facts.device {
        on.push_str(&format!("{} with ", device.name));
    }
    on.push_str(&format!("driver {}", facts.driver));
    if let Some(cuda) = term::effective_cuda(facts) {
        on.push_str(&format!(", CUDA {cuda}"));
    }
    on
}

fn reached_on(reached: Option<&str>) -> String {
    reached
        .map(|r| format!(" (reached on {r})"))
        .unwrap_or_default()
}

fn on_device(device: Option<&str>) -> String {
    device.map(|d| format!(" on {d}")).unwrap_or_default()
}
