//! An image's needs against this host: the CUDA runtime version it carries
//! (`/usr/local/cuda/version.json`, `version.txt`, the `libcudart.so.*`
//! that `cudart` finds in wheels, conda prefixes, toolkits and a bounded
//! walk, the highest of them; else `CUDA_VERSION`; or `--cuda`), whether a container of it
//! starts (the hook's own planner and requirement checks, on this host) and
//! whether its CUDA fits under the driver's ceiling.
//!
//! The image is hostile: its files are resolved inside its rootfs with
//! `pathrs`, checked through `O_PATH` before anything is opened, and only
//! regular files are read, a bounded amount. Nothing of it is executed,
//! loaded or mounted.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use pathrs::Root;

use super::ceiling::{self, Verdict};
use super::{Check, Error, HostFacts, Layer, Options};
use crate::config::Config;
use crate::host::driver::CudaVersion;
use crate::planning::bundle::Container;
use crate::planning::planner::{self, ImageSource, Inputs, Source};
use crate::planning::request::env_var;
use crate::planning::require::{self, Requirements};
use crate::util::reopen::{Expect, Reopener};

const L: Layer = Layer::Image;

/// Largest image file doctor reads (version.json is about 3 KiB).
const MAX_READ: u64 = 256 * 1024;

/// Largest image config doctor reads.
const MAX_CONFIG: u64 = 16 * 1024 * 1024;

/// The image's CUDA version and where it was read.
#[derive(Debug, Clone)]
struct Found {
    cuda: CudaVersion,
    from: String,
}

/// The image `options` describe, read before the host is planned for:
/// what reading it found, and the container the hook would be asked to start.
pub(super) struct Described {
    /// The checks of reading its config and opening its rootfs.
    checks: Vec<Check>,
    /// Its CUDA version and where it was read.
    found: Option<Found>,
    /// Whether the search for CUDA runtimes stopped at its bound.
    search_cut: bool,
    /// Its rootfs, when one was given and opened.
    rootfs: Option<PathBuf>,
    /// The container of it, as a runtime would describe it to the hook.
    container: Container,
    /// What the container was assumed to ask for, said after "starts".
    assumed: &'static str,
}

impl Described {
    /// The planner's inputs for the container: as the hook plans it.
    pub(super) fn inputs(&self) -> Inputs<'_> {
        let image = match &self.rootfs {
            Some(dir) => ImageSource::Rootfs(dir),
            None => ImageSource::Layout(Default::default()),
        };
        Inputs::new(Source::Container(&self.container), image)
    }
}

