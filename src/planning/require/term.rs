//! One `KEY OP VALUE` term, read and decided the way NVIDIA's CLI does
//! (`libnvidia-container` `src/cli/dsl.c`), because images are written for it.
//!
//! NVIDIA reads a term only when evaluation reaches it, and whether a term is
//! well formed can depend on the host: `brand<x` is an error only when the
//! container gets a GPU, a version too large to read is an error only when
//! the comparison gets that far. So this module decides a term on given
//! facts, never up front. It must never panic and never guess: a term
//! NVIDIA calls an `invalid expression` is an [`Outcome::Invalid`] with a
//! reason, and a fact the answer needs but the caller lacks is an
//! [`Outcome::Unknown`], never a silent pass.

use super::Facts;
use crate::host::driver::CudaVersion;

/// NVIDIA formats a term it finds false into a 128-byte buffer and calls
/// the term invalid when it does not fit (dsl.c:15, 119-122).
const EXPR_MAX: usize = 128;

/// What a term compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    Cuda,
    Driver,
    Arch,
    Brand,
}

impl Key {
    /// NVIDIA matches keys case-insensitively (dsl.c:117-118); so do we.
    fn parse(text: &str) -> Result<Key, String> {
        [
            ("cuda", Key::Cuda),
            ("driver", Key::Driver),
            ("arch", Key::Arch),
            ("brand", Key::Brand),
        ]
        .iter()
        .find(|(name, _)| text.eq_ignore_ascii_case(name))
        .map(|&(_, key)| key)
        .ok_or_else(|| format!("unknown key {text:?}; keys are cuda, driver, arch and brand"))
    }

    /// The key a term's text would have if evaluated, for deciding which
    /// facts to gather before evaluation.
    pub(super) fn of_text(text: &str) -> Option<Key> {
        let end = text.find(is_operator_char)?;
        Key::parse(&text[..end]).ok()
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
    /// NVIDIA's operators, in its table's order (dsl.c:26-33): the order
    /// decides which one a run of operator characters reads as.
    const TABLE: [(&'static str, Op); 6] = [
        ("=", Op::Eq),
        ("!=", Op::Ne),
        ("<", Op::Lt),
        ("<=", Op::Le),
        (">", Op::Gt),
        (">=", Op::Ge),
    ];

    /// The first operator of the table that the whole run is a prefix of,
    /// as NVIDIA's `strncmp(run, op, len(run))` picks it (dsl.c:103-114):
    /// so a lone `!` reads as `!=`, and `==`, `=>` or `<>` are no operator.
    fn parse(run: &str) -> Result<Op, String> {
        Op::TABLE
            .iter()
            .find(|(text, _)| text.starts_with(run))
            .map(|&(_, op)| op)
            .ok_or_else(|| format!("{run:?} is not an operator; operators are = != < <= > >="))
    }

    /// How NVIDIA writes the operator back, e.g. `!=` for a lone `!`.
    fn as_str(self) -> &'static str {
        Op::TABLE
            .iter()
            .find(|&&(_, op)| op == self)
            .map_or("?", |&(text, _)| text)
    }
}

/// One `KEY OP VALUE` term, with its text as written for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Term {
    pub(super) key: Key,
    pub(super) op: Op,
    /// Everything after the operator, as written: NVIDIA checks it only
    /// when it compares, so it is kept as text.
    pub(super) value: String,
    /// As written, for messages.
    pub(super) text: String,
    /// Length of NVIDIA's `"KEY OP VALUE"` form of the term, with the key as
    /// written and the operator as NVIDIA spells it; a false term whose form
    /// reaches [`EXPR_MAX`] is an error there.
    reported_len: usize,
}

/// How a term came out on given facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    True,
    False,
    /// NVIDIA's `invalid expression`, with the reason.
    Invalid(String),
    /// The answer needs a fact the caller could not determine. It could be
    /// true or false; `may_be_invalid` says it could also be invalid,
    /// depending on the fact.
    Unknown {
        missing: String,
        may_be_invalid: bool,
    },
}

pub(super) fn is_operator_char(c: char) -> bool {
    matches!(c, '<' | '>' | '=' | '!')
}

