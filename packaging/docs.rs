//! The packages' manual pages and shell completions, generated from the
//! command-line definition (`oci_nvidia_hook::front::ours::Cli`), so that no
//! hand-written copy can drift from the flags the binary takes.
//!
//! Built into `examples/package-docs.rs` (what `make deb` and `make rpm`
//! run) and into `tests/packaging.rs`, never into the hook: the hook's
//! start-up time and size stay what they are. Writes only under the
//! directory it is given.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Roff};
use clap_mangen::Man;
use oci_nvidia_hook::front::cdi_hook::{self, CdiHook};
use oci_nvidia_hook::front::ctk::{self, Ctk};
use oci_nvidia_hook::front::ours::Cli;

/// The command's name: the binary, its man page, its completions.
pub const NAME: &str = "oci-nvidia-hook";

/// The completion files, by shell, as the packages install them.
pub const COMPLETIONS: [(Shell, &str); 3] = [
    (Shell::Bash, "oci-nvidia-hook.bash"),
    (Shell::Zsh, "_oci-nvidia-hook"),
    (Shell::Fish, "oci-nvidia-hook.fish"),
];

/// The completion files of the compat package's `nvidia-ctk`.
pub const CTK_COMPLETIONS: [(Shell, &str); 3] = [
    (Shell::Bash, "nvidia-ctk.bash"),
    (Shell::Zsh, "_nvidia-ctk"),
    (Shell::Fish, "nvidia-ctk.fish"),
];

/// The completion files of the compat package's `nvidia-cdi-hook`.
pub const CDI_HOOK_COMPLETIONS: [(Shell, &str); 3] = [
    (Shell::Bash, "nvidia-cdi-hook.bash"),
    (Shell::Zsh, "_nvidia-cdi-hook"),
    (Shell::Fish, "nvidia-cdi-hook.fish"),
];

/// Writes `OUT/man/*.1` (the command and each subcommand, nested ones as
/// `oci-nvidia-hook-cdi-generate.1`), `OUT/man-compat/*.1` (the compat
/// package's `nvidia-ctk`, `nvidia-cdi-hook` and their subcommands) and `OUT/completions/*`;
/// returns every file written.
pub fn write_all(out: &Path) -> io::Result<Vec<PathBuf>> {
    let mut written = write_man_pages(&out.join("man"), Cli::command(), NAME)?;
    written.extend(write_man_pages(
        &out.join("man-compat"),
        Ctk::command(),
        ctk::NAME,
    )?);
    written.extend(write_man_pages(
        &out.join("man-compat"),
        CdiHook::command(),
        cdi_hook::NAME,
    )?);
    written.extend(write_completions(
        &out.join("completions"),
        Cli::command,
        NAME,
        &COMPLETIONS,
    )?);
    written.extend(write_completions(
        &out.join("completions"),
        Ctk::command,
        ctk::NAME,
        &CTK_COMPLETIONS,
    )?);
    written.extend(write_completions(
        &out.join("completions"),
        CdiHook::command,
        cdi_hook::NAME,
        &CDI_HOOK_COMPLETIONS,
    )?);
    Ok(written)
}

/// One page per command of `cmd` (named `top`), each ending with the
/// sections clap knows nothing of: files, NVIDIA's names and exit status
/// for our own top command, and SEE ALSO for all.
fn write_man_pages(dir: &Path, cmd: clap::Command, top: &str) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    collect(&cmd, &mut pages);
    let names: Vec<String> = pages.iter().map(page_name).collect();
    let mut written = Vec::new();
    for page in &pages {
        let name = page_name(page);
        let mut text = Vec::new();
        Man::new(page.clone())
            .source(format!("{NAME} {}", env!("CARGO_PKG_VERSION")))
            .manual("oci-nvidia-hook manual")
            .render(&mut text)?;
        let extra = if name == NAME {
            top_sections(&names)
        } else {
            let mut roff = Roff::new();
            let mut related = vec![top.to_string()];
            if name == top {
                related = names[1..].to_vec();
                related.push(NAME.to_string());
            }
            see_also(&mut roff, &related);
            roff
        };
        text.extend_from_slice(without_preamble(&extra).as_bytes());
        let path = dir.join(format!("{name}.1"));
        fs::write(&path, text)?;
        written.push(path);
    }
    Ok(written)
}

/// `cmd` and every visible subcommand below it, depth first.
fn collect(cmd: &clap::Command, out: &mut Vec<clap::Command>) {
    out.push(cmd.clone());
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub, out);
    }
}

/// The page's name: `oci-nvidia-hook`, `oci-nvidia-hook-cdi-generate`.
fn page_name(cmd: &clap::Command) -> String {
    cmd.get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string()
}