/// Reads the image `options` describe.
pub(super) fn describe(options: &Options) -> Described {
    let mut checks = Vec::new();
    let mut env = match &options.image_config {
        Some(file) => match image_env(file) {
            Ok(env) => env,
            Err(reason) => {
                checks.push(Check::fail(
                    L,
                    "image config",
                    format!("{}: {reason}", file.display()),
                    "give an OCI image config (`skopeo inspect --config`) or `docker inspect` \
                     output",
                ));
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    env.extend(options.env.iter().cloned());
    let root = match &options.image_rootfs {
        Some(dir) => match Root::open(dir) {
            Ok(root) => Some(root),
            Err(e) => {
                checks.push(Check::fail(
                    L,
                    "image rootfs",
                    format!(
                        "cannot open {}: {}",
                        dir.display(),
                        crate::util::error_line::error(&e)
                    ),
                    "give the directory of an unpacked image (`docker export`, \
                     `podman mount`)",
                ));
                None
            }
        },
        None => None,
    };
    let runtimes = root.as_ref().map(super::cudart::find).unwrap_or_default();
    let found = image_cuda(options, root.as_ref(), &runtimes, &env);
    // A rootfs that did not open was reported above: plan for its layout alone.
    let rootfs = options.image_rootfs.clone().filter(|_| root.is_some());
    let mut assumed = "";
    if env_var(&env, "NVIDIA_VISIBLE_DEVICES").is_none() {
        // `docker run --gpus all` and `--device nvidia.com/gpu=all` add it.
        env.push("NVIDIA_VISIBLE_DEVICES=all".into());
        assumed = " (asked with NVIDIA_VISIBLE_DEVICES=all, as --gpus all asks)";
    }
    let container = Container::bare(rootfs.clone().unwrap_or_else(|| PathBuf::from("/")), env);
    Described {
        checks,
        search_cut: runtimes.cut,
        found,
        rootfs,
        container,
        assumed,
    }
}

/// Checks the image `described` against this host: the plan `facts`
/// carry for its container, and its CUDA version against the driver's.
pub(super) fn check(
    config: &Config,
    options: &Options,
    described: Described,
    facts: &HostFacts,
    out: &mut Vec<Check>,
) {
    out.extend(described.checks);
    starts(
        &described.container.env,
        described.assumed,
        described.found.as_ref(),
        facts,
        out,
    );
    ceiling_check(
        config,
        options,
        (described.found.as_ref(), described.search_cut),
        facts,
        out,
    );
}

/// `Env` of an OCI image config (`config.Env`) or of `docker inspect`
/// output (`[0].Config.Env`).
fn image_env(file: &Path) -> Result<Vec<String>, Error> {
    let data = std::fs::File::open(file)
        .and_then(|f| read_bounded(f, MAX_CONFIG))
        .map_err(|source| Error::Read {
            file: file.to_path_buf(),
            source,
        })?
        .ok_or_else(|| Error::TooLarge {
            file: file.to_path_buf(),
            limit: MAX_CONFIG,
        })?;
    let json: serde_json::Value = serde_json::from_slice(&data).map_err(|source| Error::Json {
        file: file.to_path_buf(),
        source,
    })?;
    let config = match &json {
        serde_json::Value::Array(items) => items.first().and_then(|i| i.get("Config")),
        other => other.get("config").or_else(|| other.get("Config")),
    };
    let env = config
        .and_then(|c| c.get("Env"))
        .ok_or_else(|| Error::NoEnv {
            file: file.to_path_buf(),
        })?;
    serde_json::from_value(env.clone()).map_err(|source| Error::Env {
        file: file.to_path_buf(),
        source,
    })
}

/// Reads at most `limit` bytes; `None` when there are more.
fn read_bounded(file: impl Read, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut data = Vec::new();
    file.take(limit + 1).read_to_end(&mut data)?;
    Ok((data.len() as u64 <= limit).then_some(data))
}

/// The image's CUDA version, from the most direct source there is.
fn image_cuda(
    options: &Options,
    root: Option<&Root>,
    runtimes: &super::cudart::Search,
    env: &[String],
) -> Option<Found> {
    if let Some(text) = &options.cuda {
        return CudaVersion::parse(text).map(|cuda| Found {
            cuda,
            from: "--cuda".into(),
        });
    }
    if let Some(root) = root {
        // The highest of what the image holds: the runtime that needs the
        // most of the driver is the one that fails first.
        let found = [version_json(root), cudart(runtimes), version_txt(root)]
            .into_iter()
            .flatten()
            .fold(None, |best: Option<Found>, f| match best {
                Some(b) if b.cuda >= f.cuda => Some(b),
                _ => Some(f),
            });
        if let Some(found) = found {
            return Some(found);
        }
    }
    let value = env_var(env, "CUDA_VERSION").filter(|v| !v.is_empty())?;
    CudaVersion::parse(value).map(|cuda| Found {
        cuda,
        from: format!("CUDA_VERSION={value}"),
    })
}

/// An image file's bytes, resolved inside the rootfs, if it is a regular file.
fn read_in_image(root: &Root, path: &str) -> Option<Vec<u8>> {
    let handle = root.resolve(path).ok()?;
    let reopener = Reopener::open().ok()?;
    let file = reopener
        .reopen(handle.as_fd(), Path::new(path), Expect::File)
        .ok()?;
    read_bounded(file, MAX_READ).ok().flatten()
}

/// `/usr/local/cuda/version.json`: the runtime's version (`cuda_cudart`),
/// else the toolkit's (`cuda`).
fn version_json(root: &Root) -> Option<Found> {
    let path = "/usr/local/cuda/version.json";
    let json: serde_json::Value = serde_json::from_slice(&read_in_image(root, path)?).ok()?;
    ["cuda_cudart", "cuda"].iter().find_map(|key| {
        let version = json.get(key)?.get("version")?.as_str()?;
        Some(Found {
            cuda: CudaVersion::parse(version)?,
            from: format!("{path} ({key} {version})"),
        })
    })
}

/// `/usr/local/cuda/version.txt` of CUDA 10 and older: `CUDA Version 10.2.89`.
fn version_txt(root: &Root) -> Option<Found> {
    let path = "/usr/local/cuda/version.txt";
    let text = String::from_utf8(read_in_image(root, path)?).ok()?;
    let version = text.trim().strip_prefix("CUDA Version ")?;
    Some(Found {
        cuda: CudaVersion::parse(version)?,
        from: format!("{path} ({version})"),
    })
}

/// The highest CUDA runtime library the image keeps (wheels, conda,
/// toolkits, the bounded walk: `cudart`).
fn cudart(search: &super::cudart::Search) -> Option<Found> {
    search.highest().map(|runtime| Found {
        cuda: runtime.cuda,
        from: runtime.shown(),
    })
}

/// Whether a container of the image starts: the hook's own planner and
/// requirement checks, as a runtime would call it, with the GPUs the user
/// will ask for (`facts` carry the plan made on the host's inventory).
fn starts(
    env: &[String],
    assumed: &str,
    found: Option<&Found>,
    facts: &HostFacts,
    out: &mut Vec<Check>,
) {
    let (Some(inventory), Some(planned)) = (&facts.inventory, &facts.container) else {
        out.push(Check::warn(
            L,
            "starts",
            "not predicted: the host driver failed its checks",
            "fix the host driver layer first",
        ));
        return;
    };
    match planned {
        Ok(planned) if planned.effective.is_void() => out.push(Check::warn(
            L,
            "starts",
            "the container asks for no GPU (NVIDIA_VISIBLE_DEVICES is void): the hook \
             leaves it alone",
            "run it with --gpus all (Docker), --device nvidia.com/gpu=all (CDI) or \
             NVIDIA_VISIBLE_DEVICES=all",
        )),
        Ok(planned) => out.push(Check::ok(
            L,
            "starts",
            format!(
                "a container starts{assumed}: {} GPUs, capabilities {}, {} files",
                planned.plan.selected.len(),
                planned.effective.request.capabilities,
                planned.plan.mounts.len()
            ),
        )),
        Err(e) => {
            let text = crate::util::error_line::error(e);
            let wanted = required_cuda(env).or(found.map(|f| f.cuda));
            let remedy = match (e, wanted, facts.cuda) {
                (
                    planner::Error::Require(require::Error::Unsatisfied(refusal)),
                    Some(wanted),
                    Some(driver),
                ) if refusal.wants_more_cuda() => ceiling::remedy(
                    wanted,
                    driver,
                    &inventory.driver_version,
                    inventory.gpus.first().map(|g| g.model.as_str()),
                ),
                _ if facts.failed => "fix the host driver layer first: the hook refuses \
                                       for what it found there"
                    .to_string(),
                _ => "the message names what to change: the hook refuses this container \
                      with it"
                    .to_string(),
            };
            out.push(Check::fail(
                L,
                "starts",
                format!("the hook refuses the container{assumed}: {text}"),
                remedy,
            ));
        }
    }
}

/// The CUDA version a `cuda>=X.Y` term of `NVIDIA_REQUIRE_CUDA` asks for,
/// or the one a legacy image's `CUDA_VERSION` implies, read by the hook's
/// own grammar; for naming a driver in the remedy only (the hook's checks
/// decide the refusal).
fn required_cuda(env: &[String]) -> Option<CudaVersion> {
    Requirements::from_env(env).ok()?.cuda_asked()
}

/// The image's CUDA against the driver's ceiling.
fn ceiling_check(
    config: &Config,
    options: &Options,
    (found, cut): (Option<&Found>, bool),
    facts: &HostFacts,
    out: &mut Vec<Check>,
) {
    let Some(found) = found else {
        out.push(if cut {
            Check::warn(
                L,
                "CUDA ceiling",
                format!(
                    "no CUDA runtime found in the image, but the search stopped after {} \
                     entries: one may sit deeper",
                    super::cudart::MAX_ENTRIES
                ),
                "state the image's CUDA with --cuda (its `libcudart.so.*` names it)",
            )
        } else {
            Check::ok(
                L,
                "CUDA ceiling",
                "no CUDA runtime found in the image: nothing to hold against the driver",
            )
        });
        return;
    };
    let (Some(driver_cuda), Some(inventory)) = (facts.cuda, &facts.inventory) else {
        out.push(Check::warn(
            L,
            "CUDA ceiling",
            format!(
                "image CUDA {} (from {}); the driver's CUDA version is unknown",
                found.cuda, found.from
            ),
            "fix the host driver layer first",
        ));
        return;
    };
    let driver = driver_cuda;
    let model = inventory.gpus.first().map(|g| g.model.as_str());
    let image = found.cuda;
    let both = format!(
        "the image's CUDA {image} (from {}) needs more than driver {} offers (CUDA {driver})",
        found.from, inventory.driver_version
    );
    let verdict = ceiling::judge(image, driver);
    if verdict == Verdict::Fits {
        out.push(Check::ok(
            L,
            "CUDA ceiling",
            format!(
                "the image's CUDA {image} (from {}) runs on driver {} (CUDA {driver})",
                found.from, inventory.driver_version
            ),
        ));
        return;
    }
    // Forward compatibility: the image's newer compat libcuda, which the hook
    // puts first in the loader's path; data-center GPUs only.
    let compat = options
        .image_rootfs
        .as_ref()
        .and_then(|dir| {
            crate::planning::image::Image::inspect(
                dir,
                &inventory.driver_version,
                config.cuda_compat.mode,
            )
            .ok()
        })
        .and_then(|i| i.compat);
    if let Some((compat, cuda)) =
        compat.and_then(|c| c.cuda.filter(|&cuda| cuda >= image).map(|cuda| (c, cuda)))
    {
        if model.and_then(ceiling::data_center) == Some(true) {
            out.push(Check::ok(
                L,
                "CUDA ceiling",
                format!(
                    "{both}, but it ships forward-compatibility libraries of driver {} \
                     (CUDA {}), which this data-center GPU can use",
                    compat.driver_version, cuda
                ),
            ));
            return;
        }
    }
    let remedy = ceiling::remedy(image, driver, &inventory.driver_version, model);
    match verdict {
        Verdict::MinorAbove => out.push(Check::warn(
            L,
            "CUDA ceiling",
            format!(
                "{both}: it runs under minor version compatibility, but PTX built for \
                 CUDA {image} and features of newer drivers fail"
            ),
            remedy,
        )),
        _ => out.push(Check::fail(
            L,
            "CUDA ceiling",
            format!("{both}: \"CUDA driver version is insufficient for CUDA runtime version\""),
            remedy,
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn env(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn reads_the_cuda_an_image_requires() {
        assert_eq!(
            required_cuda(&env(&[
                "NVIDIA_REQUIRE_CUDA=cuda>=12.6 brand=tesla,driver>=470,driver<471"
            ])),
            CudaVersion::parse("12.6")
        );
        assert_eq!(
            required_cuda(&env(&["CUDA_VERSION=11.8.0"])),
            CudaVersion::parse("11.8")
        );
        assert_eq!(required_cuda(&env(&["PATH=/bin"])), None);
    }

    /// The image's CUDA as `describe` reads it, from `root` alone.
    fn read(options: &Options, root: &Root) -> Option<Found> {
        image_cuda(options, Some(root), &super::super::cudart::find(root), &[])
    }

    #[test]
    fn reads_cuda_from_version_json_then_cudart_names_then_version_txt() {
        let dir = tempfile::tempdir().unwrap();
        let cuda = dir.path().join("usr/local/cuda-12.6");
        fs::create_dir_all(cuda.join("lib64")).unwrap();
        std::os::unix::fs::symlink("/usr/local/cuda-12.6", dir.path().join("usr/local/cuda"))
            .unwrap();
        fs::write(cuda.join("version.txt"), "CUDA Version 12.4.0\n").unwrap();
        let root = Root::open(dir.path()).unwrap();
        assert_eq!(
            version_txt(&root).unwrap().cuda,
            CudaVersion::parse("12.4").unwrap()
        );
        fs::write(cuda.join("lib64/libcudart.so.12.5.82"), b"").unwrap();
        fs::write(cuda.join("lib64/libcudart.so.12"), b"").unwrap();
        let options = Options::default();
        let found = read(&options, &root).unwrap();
        assert_eq!(found.cuda, CudaVersion::parse("12.5").unwrap());
        assert!(
            found.from.ends_with("libcudart.so.12.5.82"),
            "{}",
            found.from
        );
        fs::write(
            cuda.join("version.json"),
            r#"{"cuda": {"name": "CUDA SDK", "version": "12.6.3"},
                "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": "12.6.77"}}"#,
        )
        .unwrap();
        let found = read(&options, &root).unwrap();
        assert_eq!(found.cuda, CudaVersion::parse("12.6").unwrap());
        assert!(found.from.contains("cuda_cudart 12.6.77"), "{}", found.from);
        // --cuda wins over the files.
        let options = Options {
            cuda: Some("13.0".into()),
            ..Options::default()
        };
        assert_eq!(
            image_cuda(
                &options,
                Some(&root),
                &super::super::cudart::find(&root),
                &[]
            )
            .unwrap()
            .cuda,
            CudaVersion::parse("13.0").unwrap()
        );
    }

    #[test]
    fn a_version_file_linked_out_of_the_rootfs_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        fs::write(
            host.path().join("version.json"),
            r#"{"cuda": {"version": "12.6.3"}}"#,
        )
        .unwrap();
        fs::create_dir_all(dir.path().join("usr/local/cuda")).unwrap();
        std::os::unix::fs::symlink(
            host.path().join("version.json"),
            dir.path().join("usr/local/cuda/version.json"),
        )
        .unwrap();
        let root = Root::open(dir.path()).unwrap();
        assert!(version_json(&root).is_none());
    }

    #[test]
    fn takes_env_from_an_oci_config_or_docker_inspect() {
        let dir = tempfile::tempdir().unwrap();
        let oci = dir.path().join("oci.json");
        fs::write(&oci, r#"{"config": {"Env": ["CUDA_VERSION=12.6.3"]}}"#).unwrap();
        assert_eq!(image_env(&oci).unwrap(), ["CUDA_VERSION=12.6.3"]);
        let inspect = dir.path().join("inspect.json");
        fs::write(&inspect, r#"[{"Config": {"Env": ["A=1", "B=2"]}}]"#).unwrap();
        assert_eq!(image_env(&inspect).unwrap(), ["A=1", "B=2"]);
        fs::write(&inspect, r#"{"nothing": 1}"#).unwrap();
        assert!(image_env(&inspect).is_err());
    }
}