impl Term {
    /// Reads a term as NVIDIA does (dsl.c:100-127): the key is the text up
    /// to the first of `<>=!`, the operator the run of those characters, the
    /// value the rest, which must not be empty. The value itself is checked
    /// when compared.
    pub(super) fn parse(text: &str) -> Result<Term, String> {
        let Some(op_start) = text.find(is_operator_char) else {
            return Err("no operator; a term is KEY OP VALUE, e.g. cuda>=12.2".into());
        };
        if op_start == 0 {
            return Err("no key before the operator; keys are cuda, driver, arch and brand".into());
        }
        let (key_text, rest) = text.split_at(op_start);
        let run_len = rest.find(|c| !is_operator_char(c)).unwrap_or(rest.len());
        let (run, value) = rest.split_at(run_len);
        let op = Op::parse(run)?;
        if value.is_empty() {
            return Err(format!("no value after {run:?}"));
        }
        let key = Key::parse(key_text)?;
        Ok(Term {
            key,
            op,
            value: value.to_owned(),
            text: text.to_owned(),
            reported_len: key_text.len() + 1 + op.as_str().len() + 1 + value.len(),
        })
    }

    /// Why NVIDIA would refuse this term whatever the host, when it
    /// evaluates it: `cuda` and `driver` values are always compared, and a
    /// malformed one fails before any number is read (dsl.c:41-50).
    /// `arch` and `brand` terms are not compared when the container gets no
    /// GPU, so nothing about them is certain up front.
    pub(super) fn invalid_whatever_the_facts(&self) -> Option<String> {
        match self.key {
            Key::Cuda | Key::Driver => malformed_version(&self.value).or_else(|| {
                leading_number(self.value.as_bytes())
                    .err()
                    .map(|e| e.describe(&self.value))
            }),
            Key::Arch | Key::Brand => None,
        }
    }

    /// The term on `facts`, as NVIDIA's checks decide it (configure.c's
    /// `check_*` functions): `arch` and `brand` hold when the container
    /// gets no GPU, without their value being looked at.
    pub(super) fn eval(&self, facts: &Facts) -> Outcome {
        match self.key {
            Key::Brand => {
                let Some(device) = &facts.device else {
                    return Outcome::True;
                };
                // dsl_compare_string knows only = and != (dsl.c:81-89).
                if !matches!(self.op, Op::Eq | Op::Ne) {
                    return Outcome::Invalid(
                        "brand takes only = and != (checked only when the container gets a GPU)"
                            .into(),
                    );
                }
                let Some(have) = device.brand.as_deref() else {
                    return self.unknown("the GPU's brand could not be determined");
                };
                let equal = have.eq_ignore_ascii_case(&self.value);
                self.decided(if self.op == Op::Eq { equal } else { !equal })
            }
            Key::Arch => {
                let Some(device) = &facts.device else {
                    return Outcome::True;
                };
                self.compare(
                    device.arch.map(|(major, minor)| format!("{major}.{minor}")),
                    "the GPU's compute capability could not be determined",
                )
            }
            Key::Cuda => self.compare(
                effective_cuda(facts).map(cuda_text),
                "the driver's CUDA version could not be determined",
            ),
            Key::Driver => {
                let have =
                    (malformed_version(&facts.driver).is_none()).then(|| facts.driver.clone());
                self.compare(
                    have,
                    &format!(
                        "the driver version could not be determined ({:?} is not a version)",
                        facts.driver
                    ),
                )
            }
        }
    }

    /// The value as written, e.g. `12.4` of `cuda>=12.4`.
    pub(super) fn value_text(&self) -> &str {
        &self.value
    }

    /// Compares the host's version `have` with the value, once the value is
    /// known to be well formed: NVIDIA checks its characters whatever the
    /// host says.
    fn compare(&self, have: Option<String>, missing: &str) -> Outcome {
        if let Some(reason) = malformed_version(&self.value) {
            return Outcome::Invalid(reason);
        }
        let Some(have) = have else {
            return self.unknown(missing);
        };
        match compare_versions(&have, self.op, &self.value) {
            Ok(holds) => self.decided(holds),
            Err(reason) => Outcome::Invalid(reason),
        }
    }

    /// A decided term; a false one NVIDIA cannot format is invalid there.
    fn decided(&self, holds: bool) -> Outcome {
        if holds {
            Outcome::True
        } else if self.reported_len >= EXPR_MAX {
            Outcome::Invalid(format!(
                "the term is false, and NVIDIA's CLI refuses a false term of {EXPR_MAX} \
                 bytes or more as an invalid expression"
            ))
        } else {
            Outcome::False
        }
    }

