//! GNU `getopt_long` as NVIDIA's CLI (glibc `argp`) reads a command line:
//! long options with `--name=value` or `--name value` (a value a long
//! option may only take attached with `=` when it is optional), unique
//! prefixes of long names (`--load` for `--load-kmods`), short options
//! clustered (`-kn`) with their value attached or next (`-dFILE`, `-d
//! FILE`; an optional one attached only), and `--` ending the options.
//!
//! This module knows no option of NVIDIA's: callers pass their table and
//! give meaning to what comes back. It never panics on any input.

use std::fmt;

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// Never.
    None,
    /// Always: attached, or the next argument.
    Required,
    /// Only attached: `--name=value`, `-nvalue`.
    Optional,
}

/// One option a command takes.
#[derive(Debug, Clone, Copy)]
pub struct Opt<K> {
    /// Its long name, without the dashes.
    pub long: &'static str,
    /// Its short letter, if it has one.
    pub short: Option<char>,
    /// Whether it takes a value.
    pub value: Value,
    /// What the caller calls it.
    pub key: K,
    /// How usage names its value (`FILE`); empty when it takes none.
    pub meta: &'static str,
    /// What usage says it does.
    pub doc: &'static str,
}

impl<K> Opt<K> {
    /// How usage and messages show it: `--debug=FILE (-d)`.
    pub fn shown(&self) -> String {
        let value = match self.value {
            Value::None => String::new(),
            Value::Required => format!("={}", self.meta),
            Value::Optional => format!("[={}]", self.meta),
        };
        match self.short {
            Some(short) => format!("--{}{value} (-{short})", self.long),
            None => format!("--{}{value}", self.long),
        }
    }
}

/// What a command line holds, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item<K> {
    /// An option, and its value where it took one.
    Opt {
        /// The caller's key.
        key: K,
        /// The value, where one was given.
        value: Option<String>,
    },
    /// An operand.
    Operand(String),
}

/// Where parsing stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// At the first operand, which starts the rest (argp's `ARGP_IN_ORDER`:
    /// NVIDIA's global options end at the command).
    StopAtOperand,
    /// Never: operands and options mix in any order (a command's own options).
    Permute,
}

/// What is wrong with an option; `option` is as the user wrote it. The
/// caller's error ([`crate::front::Error::CliOption`]) carries it with
/// the command it was given to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// No option has this name or prefix.
    Unknown { option: String },
    /// A prefix of more than one long option.
    Ambiguous { option: String, candidates: String },
    /// An option that takes a value was given none.
    MissingValue { option: String },
    /// An option that takes no value was given one.
    UnexpectedValue { option: String },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unknown { option } => write!(f, "unknown option {option}"),
            Problem::Ambiguous { option, candidates } => {
                write!(f, "option {option} is ambiguous: it may be {candidates}")
            }
            Problem::MissingValue { option } => write!(f, "option {option} needs a value"),
            Problem::UnexpectedValue { option } => write!(f, "option {option} takes no value"),
        }
    }
}

/// Parses `args` against `opts`; returns the items and, for
/// [`Order::StopAtOperand`], the arguments from the first operand on.
pub fn parse<K: Copy>(
    args: &[String],
    opts: &[Opt<K>],
    order: Order,
) -> Result<(Vec<Item<K>>, Vec<String>), Problem> {
    let mut items = Vec::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        if arg == "--" {
            if order == Order::StopAtOperand {
                return Ok((items, args[i..].to_vec()));
            }
            items.extend(args[i..].iter().cloned().map(Item::Operand));
            return Ok((items, Vec::new()));
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (long, None),
            };
            let opt = find_long(opts, name, arg)?;
            let value = match (opt.value, attached) {
                (Value::None, Some(_)) => {
                    return Err(Problem::UnexpectedValue {
                        option: format!("--{}", opt.long),
                    })
                }
                (Value::None, None) => None,
                (Value::Optional, attached) => attached,
                (Value::Required, Some(value)) => Some(value),
                (Value::Required, None) => {
                    let value = args.get(i).cloned().ok_or_else(|| Problem::MissingValue {
                        option: format!("--{}", opt.long),
                    })?;
                    i += 1;
                    Some(value)
                }
            };
            items.push(Item::Opt {
                key: opt.key,
                value,
            });
            continue;
        }
        match arg.strip_prefix('-').filter(|cluster| !cluster.is_empty()) {
            Some(cluster) => {
                let mut next = args.get(i);
                if short_cluster(cluster, opts, &mut next, &mut items)? {
                    i += 1;
                }
            }
            None if order == Order::StopAtOperand => {
                return Ok((items, args[i - 1..].to_vec()));
            }
            None => items.push(Item::Operand(arg.clone())),
        }
    }
    Ok((items, Vec::new()))
}

