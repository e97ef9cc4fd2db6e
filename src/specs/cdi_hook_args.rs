//! The `cdi-hook` command line: how a spec we generated (a CDI spec, or
//! the runtime wrapper's `config.json`) calls this binary back at
//! `createRuntime`, and what it records there of how the spec was made.
//! [`SpecMade`] writes those arguments and is the one reader of them: the
//! hook's fast command line, `cdi validate`, `cdi generate`'s log and the
//! runtime wrapper's check for a spec it edited already all ask it.

use std::path::PathBuf;

use crate::planning::image::ImageLayout;

/// The subcommand the hook runs.
pub const HOOK_COMMAND: &str = "cdi-hook";

/// The only stage it runs at.
pub const HOOK_STAGE: &str = "createRuntime";

/// The flag that records the driver version.
const DRIVER_VERSION: &str = "--driver-version";

/// The flag that records the capabilities.
const CAPABILITIES: &str = "--capabilities";

/// The flag that records the layout.
const LAYOUT: &str = "--layout";

/// The flag that records the host's MIG layout.
const MIG_LAYOUT: &str = "--mig-layout";

/// The flag that records a driver root other than the config's.
const DRIVER_ROOT: &str = "--driver-root";

/// The flag that records a dev root other than the config's.
const DEV_ROOT: &str = "--dev-root";

/// The flag that records a spec made for a CSV (Jetson/Tegra) host.
const CSV_HOST: &str = "--csv-host";

/// The flag that records a spec made from every CSV file of the directory.
const CSV_ALL: &str = "--csv-all";

/// The flag that records a CSV file the spec was made from.
const CSV_FILE: &str = "--csv-file";

/// The flag that records a `sym` pattern the spec was made ignoring.
const CSV_IGNORE: &str = "--csv-ignore-pattern";

/// The roots a spec was made on where its maker named them (`nvidia-ctk cdi
/// generate --driver-root`, `--dev-root`): the hook then reads the driver
/// there too, whatever the config says. `None` is the config's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roots {
    /// The driver's files.
    pub driver: Option<PathBuf>,
    /// The tree whose `dev/` holds the device nodes.
    pub dev: Option<PathBuf>,
    /// For a spec made for a CSV (Jetson/Tegra) host, the CSV files and
    /// patterns it was made with: the hook reads that host so too.
    pub csv: Option<crate::config::CsvSelection>,
}

/// How a spec we generated was made: what its `cdi-hook` records on its
/// command line, so the hook plans what the spec granted and refuses a spec
/// of another driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecMade {
    /// The driver version it was made for.
    pub driver_version: String,
    /// The capabilities its mounts carry, as `NVIDIA_DRIVER_CAPABILITIES` takes them.
    pub capabilities: String,
    /// The layout of its container paths.
    pub layout: ImageLayout,
    /// The host's MIG instances when it was made ([`crate::host::driver::mig_layout`]):
    /// its MIG devices name those. `None` in a spec made before it was recorded.
    pub mig_layout: Option<String>,
    /// The roots it was made on, where they are not the config's.
    pub roots: Roots,
}

impl SpecMade {
    /// The flags after the stage, in the one order they are written.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            DRIVER_VERSION.into(),
            self.driver_version.clone(),
            CAPABILITIES.into(),
            self.capabilities.clone(),
            LAYOUT.into(),
            layout_name(self.layout).into(),
        ];
        if let Some(mig) = &self.mig_layout {
            args.extend([MIG_LAYOUT.into(), mig.clone()]);
        }
        for (flag, root) in [
            (DRIVER_ROOT, &self.roots.driver),
            (DEV_ROOT, &self.roots.dev),
        ] {
            if let Some(root) = root {
                args.extend([flag.into(), root.display().to_string()]);
            }
        }
        if let Some(csv) = &self.roots.csv {
            args.push(CSV_HOST.into());
            if csv.all {
                args.push(CSV_ALL.into());
            }
            for file in csv.files.iter().flatten() {
                args.extend([CSV_FILE.into(), file.display().to_string()]);
            }
            for pattern in &csv.ignore_patterns {
                args.extend([CSV_IGNORE.into(), pattern.clone()]);
            }
        }
        args
    }

    /// The flags as [`SpecMade::args`] writes them, each value a word of
    /// its own that `accept` takes; `None` for any other shape.
    pub fn parse(words: &[&str], accept: impl Fn(&str) -> bool) -> Option<SpecMade> {
        let [DRIVER_VERSION, version, CAPABILITIES, capabilities, LAYOUT, layout, rest @ ..] =
            words
        else {
            return None;
        };
        let (mig_layout, rest) = match rest {
            [MIG_LAYOUT, mig, rest @ ..] if accept(mig) => (Some((*mig).to_string()), rest),
            [MIG_LAYOUT, ..] => return None,
            rest => (None, rest),
        };
        let (driver, rest) = match rest {
            [DRIVER_ROOT, root, rest @ ..] if accept(root) => (Some(PathBuf::from(root)), rest),
            [DRIVER_ROOT, ..] => return None,
            rest => (None, rest),
        };
        let (dev, rest) = match rest {
            [DEV_ROOT, root, rest @ ..] if accept(root) => (Some(PathBuf::from(root)), rest),
            [DEV_ROOT, ..] => return None,
            rest => (None, rest),
        };
        let csv = match rest {
            [] => None,
            [CSV_HOST, tail @ ..] => {
                let mut rest: &[&str] = tail;
                let mut csv = crate::config::CsvSelection::default();
                if let [CSV_ALL, more @ ..] = rest {
                    csv.all = true;
                    rest = more;
                }
                while let [CSV_FILE, file, more @ ..] = rest {
                    if !accept(file) {
                        return None;
                    }
                    csv.files
                        .get_or_insert_with(Vec::new)
                        .push(PathBuf::from(file));
                    rest = more;
                }
                while let [CSV_IGNORE, pattern, more @ ..] = rest {
                    if !accept(pattern) {
                        return None;
                    }
                    csv.ignore_patterns.push((*pattern).to_string());
                    rest = more;
                }
                if !rest.is_empty() {
                    return None;
                }
                Some(csv)
            }
            _ => return None,
        };
        if ![version, capabilities, layout].iter().all(|w| accept(w)) {
            return None;
        }
        Some(SpecMade {
            driver_version: (*version).to_string(),
            capabilities: (*capabilities).to_string(),
            layout: layout_named(layout)?,
            mig_layout,
            roots: Roots { driver, dev, csv },
        })
    }

    /// For a hook's arguments (the program name first): whether it is ours
    /// (`cdi-hook` its command), and then the driver version it records,
    /// `Some(None)` when it records none.
    pub fn recorded_driver<'a>(args: &[&'a str]) -> Option<Option<&'a str>> {
        if !is_ours(args) {
            return None;
        }
        let at = args.iter().position(|a| *a == DRIVER_VERSION);
        Some(at.and_then(|i| args.get(i + 1).copied()))
    }
}

