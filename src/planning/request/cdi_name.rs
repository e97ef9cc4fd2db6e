//! CDI's names: the `vendor/class` kind of a spec, a device's name, and
//! the qualified `vendor/class=name` a container asks for, with the rules
//! CDI's parser (`pkg/parser`) applies. `cdi validate` and the runtime
//! wrapper's CDI mode read names through here alone.

/// A device name as a container gives it: `vendor/class=name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Qualified {
    /// `vendor/class`.
    pub kind: String,
    /// The device's name in that kind's specs.
    pub name: String,
}

impl std::fmt::Display for Qualified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.kind, self.name)
    }
}

impl Qualified {
    /// `text` as a qualified name, or why it is not one.
    pub fn parse(text: &str) -> Result<Qualified, String> {
        let Some((kind, name)) = text.split_once('=') else {
            return Err(format!("{text:?} is not vendor/class=name"));
        };
        if let Some(why) = kind_problem(kind).or_else(|| device_name_problem(name)) {
            return Err(why);
        }
        Ok(Qualified {
            kind: kind.to_string(),
            name: name.to_string(),
        })
    }

    /// Whether `text` looks like a qualified name at all (`vendor/class=…`):
    /// what tells a CDI request from a legacy device list.
    pub fn looks_qualified(text: &str) -> bool {
        text.split_once('=')
            .is_some_and(|(kind, _)| kind.split_once('/').is_some())
    }
}

/// Why `kind` is not `vendor/class`, if it is not.
pub fn kind_problem(kind: &str) -> Option<String> {
    let Some((vendor, class)) = kind
        .split_once('/')
        .filter(|(v, c)| !v.is_empty() && !c.is_empty())
    else {
        return Some(format!(
            "{kind:?} is not vendor/class (e.g. nvidia.com/gpu)"
        ));
    };
    // CDI's vendor parser also takes '_', though its comment does not say so.
    syntax(
        vendor,
        "vendor",
        char::is_ascii_alphabetic,
        "a letter",
        |c| matches!(c, '_' | '-' | '.'),
    )
    .or_else(|| {
        // A dot in the class needs CDI 0.6.0: the version check says so.
        syntax(class, "class", char::is_ascii_alphabetic, "a letter", |c| {
            matches!(c, '_' | '-' | '.')
        })
    })
    .map(|why| format!("{kind:?}: {why}"))
}

/// Why `name` is not a CDI device name, if it is not. A leading digit needs
/// CDI 0.5.0, which the version check reports.
pub fn device_name_problem(name: &str) -> Option<String> {
    syntax(
        name,
        "device name",
        char::is_ascii_alphanumeric,
        "a letter or digit",
        |c| matches!(c, '_' | '-' | '.' | ':'),
    )
    .map(|why| format!("{name:?}: {why}"))
}

/// CDI's name grammar: `first` to start, letters, digits or `extra` within,
/// a letter or digit to end.
fn syntax(
    s: &str,
    what: &str,
    first: fn(&char) -> bool,
    first_words: &str,
    extra: fn(char) -> bool,
) -> Option<String> {
    let mut chars = s.chars();
    let Some(c) = chars.next() else {
        return Some(format!("the {what} is empty"));
    };
    if !first(&c) {
        return Some(format!(
            "the {what} must start with {first_words}, not {c:?}"
        ));
    }
    if let Some(bad) = s.chars().find(|c| !c.is_ascii_alphanumeric() && !extra(*c)) {
        return Some(format!("the {what} holds {bad:?}, which CDI does not take"));
    }
    match s.chars().last() {
        Some(last) if !last.is_ascii_alphanumeric() => Some(format!(
            "the {what} must end with a letter or digit, not {last:?}"
        )),
        _ => None,
    }
}