/// The option `name` names, exactly or as the unique prefix of one.
fn find_long<'a, K>(opts: &'a [Opt<K>], name: &str, arg: &str) -> Result<&'a Opt<K>, Problem> {
    if let Some(opt) = opts.iter().find(|o| o.long == name) {
        return Ok(opt);
    }
    let prefixed: Vec<&Opt<K>> = if name.is_empty() {
        Vec::new()
    } else {
        opts.iter().filter(|o| o.long.starts_with(name)).collect()
    };
    match prefixed.as_slice() {
        [one] => Ok(one),
        [] => Err(Problem::Unknown {
            option: option_name(arg),
        }),
        many => Err(Problem::Ambiguous {
            option: option_name(arg),
            candidates: many
                .iter()
                .map(|o| format!("--{}", o.long))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Parses one cluster of short options (`-kn`, `-dFILE`); `next` is the
/// argument after it, which a last option needing a value takes. Returns
/// whether it was taken.
fn short_cluster<K: Copy>(
    cluster: &str,
    opts: &[Opt<K>],
    next: &mut Option<&String>,
    items: &mut Vec<Item<K>>,
) -> Result<bool, Problem> {
    for (at, letter) in cluster.char_indices() {
        let opt = opts
            .iter()
            .find(|o| o.short == Some(letter))
            .ok_or_else(|| Problem::Unknown {
                option: format!("-{letter}"),
            })?;
        let rest = &cluster[at + letter.len_utf8()..];
        match opt.value {
            Value::None => items.push(Item::Opt {
                key: opt.key,
                value: None,
            }),
            Value::Optional => {
                items.push(Item::Opt {
                    key: opt.key,
                    value: (!rest.is_empty()).then(|| rest.to_string()),
                });
                return Ok(false);
            }
            Value::Required if !rest.is_empty() => {
                items.push(Item::Opt {
                    key: opt.key,
                    value: Some(rest.to_string()),
                });
                return Ok(false);
            }
            Value::Required => {
                let value = next.take().cloned().ok_or_else(|| Problem::MissingValue {
                    option: format!("-{letter}"),
                })?;
                items.push(Item::Opt {
                    key: opt.key,
                    value: Some(value),
                });
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// An option as written, without its attached value (which may be long,
/// or a secret), for messages.
fn option_name(arg: &str) -> String {
    arg.split_once('=')
        .map_or(arg, |(name, _)| name)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum K {
        Kmods,
        Debug,
        User,
        NoCgroups,
        NoDevbind,
    }

    const OPTS: &[Opt<K>] = &[
        Opt {
            long: "load-kmods",
            short: Some('k'),
            value: Value::None,
            key: K::Kmods,
            meta: "",
            doc: "",
        },
        Opt {
            long: "debug",
            short: Some('d'),
            value: Value::Required,
            key: K::Debug,
            meta: "FILE",
            doc: "",
        },
        Opt {
            long: "user",
            short: Some('u'),
            value: Value::Optional,
            key: K::User,
            meta: "UID",
            doc: "",
        },
        Opt {
            long: "no-cgroups",
            short: None,
            value: Value::None,
            key: K::NoCgroups,
            meta: "",
            doc: "",
        },
        Opt {
            long: "no-devbind",
            short: None,
            value: Value::None,
            key: K::NoDevbind,
            meta: "",
            doc: "",
        },
    ];

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn opt(key: K, value: Option<&str>) -> Item<K> {
        Item::Opt {
            key,
            value: value.map(str::to_string),
        }
    }

    fn permuted(a: &[&str]) -> Result<Vec<Item<K>>, Problem> {
        parse(&args(a), OPTS, Order::Permute).map(|(items, _)| items)
    }

    #[test]
    fn long_values_are_attached_or_next_and_optional_ones_attached_only() {
        assert_eq!(
            permuted(&["--debug=/f", "--debug", "/g", "--user", "--user=1:2"]),
            Ok(vec![
                opt(K::Debug, Some("/f")),
                opt(K::Debug, Some("/g")),
                opt(K::User, None),
                opt(K::User, Some("1:2")),
            ])
        );
        // An optional value is never taken from the next argument.
        assert_eq!(
            permuted(&["--user", "1000"]),
            Ok(vec![opt(K::User, None), Item::Operand("1000".into())])
        );
        assert_eq!(permuted(&["--debug="]), Ok(vec![opt(K::Debug, Some(""))]));
    }

    #[test]
    fn short_options_cluster_and_take_attached_or_next_values() {
        assert_eq!(
            permuted(&["-kd", "/f", "-d/g", "-u", "-u7", "-ku"]),
            Ok(vec![
                opt(K::Kmods, None),
                opt(K::Debug, Some("/f")),
                opt(K::Debug, Some("/g")),
                opt(K::User, None),
                opt(K::User, Some("7")),
                opt(K::Kmods, None),
                opt(K::User, None),
            ])
        );
    }

    #[test]
    fn unique_prefixes_name_long_options_and_exact_names_win() {
        assert_eq!(permuted(&["--load"]), Ok(vec![opt(K::Kmods, None)]));
        assert_eq!(permuted(&["--no-c"]), Ok(vec![opt(K::NoCgroups, None)]));
        assert_eq!(
            permuted(&["--no"]),
            Err(Problem::Ambiguous {
                option: "--no".into(),
                candidates: "--no-cgroups, --no-devbind".into()
            })
        );
    }

    #[test]
    fn in_order_parsing_stops_at_the_first_operand() {
        let (items, rest) = parse(
            &args(&["-k", "configure", "--pid=1", "/r"]),
            OPTS,
            Order::StopAtOperand,
        )
        .unwrap();
        assert_eq!(items, vec![opt(K::Kmods, None)]);
        assert_eq!(rest, args(&["configure", "--pid=1", "/r"]));
    }

    #[test]
    fn double_dash_ends_options_and_a_lone_dash_is_an_operand() {
        assert_eq!(
            permuted(&["-", "--", "--debug", "-k"]),
            Ok(vec![
                Item::Operand("-".into()),
                Item::Operand("--debug".into()),
                Item::Operand("-k".into()),
            ])
        );
    }

    #[test]
    fn refusals_name_the_option_as_written() {
        assert_eq!(
            permuted(&["--nope=secret"]),
            Err(Problem::Unknown {
                option: "--nope".into()
            })
        );
        assert_eq!(
            permuted(&["-kx"]),
            Err(Problem::Unknown {
                option: "-x".into()
            })
        );
        assert_eq!(
            permuted(&["--debug"]),
            Err(Problem::MissingValue {
                option: "--debug".into()
            })
        );
        assert_eq!(
            permuted(&["-d"]),
            Err(Problem::MissingValue {
                option: "-d".into()
            })
        );
        assert_eq!(
            permuted(&["--load=1"]),
            Err(Problem::UnexpectedValue {
                option: "--load-kmods".into()
            })
        );
        assert_eq!(
            permuted(&["--=x"]),
            Err(Problem::Unknown {
                option: "--".into()
            })
        );
    }
}