    fn unknown(&self, missing: &str) -> Outcome {
        // Depending on the fact, a long term could be false, which NVIDIA
        // refuses, and a number too large to read could be reached.
        let too_large = matches!(self.key, Key::Cuda | Key::Driver | Key::Arch)
            && self.value.split('.').any(|part| {
                leading_number(part.as_bytes()).is_err_and(|e| e == NumberError::TooLarge)
            });
        Outcome::Unknown {
            missing: missing.to_owned(),
            may_be_invalid: self.reported_len >= EXPR_MAX || too_large,
        }
    }
}

/// The CUDA version `cuda` terms compare with: the image's
/// forward-compatibility libraries win when they are newer.
pub(super) fn effective_cuda(facts: &Facts) -> Option<CudaVersion> {
    facts.cuda.max(facts.compat_cuda)
}

/// The CUDA version as NVIDIA's CLI writes it for comparing, `MAJOR.MINOR`.
fn cuda_text(cuda: CudaVersion) -> String {
    let component = |n: i32| u32::try_from(n).unwrap_or(0);
    format!("{}.{}", component(cuda.major()), component(cuda.minor()))
}

/// Why NVIDIA can never compare with `text`: only digits and dots, and the
/// first number must start at once (dsl.c:41-50; the host's side is never
/// empty, so the first number is always read).
fn malformed_version(text: &str) -> Option<String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Some(format!(
            "{text:?} is not a version: expected digits and dots, e.g. 12.2"
        ));
    }
    if text.starts_with('.') {
        return Some(format!(
            "{text:?} is not a version: it must start with a digit"
        ));
    }
    None
}

/// Why `strtoumax` could not give NVIDIA a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumberError {
    NoDigits,
    TooLarge,
}

impl NumberError {
    fn describe(self, text: &str) -> String {
        match self {
            NumberError::NoDigits => format!("{text:?} is not a version: a number is missing"),
            NumberError::TooLarge => format!(
                "{text:?} is not a version NVIDIA's CLI can read: a number is {} or more",
                u64::MAX
            ),
        }
    }
}

/// The number at the start of `text` and what follows, as `strtoumax`
/// reads it from a digits-and-dots string; NVIDIA refuses `UINTMAX_MAX`,
/// which is also what an overflow gives (dsl.c:47-50).
fn leading_number(text: &[u8]) -> Result<(u64, &[u8]), NumberError> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return Err(NumberError::NoDigits);
    }
    let number = text[..digits]
        .iter()
        .try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .filter(|&n| n != u64::MAX)
        .ok_or(NumberError::TooLarge)?;
    Ok((number, &text[digits..]))
}

/// NVIDIA's `dsl_compare_version` (dsl.c:35-79): numbers compared pairwise
/// until one differs or either side runs out, runs of dots skipped, and a
/// side left over counting as more only if it holds a digit other than 0;
/// so `12 = 12.0`, `12.10 > 12.9`, `12..2 = 12.2`. A number is read only
/// when the comparison gets to it, so a number too large to read is an
/// error only then. Both sides hold only digits and dots.
pub(super) fn compare_versions(have: &str, op: Op, want: &str) -> Result<bool, String> {
    let (mut a, mut b) = (have.as_bytes(), want.as_bytes());
    let skip_dots = |s: &[u8]| -> usize { s.iter().take_while(|&&c| c == b'.').count() };
    while !a.is_empty() && !b.is_empty() {
        let (n1, rest1) = leading_number(a).map_err(|e| e.describe(have))?;
        let (n2, rest2) = leading_number(b).map_err(|e| e.describe(want))?;
        if n1 != n2 {
            return Ok(match op {
                Op::Eq => false,
                Op::Ne => true,
                Op::Lt | Op::Le => n1 < n2,
                Op::Gt | Op::Ge => n1 > n2,
            });
        }
        a = &rest1[skip_dots(rest1)..];
        b = &rest2[skip_dots(rest2)..];
    }
    let more = |s: &[u8]| s.iter().any(|&c| c != b'.' && c != b'0');
    let (a_more, b_more) = (more(a), more(b));
    Ok(match op {
        Op::Eq => !a_more && !b_more,
        Op::Ne => a_more || b_more,
        Op::Lt => !a_more && b_more,
        Op::Le => !a_more,
        Op::Gt => a_more && !b_more,
        Op::Ge => !b_more,
    })
}