/// Whether a hook's arguments (the program name first) call our `cdi-hook`.
pub fn is_ours(args: &[&str]) -> bool {
    args.get(1) == Some(&HOOK_COMMAND)
}

/// A layout as the command line spells it.
pub fn layout_name(layout: ImageLayout) -> &'static str {
    match layout {
        ImageLayout::Debian => "debian",
        ImageLayout::Rpm => "rpm",
    }
}

/// The layout the command line spells `name`.
fn layout_named(name: &str) -> Option<ImageLayout> {
    [ImageLayout::Debian, ImageLayout::Rpm]
        .into_iter()
        .find(|l| layout_name(*l) == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_and_nothing_else_does() {
        let made = SpecMade {
            driver_version: "535.261.03".into(),
            capabilities: "compute,utility".into(),
            layout: ImageLayout::Rpm,
            mig_layout: Some("0:1:0,0:2:0".into()),
            roots: Roots::default(),
        };
        let args = made.args();
        let words: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(SpecMade::parse(&words, |_| true), Some(made.clone()));
        // A spec made before the MIG layout was recorded still reads.
        let before = SpecMade {
            mig_layout: None,
            ..made.clone()
        };
        assert_eq!(SpecMade::parse(&words[..6], |_| true), Some(before));
        assert_eq!(SpecMade::parse(&words[..7], |_| true), None);
        assert_eq!(SpecMade::parse(&words[..4], |_| true), None);
        assert_eq!(SpecMade::parse(&words, |w| w != "rpm"), None);
        // Roots named when the spec was made read back, each alone or both.
        for roots in [
            Roots {
                driver: Some("/run/nvidia/driver".into()),
                dev: Some("/run/nvidia/driver".into()),
                csv: None,
            },
            Roots {
                driver: Some("/run/nvidia/driver".into()),
                dev: None,
                csv: None,
            },
            Roots {
                driver: None,
                dev: Some("/sim/devroot".into()),
                csv: None,
            },
            Roots {
                driver: Some("/sim".into()),
                dev: None,
                csv: Some(crate::config::CsvSelection {
                    files: Some(vec!["/sim/a.csv".into(), "/sim/b.csv".into()]),
                    ignore_patterns: vec!["**/*.so".into()],
                    all: true,
                    force: false,
                }),
            },
        ] {
            let rooted = SpecMade {
                roots,
                ..made.clone()
            };
            let args = rooted.args();
            let words: Vec<&str> = args.iter().map(String::as_str).collect();
            assert_eq!(SpecMade::parse(&words, |_| true), Some(rooted));
            assert_eq!(SpecMade::parse(&words[..words.len() - 1], |_| true), None);
        }
        let mut hook = vec!["oci-nvidia-hook", HOOK_COMMAND, HOOK_STAGE];
        hook.extend(&words);
        assert_eq!(SpecMade::recorded_driver(&hook), Some(Some("535.261.03")));
        assert_eq!(SpecMade::recorded_driver(&hook[..3]), Some(None));
        assert_eq!(SpecMade::recorded_driver(&["sh", "-c"]), None);
    }

    #[test]
    fn a_csv_host_spec_reads_back_with_or_without_its_files() {
        let made = SpecMade {
            driver_version: "R36.4.3".into(),
            capabilities: "compute,utility".into(),
            layout: ImageLayout::Debian,
            mig_layout: Some("none".into()),
            roots: Roots {
                csv: Some(crate::config::CsvSelection::default()),
                ..Roots::default()
            },
        };
        let args = made.args();
        assert_eq!(args.last().map(String::as_str), Some(CSV_HOST));
        let words: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(SpecMade::parse(&words, |_| true), Some(made));
        let mut extra = words.clone();
        extra.push("--csv-other");
        assert_eq!(SpecMade::parse(&extra, |_| true), None);
    }
}