/// The top page's own sections.
fn top_sections(pages: &[String]) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["FILES"]);
    for (path, what) in [
        (
            "/etc/oci-nvidia-hook/config.toml",
            "The configuration read when --config is not given; a missing file means the defaults. Every key is in the shipped file, commented with its default and meaning. Never read from the environment.",
        ),
        (
            "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json",
            "The hook entry Podman and CRI-O read: prestart (Podman 5: createRuntime) for every container, with an explicit environment. The hook does nothing for a container that does not set NVIDIA_VISIBLE_DEVICES.",
        ),
        (
            "/var/run/cdi/nvidia.yaml",
            "The CDI spec that cdi generate writes by default, and that oci-nvidia-hook-cdi.service makes again at boot, when a driver module is loaded and when the driver's libraries or this configuration change.",
        ),
    ] {
        roff.control("TP", []).text([bold(path)]).text([roman(what)]);
    }
    roff.control("SH", ["NVIDIA'S NAMES"]);
    roff.text([roman(
        "The package oci-nvidia-hook-compat links this binary under the names of NVIDIA's tools, and it then takes their command lines: ",
    )]);
    for (name, what) in [
        (
            "nvidia-container-runtime-hook prestart",
            "the hook Docker's --gpus adds; dockerd looks the name up on its PATH when it starts, so restart dockerd after installing the package.",
        ),
        (
            "nvidia-container-cli",
            "info, list and configure, as containerd's ctr run --gpus calls it.",
        ),
        (
            "nvidia-container-runtime",
            "runtime mode (the runtime subcommand) for hosts configured for NVIDIA's runtime.",
        ),
        (
            "nvidia-ctk runtime configure",
            "registers nvidia-container-runtime with Docker, containerd or CRI-O, as NVIDIA's setup instructions run it (nvidia-ctk(1)).",
        ),
        (
            "nvidia-cdi-hook",
            "the createContainer hooks of CDI specs made by NVIDIA's tools (update-ldcache, create-symlinks and the others; nvidia-cdi-hook(1)), also as nvidia-ctk hook.",
        ),
    ] {
        roff.control("TP", []).text([bold(name)]).text([roman(what)]);
    }
    roff.control("PP", []).text([roman(
        "Do not install that package beside NVIDIA's toolkit: it conflicts with it and replaces its tools.",
    )]);
    roff.control("SH", ["EXIT STATUS"]);
    roff.text([roman(
        "0 on success; 1 on any failure, with one line on stderr (and in the configured log file) naming the cause. A runtime then aborts the container.",
    )]);
    see_also(&mut roff, &pages[1..]);
    roff.control("PP", []).text([
        roman("The README, "),
        italic("/usr/share/doc/oci-nvidia-hook/README.md"),
        roman(", and the guides it links to in "),
        italic("/usr/share/doc/oci-nvidia-hook/docs/"),
        roman(", explain each mode, the configuration and its limits."),
    ]);
    roff
}

/// A SEE ALSO section naming `pages` in section 1.
fn see_also(roff: &mut Roff, pages: &[String]) {
    roff.control("SH", ["SEE ALSO"]);
    let mut line = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        if i > 0 {
            line.push(roman(", "));
        }
        line.push(bold(page.as_str()));
        line.push(roman("(1)"));
    }
    roff.text(line);
}

/// Roff text without the preamble every rendering starts with, for
/// appending to a page that has one.
fn without_preamble(roff: &Roff) -> String {
    let text = roff.render();
    let preamble = Roff::new().render();
    text.strip_prefix(&preamble).unwrap_or(&text).to_string()
}

/// clap_complete's bash script names a subcommand's state one way where it
/// sets it (`oci__nvidia__hook__subcmd__list`) and another where it matches
/// it (`oci__subcmd__nvidia__subcmd__hook__subcmd__list`) when the binary's
/// name has a hyphen, so nothing past the subcommand completes
/// (clap-rs/clap#6421, open). Spell the matches as the states are set; a
/// fixed clap_complete leaves nothing to replace.
fn fix_bash_states(script: &[u8], name: &str) -> Vec<u8> {
    let script = String::from_utf8_lossy(script);
    let state = name.replace('-', "__");
    let misspelt = name.replace('-', "__subcmd__");
    script.replace(&misspelt, &state).into_bytes()
}

/// `DIR/<file>` for each shell of `files`, completing `command()` run as `name`.
fn write_completions(
    dir: &Path,
    command: fn() -> clap::Command,
    name: &str,
    files: &[(Shell, &str)],
) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for &(shell, file) in files {
        let mut cmd = command();
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut cmd, name, &mut text);
        if shell == Shell::Bash {
            text = fix_bash_states(&text, name);
        }
        let path = dir.join(file);
        fs::write(&path, text)?;
        written.push(path);
    }
    Ok(written)
}
