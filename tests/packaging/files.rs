//! `packaging/files`, the list `packaging/build` stages both packages from,
//! read as the tests need it: every path a built package must hold, with
//! its mode, link target and whether it is a conffile. Reads the list and
//! the generated manual pages; builds nothing.

use std::collections::BTreeMap;
use std::path::Path;

use harness::project::repo;

/// The two packages.
pub const PACKAGES: [&str; 2] = ["oci-nvidia-hook", "oci-nvidia-hook-compat"];

/// The conffile, the one file an administrator owns once installed.
pub const CONFFILE: &str = "/etc/oci-nvidia-hook/config.toml";

/// A package format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Debian's .deb.
    Deb,
    /// RPM.
    Rpm,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Deb => "deb",
            Format::Rpm => "rpm",
        }
    }

    /// The group a set-group-ID file belongs to: the unprivileged group,
    /// gid 65534, which Debian names nogroup and RPM distributions nobody.
    pub fn secure_group(self) -> &'static str {
        match self {
            Format::Deb => "nogroup",
            Format::Rpm => "nobody",
        }
    }

    /// What `${unitdir}`, `${udevrulesdir}` and `${zshcompdir}` are.
    fn expand(self, dest: &str) -> String {
        let (units, udev, zsh) = match self {
            Format::Deb => (
                "/lib/systemd/system",
                "/lib/udev/rules.d",
                "/usr/share/zsh/vendor-completions",
            ),
            Format::Rpm => (
                "/usr/lib/systemd/system",
                "/usr/lib/udev/rules.d",
                "/usr/share/zsh/site-functions",
            ),
        };
        dest.replace("${unitdir}", units)
            .replace("${udevrulesdir}", udev)
            .replace("${zshcompdir}", zsh)
    }
}

/// What one path of a package must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// Its permission bits (0777 for a link).
    pub mode: u32,
    /// Its group's name: root, or [`Format::secure_group`] for a
    /// set-group-ID file.
    pub group: String,
    /// A link's target.
    pub link: Option<String>,
    /// A conffile (dpkg) or `%config(noreplace)` (RPM).
    pub conffile: bool,
}

/// Every path `package` holds in `format`, owned by root (its group
/// [`Expected::group`]), man pages expanded from the
/// generated pages in the row's `@docs/` directory (`man`, `man-compat`).
pub fn expected(package: &str, format: Format, docs: &Path) -> BTreeMap<String, Expected> {
    let text = std::fs::read_to_string(repo().join("packaging/files")).expect("packaging/files");
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        let [pkg, formats, mode, kind, dest, source] = cols[..] else {
            panic!("packaging/files: malformed line {line:?}");
        };
        if pkg != package || (formats != "all" && formats != format.name()) {
            continue;
        }
        let mode = u32::from_str_radix(mode, 8).expect("octal mode");
        let dest = format.expand(dest);
        let group = if mode & 0o2000 != 0 {
            format.secure_group()
        } else {
            "root"
        };
        let file = |conffile| Expected {
            mode,
            group: group.to_string(),
            link: None,
            conffile,
        };
        match kind {
            "man" => {
                let dir = source
                    .strip_prefix("@docs/")
                    .expect("man pages come from @docs/");
                for page in std::fs::read_dir(docs.join(dir)).expect("generated man pages") {
                    let name = page.unwrap().file_name();
                    let name = name.to_str().unwrap();
                    out.insert(format!("{dest}/{name}.gz"), file(false));
                }
            }
            "link" => {
                out.insert(
                    dest,
                    Expected {
                        mode,
                        group: "root".to_string(),
                        link: Some(source.to_string()),
                        conffile: false,
                    },
                );
            }
            "conffile" => {
                out.insert(dest, file(true));
            }
            "file" | "binary" | "gzip" => {
                out.insert(dest, file(false));
            }
            other => panic!("packaging/files: unknown kind {other}"),
        }
    }
    assert!(
        !out.is_empty(),
        "packaging/files lists nothing for {package}"
    );
    out
}
