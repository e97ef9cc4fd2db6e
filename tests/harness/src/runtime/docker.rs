//! What the Docker suites ask of a running dockerd beyond one container
//! run ([`Daemons::checker_run`]): which Docker it is and whether CDI is
//! on, and a container kept running so that its `config.json` (what
//! dockerd and the runtime made of the request) can be read.

use super::daemons::Daemons;

impl Daemons {
    /// The server's version starts with `version` (`"28."`), and its CDI
    /// spec directories are listed exactly when `cdi` (`features.cdi`).
    pub fn assert_server(&self, version: &str, cdi: bool) {
        let server = self.docker(&["version", "--format", "{{.Server.Version}}"]);
        assert!(
            server.stdout.starts_with(version),
            "not Docker {version}: {}{}",
            server.stdout,
            server.stderr
        );
        let dirs = self.docker(&["info", "--format", "{{json .CDISpecDirs}}"]);
        assert_eq!(
            dirs.stdout.contains("/etc/cdi"),
            cdi,
            "Docker's CDI spec directories with features.cdi {cdi}: {}{}",
            dirs.stdout,
            dirs.stderr
        );
    }

    /// `docker run -d --network none ARGS IMAGE sleep 60`, which must
    /// start; the container's id ([`Daemons::task_config`] has its spec;
    /// `docker rm -f` it when done).
    pub fn run_detached(&self, args: &[&str], image: &str) -> String {
        let mut argv = vec!["run", "-d", "--network", "none"];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&[image, "sleep", "60"]);
        let started = self.docker(&argv);
        assert!(
            started.status.is_some_and(|s| s.success()),
            "docker run -d {args:?}: {}\n{}",
            started.stderr,
            self.logs()
        );
        started.stdout.trim().to_string()
    }
}
