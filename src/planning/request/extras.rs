//! The devices a GPU container may ask for beside its GPUs: IMEX channels
//! (`NVIDIA_IMEX_CHANNELS`, the device plugin's `…/imex/<n>` mounts,
//! NVIDIA's CLI `--imex-channel`) and the feature-gated devices
//! (`NVIDIA_GDS`, `NVIDIA_MOFED`, `NVIDIA_NVSWITCH`, `NVIDIA_GDRCOPY`),
//! read as NVIDIA's toolkit reads them (`internal/config/image/cuda_image.go`,
//! `internal/modifier/gated.go`).

use serde::Serialize;

use super::{check_len, env_var, Error, Result};

/// Highest IMEX channel number accepted: the driver has 2048 channels.
pub const MAX_IMEX_CHANNEL: u32 = 2047;

/// The IMEX channels a container asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImexChannels {
    /// None.
    #[default]
    None,
    /// Every channel the host has.
    All,
    /// These channels, sorted, each once.
    List(Vec<u32>),
}

impl ImexChannels {
    /// Parses a comma list of channel numbers, or `all`, as
    /// `NVIDIA_IMEX_CHANNELS` takes it: items trimmed, empty ones dropped;
    /// `none`, `void` or nothing asks for no channel. `what` names the
    /// source in an error.
    pub fn parse(what: &'static str, value: &str) -> Result<ImexChannels> {
        check_len(what, value)?;
        let items: Vec<&str> = value
            .split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .collect();
        if items.iter().any(|i| i.eq_ignore_ascii_case("all")) {
            return Ok(ImexChannels::All);
        }
        let mut channels = Vec::new();
        for item in items {
            if item == "none" || item == "void" {
                continue;
            }
            let channel = item
                .parse::<u32>()
                .ok()
                .filter(|c| *c <= MAX_IMEX_CHANNEL && item.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| Error::MalformedImexChannels {
                    what,
                    value: value.to_string(),
                    item: item.to_string(),
                })?;
            channels.push(channel);
        }
        channels.sort_unstable();
        channels.dedup();
        Ok(if channels.is_empty() {
            ImexChannels::None
        } else {
            ImexChannels::List(channels)
        })
    }

    /// The channels of the device plugin's volume mounts, each the name
    /// after `imex/` of a `/dev/null` mount below
    /// `/var/run/nvidia-container-devices`.
    pub fn from_mounts(names: &[String]) -> Result<ImexChannels> {
        ImexChannels::parse("IMEX channel mount", &names.join(","))
    }

    /// `NVIDIA_IMEX_CHANNELS` of a container's environment.
    pub fn from_env(env: &[String]) -> Result<ImexChannels> {
        match env_var(env, "NVIDIA_IMEX_CHANNELS") {
            Some(value) => ImexChannels::parse("NVIDIA_IMEX_CHANNELS", value),
            None => Ok(ImexChannels::None),
        }
    }

    /// Whether no channel is asked for.
    pub fn is_none(&self) -> bool {
        *self == ImexChannels::None
    }
}

/// The feature-gated devices a container enables, a set of the
/// [`crate::planning::device_class`] table's classes.
pub use crate::planning::device_class::Set as Gated;

/// The classes a container's environment enables, each by its variable
/// set to `enabled` (exactly, as NVIDIA compares it).
pub fn gated_from_env(env: &[String]) -> Gated {
    Gated::enabled_by(|name| env_var(env, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planning::device_class::Class;

    fn env(vars: &[&str]) -> Vec<String> {
        vars.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn imex_channel_lists_parse_to_sorted_unique_channels() {
        // cuda_image_test.go TestImexChannelsFromEnvVar: single, several, empty.
        let table: &[(&str, ImexChannels)] = &[
            ("", ImexChannels::None),
            (" , ", ImexChannels::None),
            ("none", ImexChannels::None),
            ("void", ImexChannels::None),
            ("0", ImexChannels::List(vec![0])),
            ("3,1", ImexChannels::List(vec![1, 3])),
            (" 1 , 1 ,2", ImexChannels::List(vec![1, 2])),
            ("2047", ImexChannels::List(vec![2047])),
            ("all", ImexChannels::All),
            ("ALL", ImexChannels::All),
            ("0,all", ImexChannels::All),
        ];
        for (value, want) in table {
            assert_eq!(
                ImexChannels::parse("NVIDIA_IMEX_CHANNELS", value).as_ref(),
                Ok(want),
                "{value:?}"
            );
        }
    }

    #[test]
    fn bad_imex_channels_are_refused_naming_the_item() {
        for bad in ["x", "-1", "+1", "2048", "0x1", "1.0", "../0"] {
            let err =
                ImexChannels::parse("NVIDIA_IMEX_CHANNELS", &format!("0,{bad}")).expect_err(bad);
            assert_eq!(
                err,
                Error::MalformedImexChannels {
                    what: "NVIDIA_IMEX_CHANNELS",
                    value: format!("0,{bad}"),
                    item: bad.to_string(),
                }
            );
            assert!(err.to_string().contains(bad), "{err}");
        }
    }

    #[test]
    fn imex_channels_come_from_the_variable_or_the_mount_names() {
        assert_eq!(
            ImexChannels::from_env(&env(&["NVIDIA_IMEX_CHANNELS=0,1"])),
            Ok(ImexChannels::List(vec![0, 1]))
        );
        assert_eq!(
            ImexChannels::from_env(&env(&["PATH=/bin"])),
            Ok(ImexChannels::None)
        );
        let names = vec!["2".to_string(), "0".to_string()];
        assert_eq!(
            ImexChannels::from_mounts(&names),
            Ok(ImexChannels::List(vec![0, 2]))
        );
    }

    #[test]
    fn gated_devices_need_exactly_enabled() {
        // gated.go compares Getenv(...) == "enabled".
        let all = env(&[
            "NVIDIA_GDS=enabled",
            "NVIDIA_MOFED=enabled",
            "NVIDIA_NVSWITCH=enabled",
            "NVIDIA_GDRCOPY=enabled",
        ]);
        let gated = gated_from_env(&all);
        for name in ["gds", "mofed", "nvswitch", "gdrcopy"] {
            let class = Class::named(name).unwrap();
            assert!(gated.contains(class), "{name}");
        }
        for value in ["true", "Enabled", "ENABLED", "1", "", " enabled"] {
            for class in Class::all() {
                let name = class.row().variable;
                let gated = gated_from_env(&env(&[&format!("{name}={value}")]));
                assert!(!gated.any(), "{name}={value:?}");
            }
        }
        let last_wins = gated_from_env(&env(&["NVIDIA_GDS=enabled", "NVIDIA_GDS=disabled"]));
        assert!(!last_wins.any());
    }
}
