//! The refusal a user reads when a rule fails: one line naming the rule, the
//! GPU, what is false, the host's facts that bear on it, and the ways out.
//!
//! NVIDIA's text (`unsatisfied condition: cuda>=12.4, please update your
//! driver…`, dsl.c:159-167) names the rule's first alternative rather than
//! the false term, and neither the host's versions nor the other fix, an
//! older image; this one must name all of them. It keeps NVIDIA's phrase
//! `unsatisfied condition` so that users who search logs for it find ours.
//! It never spans lines: the rule's text is quoted with escapes, and terms
//! that are not plain text too.

use std::fmt;

use super::term::{effective_cuda, Key, Op, Term};
use super::{Facts, Shown, Source};

/// Where CUDA images keep forward-compatibility libraries.
const COMPAT_DIR: &str = "/usr/local/cuda/compat";

/// A rule that no alternative of satisfies on one GPU; its `Display` is the
/// refusal the user reads, with the host's facts and the ways out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsatisfied {
    pub(super) source: Source,
    /// The first false term of each alternative, duplicates left out.
    pub(super) failing: Vec<Term>,
    pub(super) facts: Facts,
}

impl Unsatisfied {
    /// The variable the refused rule came from (`CUDA_VERSION` for the
    /// legacy rule), for callers that log or count refusals.
    pub fn variable(&self) -> &str {
        self.source.variable()
    }

    /// Whether a `cuda` term is among the false ones: the image asks for
    /// more CUDA than the host gives.
    pub fn wants_more_cuda(&self) -> bool {
        self.failing.iter().any(|term| term.key == Key::Cuda)
    }
}

impl fmt::Display for Unsatisfied {
    /// One line: rule, device, what is false, the host's facts, the way out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.source)?;
        if let Some(device) = &self.facts.device {
            write!(f, "{}: ", device.name)?;
        }
        f.write_str("unsatisfied condition: ")?;
        match self.failing.as_slice() {
            [one] => write!(f, "{} is false", Shown(&one.text))?,
            many => {
                f.write_str("no alternative holds (")?;
                for (i, term) in many.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(f, "{sep}{} is false", Shown(&term.text))?;
                }
                f.write_str(")")?;
            }
        }
        write!(f, ": {}", self.host())?;
        write!(f, "; {}", self.remedy())
    }
}

impl Unsatisfied {
    /// The host's facts that bear on the failing terms.
    fn host(&self) -> String {
        let facts = &self.facts;
        let mut host = format!("driver {}", facts.driver);
        if let Some(cuda) = facts.cuda {
            host.push_str(&format!(" supports CUDA {cuda}"));
        }
        if let Some(compat) = facts.compat_cuda {
            host.push_str(&format!(
                " (CUDA {compat} with the image's forward-compatibility libraries)"
            ));
        }
        let device = facts.device.as_ref();
        if self.fails(Key::Arch) {
            if let Some((major, minor)) = device.and_then(|d| d.arch) {
                host.push_str(&format!(", the GPU has compute capability {major}.{minor}"));
            }
        }
        if self.fails(Key::Brand) {
            if let Some(brand) = device.and_then(|d| d.brand.as_deref()) {
                host.push_str(&format!(
                    ", the GPU's brand is {}",
                    brand.to_ascii_lowercase()
                ));
            }
        }
        host
    }

    fn fails(&self, key: Key) -> bool {
        self.failing.iter().any(|t| t.key == key)
    }

    /// The ways out, for the failing term that is easiest to act on: a
    /// `cuda` term when there is one, as in every CUDA image's rule.
    fn remedy(&self) -> String {
        let facts = &self.facts;
        let Some(term) = self
            .failing
            .iter()
            .find(|t| t.key == Key::Cuda)
            .or(self.failing.first())
        else {
            return "use a host or image that satisfies it".into();
        };
        let wanted = Shown(term.value_text());
        let device = facts.device.as_ref();
        match term.key {
            Key::Cuda => {
                let host = effective_cuda(facts)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "?".into());
                let driver = match term.op {
                    Op::Ge => format!("CUDA {wanted} or newer"),
                    Op::Gt => format!("a CUDA newer than {wanted}"),
                    Op::Eq => format!("exactly CUDA {wanted}"),
                    Op::Lt | Op::Le | Op::Ne => {
                        return format!(
                            "use a host driver whose CUDA version satisfies {}, \
                             or an image that accepts CUDA {host}",
                            Shown(&term.text)
                        )
                    }
                };
                let mut remedy = format!(
                    "use a host driver that supports {driver}, \
                     or an image built for CUDA {host} or older"
                );
                if facts.compat_cuda.is_none() {
                    remedy.push_str(&format!(
                        " (or one that ships CUDA forward-compatibility libraries in \
                         {COMPAT_DIR}, which datacenter GPUs can use)"
                    ));
                }
                remedy
            }
            Key::Driver => format!(
                "use a host driver that satisfies {}, or an image that accepts driver {}",
                Shown(&term.text),
                facts.driver
            ),
            Key::Arch => match device.and_then(|d| d.arch) {
                Some((major, minor)) => format!(
                    "use a GPU that satisfies {}, or an image built for compute capability \
                     {major}.{minor}",
                    Shown(&term.text)
                ),
                None => format!("use a GPU that satisfies {}", Shown(&term.text)),
            },
            Key::Brand => match device.and_then(|d| d.brand.as_deref()) {
                Some(brand) => format!(
                    "use a GPU that satisfies {}, or an image that accepts brand {}",
                    Shown(&term.text),
                    brand.to_ascii_lowercase()
                ),
                None => format!("use a GPU that satisfies {}", Shown(&term.text)),
            },
        }
    }
}
