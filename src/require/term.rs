//! One `KEY OP VALUE` term: its grammar, and whether it holds on given facts.
//!
//! Parsing never panics and never guesses: text that is not exactly a known
//! key, one of the operators and a well-formed value is refused with a
//! reason, which the caller wraps with the variable's name.

use std::cmp::Ordering;

use super::Facts;
use crate::driver::CudaVersion;

/// What a term compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    Cuda,
    Driver,
    Arch,
    Brand,
}

impl Key {
    /// NVIDIA matches keys case-insensitively; so do we.
    fn parse(text: &str) -> Result<Key, String> {
        let known = [
            ("cuda", Key::Cuda),
            ("driver", Key::Driver),
            ("arch", Key::Arch),
            ("brand", Key::Brand),
        ];
        if text.is_empty() {
            return Err("no key before the operator; keys are cuda, driver, arch and brand".into());
        }
        known
            .iter()
            .find(|(name, _)| text.eq_ignore_ascii_case(name))
            .map(|&(_, key)| key)
            .ok_or_else(|| format!("unknown key {text:?}; keys are cuda, driver, arch and brand"))
    }
}

/// How a term compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    /// `==` is taken as `=`, which NVIDIA's C parser refuses; nothing else
    /// beyond NVIDIA's six.
    fn parse(text: &str) -> Result<Op, String> {
        Ok(match text {
            "=" | "==" => Op::Eq,
            "!=" => Op::Ne,
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            ">=" => Op::Ge,
            _ => {
                return Err(format!(
                    "unknown operator {text:?}; operators are = != < <= > >="
                ))
            }
        })
    }

    fn holds(self, ordering: Ordering) -> bool {
        match self {
            Op::Eq => ordering == Ordering::Equal,
            Op::Ne => ordering != Ordering::Equal,
            Op::Lt => ordering == Ordering::Less,
            Op::Le => ordering != Ordering::Greater,
            Op::Gt => ordering == Ordering::Greater,
            Op::Ge => ordering != Ordering::Less,
        }
    }
}

/// What a term compares with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    Version(Version),
    /// Lowercased, as brands compare case-insensitively.
    Brand(String),
}

/// One `KEY OP VALUE` term, with its text as written for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Term {
    pub(super) key: Key,
    pub(super) op: Op,
    pub(super) value: Value,
    /// As written, for messages.
    pub(super) text: String,
}

pub(super) fn is_operator_char(c: char) -> bool {
    matches!(c, '<' | '>' | '=' | '!')
}

impl Term {
    /// Splits at the first run of operator characters, as NVIDIA does, so
    /// `cuda=>12` is an unknown operator rather than a strange value.
    pub(super) fn parse(text: &str) -> Result<Term, String> {
        let Some(op_start) = text.find(is_operator_char) else {
            return Err("no operator; a term is KEY OP VALUE, e.g. cuda>=12.2".into());
        };
        let (key_text, rest) = text.split_at(op_start);
        let op_len = rest.find(|c| !is_operator_char(c)).unwrap_or(rest.len());
        let (op_text, value_text) = rest.split_at(op_len);
        let key = Key::parse(key_text)?;
        let op = Op::parse(op_text)?;
        if value_text.is_empty() {
            return Err(format!("no value after {op_text:?}"));
        }
        let value = match key {
            Key::Brand => {
                if !matches!(op, Op::Eq | Op::Ne) {
                    return Err(format!("brand takes only = and !=, not {op_text:?}"));
                }
                let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
                if !value_text.chars().all(allowed) {
                    return Err(format!(
                        "brand {value_text:?} has characters other than letters, digits, '-', '_' and '.'"
                    ));
                }
                Value::Brand(value_text.to_ascii_lowercase())
            }
            Key::Cuda | Key::Driver | Key::Arch => Value::Version(Version::parse(value_text)?),
        };
        Ok(Term {
            key,
            op,
            value,
            text: text.to_owned(),
        })
    }

    /// The value as written, e.g. `12.4` of `cuda>=12.4`.
    pub(super) fn value_text(&self) -> &str {
        self.text
            .trim_start_matches(|c| !is_operator_char(c))
            .trim_start_matches(is_operator_char)
    }

    /// Whether the term holds; `Err` says which fact is missing.
    pub(super) fn eval(&self, facts: &Facts) -> Result<bool, String> {
        match &self.value {
            Value::Version(wanted) => {
                let Some(have) = self.version_fact(facts)? else {
                    return Ok(true);
                };
                Ok(self.op.holds(have.compare(wanted)))
            }
            Value::Brand(wanted) => {
                let Some(device) = &facts.device else {
                    return Ok(true);
                };
                let have = device
                    .brand
                    .as_deref()
                    .ok_or("the GPU's brand could not be determined")?;
                let equal = have.eq_ignore_ascii_case(wanted);
                Ok(if self.op == Op::Eq { equal } else { !equal })
            }
        }
    }

    /// The host's version this term compares with; `None` for a device term
    /// when the container gets no GPU.
    fn version_fact(&self, facts: &Facts) -> Result<Option<Version>, String> {
        match self.key {
            Key::Cuda => effective_cuda(facts)
                .map(|v| Some(Version::of_cuda(v)))
                .ok_or_else(|| "the driver's CUDA version could not be determined".into()),
            Key::Driver => Version::parse(&facts.driver).map(Some).map_err(|_| {
                format!(
                    "the driver version could not be determined ({:?} is not a version)",
                    facts.driver
                )
            }),
            Key::Arch => {
                let Some(device) = &facts.device else {
                    return Ok(None);
                };
                let (major, minor) = device
                    .arch
                    .ok_or("the GPU's compute capability could not be determined")?;
                Ok(Some(Version(vec![u64::from(major), u64::from(minor)])))
            }
            Key::Brand => Ok(None),
        }
    }
}

/// The CUDA version `cuda` terms compare with: the image's
/// forward-compatibility libraries win when they are newer.
pub(super) fn effective_cuda(facts: &Facts) -> Option<CudaVersion> {
    facts.cuda.max(facts.compat_cuda)
}

/// A dotted version compared per numeric component, missing components
/// being 0: `12 = 12.0`, `12.10 > 12.9`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Version(pub(super) Vec<u64>);

impl Version {
    /// Digits and single dots only: NVIDIA's parser also skips repeated
    /// dots, which no real rule needs.
    pub(super) fn parse(text: &str) -> Result<Version, String> {
        text.split('.')
            .map(|part| {
                if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!(
                        "{text:?} is not a version: expected numbers separated by dots, e.g. 12.2"
                    ));
                }
                part.parse::<u64>()
                    .map_err(|_| format!("{text:?} is not a version: {part} is too large"))
            })
            .collect::<Result<_, _>>()
            .map(Version)
    }

    pub(super) fn of_cuda(cuda: CudaVersion) -> Version {
        let component = |n: i32| u64::try_from(n).unwrap_or(0);
        Version(vec![component(cuda.major()), component(cuda.minor())])
    }

    pub(super) fn compare(&self, other: &Version) -> Ordering {
        let len = self.0.len().max(other.0.len());
        (0..len)
            .map(|i| {
                let a = self.0.get(i).copied().unwrap_or(0);
                let b = other.0.get(i).copied().unwrap_or(0);
                a.cmp(&b)
            })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}
