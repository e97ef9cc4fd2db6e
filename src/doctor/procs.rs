//! The host's processes, as far as doctor asks about them: which run
//! (dockerd, nvidia-persistenced, pid 1's name), a process's environment
//! (dockerd's `PATH`) and when it started. Read from the host root's procfs
//! once per run: one `comm` file per process, nothing else until asked.
//!
//! It only reads, and never signals or otherwise touches a process.

use std::path::PathBuf;

use super::HostRoot;
use crate::util::bounded_read;

/// One process: its pid and the kernel's short name for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// Its pid in the host's pid namespace.
    pub pid: u32,
    /// `/proc/<pid>/comm`: the executable's name, cut at 15 bytes.
    pub comm: String,
}

/// The processes of the host root's procfs.
#[derive(Debug, Clone)]
pub struct Table {
    proc_dir: PathBuf,
    processes: Vec<Process>,
}

impl Table {
    /// Lists the processes of `<host root>/proc`; an unreadable procfs gives
    /// an empty table (no process is then found running).
    pub fn scan(host: &HostRoot) -> Table {
        let proc_dir = host.path("/proc");
        let mut processes = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&proc_dir) {
            for entry in entries.flatten() {
                let Some(pid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<u32>().ok())
                else {
                    continue;
                };
                // A process that exits meanwhile is simply not listed.
                if let Ok(text) = bounded_read::read_text(&entry.path().join("comm")) {
                    processes.push(Process {
                        pid,
                        comm: text.trim_end_matches('\n').to_string(),
                    });
                }
            }
        }
        processes.sort_by_key(|p| p.pid);
        Table {
            proc_dir,
            processes,
        }
    }

    /// Processes whose name is `comm` (give at most 15 bytes, as the kernel keeps).
    pub fn named<'a>(&'a self, comm: &'a str) -> impl Iterator<Item = &'a Process> + 'a {
        self.processes.iter().filter(move |p| p.comm == comm)
    }

    /// Pid 1's name (`systemd`, `init`, a container's entry point).
    pub fn init(&self) -> Option<&str> {
        self.processes
            .iter()
            .find(|p| p.pid == 1)
            .map(|p| p.comm.as_str())
    }

    /// The procfs directory of `pid`.
    pub fn dir(&self, pid: u32) -> PathBuf {
        self.proc_dir.join(pid.to_string())
    }

    /// The value of `name` in the environment `pid` started with.
    pub fn env_var(&self, pid: u32, name: &str) -> Option<String> {
        let data = std::fs::read(self.dir(pid).join("environ")).ok()?;
        data.split(|b| *b == 0).find_map(|entry| {
            let text = std::str::from_utf8(entry).ok()?;
            let (key, value) = text.split_once('=')?;
            (key == name).then(|| value.to_string())
        })
    }

    /// When `pid` started, in seconds since the epoch: its `stat` start time
    /// (clock ticks since boot) after the boot time in `/proc/stat`.
    pub fn started_at(&self, pid: u32) -> Option<u64> {
        let stat = bounded_read::read_text(&self.dir(pid).join("stat")).ok()?;
        // The name in parentheses may hold spaces and parentheses: fields
        // are counted after the last `)`. Field 22 is the 20th after it.
        let after = &stat[stat.rfind(')')? + 1..];
        let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
        let system = bounded_read::read_text(&self.proc_dir.join("stat")).ok()?;
        let boot: u64 = system
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        Some(boot + ticks / clock_ticks())
    }
}

/// `sysconf(_SC_CLK_TCK)`, the unit of procfs start times: 100 on every
/// Linux architecture's ABI.
fn clock_ticks() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| *v > 0)
        .unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn fake_proc() -> (tempfile::TempDir, HostRoot) {
        let dir = tempfile::tempdir().unwrap();
        let proc_dir = dir.path().join("proc");
        for (pid, comm) in [(1, "systemd"), (812, "dockerd"), (77, "nvidia-persiste")] {
            fs::create_dir_all(proc_dir.join(pid.to_string())).unwrap();
            fs::write(proc_dir.join(format!("{pid}/comm")), format!("{comm}\n")).unwrap();
        }
        fs::create_dir_all(proc_dir.join("self")).unwrap();
        fs::write(
            proc_dir.join("812/environ"),
            b"HOME=/root\0PATH=/usr/local/bin:/usr/bin\0LANG=C\0",
        )
        .unwrap();
        fs::write(
            proc_dir.join("812/stat"),
            "812 (dockerd) S 1 812 812 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 9 0 123400 0 0",
        )
        .unwrap();
        fs::write(proc_dir.join("stat"), "cpu 1 2 3\nbtime 1700000000\n").unwrap();
        let host = HostRoot::new(dir.path());
        (dir, host)
    }

    #[test]
    fn lists_processes_by_name_and_reads_their_environment_and_start() {
        let (_dir, host) = fake_proc();
        let table = Table::scan(&host);
        assert_eq!(table.init(), Some("systemd"));
        let docker: Vec<u32> = table.named("dockerd").map(|p| p.pid).collect();
        assert_eq!(docker, [812]);
        assert_eq!(
            table.env_var(812, "PATH").as_deref(),
            Some("/usr/local/bin:/usr/bin")
        );
        assert_eq!(table.env_var(812, "NOPE"), None);
        assert_eq!(table.started_at(812), Some(1_700_000_000 + 123_400 / 100));
        assert_eq!(table.named("nvidia-persiste").count(), 1);
    }

    #[test]
    fn an_absent_procfs_lists_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let table = Table::scan(&HostRoot::new(dir.path()));
        assert_eq!(table.init(), None);
        assert_eq!(table.named("dockerd").count(), 0);
    }
}
