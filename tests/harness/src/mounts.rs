//! Mount tables, read from `/proc/<pid>/mountinfo`: the host's (this test's
//! namespace), which must be the same before and after containers ran, and
//! a stand-in container's, where the hook's mounts live. Only reads.

/// The mount table of `pid` (`self` for this process) as
/// "mount-point fs-type source" lines, sorted. Mount points are as
/// mountinfo writes them: seen from that process's root, with spaces and
/// other odd bytes escaped (`\040`), so a line splits on ' ' safely.
pub fn mount_table(pid: &str) -> Vec<String> {
    let path = format!("/proc/{pid}/mountinfo");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let mut mounts: Vec<String> = text
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = *fields.get(4)?;
            let dash = fields.iter().position(|f| *f == "-")?;
            let fstype = fields.get(dash + 1)?;
            let source = fields.get(dash + 2)?;
            Some(format!("{point} {fstype} {source}"))
        })
        .collect();
    mounts.sort();
    mounts
}

/// The host's mount table: what must be the same before and after
/// containers ran.
pub fn host_mounts() -> Vec<String> {
    mount_table("self")
}

/// Panics, listing what appeared and what disappeared, unless the host's
/// mount table is `before` again; `context` says what ran in between.
pub fn assert_mounts_unchanged(before: &[String], context: &str) {
    let after = host_mounts();
    if after != before {
        let added: Vec<_> = after.iter().filter(|m| !before.contains(m)).collect();
        let removed: Vec<_> = before.iter().filter(|m| !after.contains(m)).collect();
        panic!("the host's mount table changed: added {added:#?}, removed {removed:#?}{context}");
    }
}
