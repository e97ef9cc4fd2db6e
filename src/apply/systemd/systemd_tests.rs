use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::thread::JoinHandle;

use super::wire::{message_len, FIXED_HEADER};
use super::*;

/// A fake systemd on `<run>/<socket>`: it takes one connection, checks the
/// handshake, answers `Hello` on the system bus, and answers the next call
/// as `answer` says (`None`: never); what it received comes back.
fn peer(
    run: &Path,
    endpoint: Endpoint,
    answer: Option<fn(u32) -> Vec<u8>>,
) -> JoinHandle<Vec<Vec<u8>>> {
    let socket = endpoint.socket(run);
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let listener = UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let uid = nix::unistd::geteuid().as_raw().to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        let auth = format!("\0AUTH EXTERNAL {hex}\r\n");
        let mut got = vec![0u8; auth.len()];
        conn.read_exact(&mut got).unwrap();
        assert_eq!(got, auth.as_bytes());
        conn.write_all(b"OK 0123456789abcdef0123456789abcdef\r\n")
            .unwrap();
        let mut begin = [0u8; 7];
        conn.read_exact(&mut begin).unwrap();
        assert_eq!(&begin, b"BEGIN\r\n");
        let mut received = Vec::new();
        if endpoint == Endpoint::SystemBus {
            let hello = read_message(&mut conn);
            assert!(contains(&hello, b"Hello"));
            conn.write_all(&signal()).unwrap();
            conn.write_all(&method_return(serial_of(&hello))).unwrap();
        }
        let call = read_message(&mut conn);
        received.push(call.clone());
        match answer {
            Some(answer) => {
                // A signal first: the caller skips it.
                conn.write_all(&signal()).unwrap();
                conn.write_all(&answer(serial_of(&call))).unwrap();
            }
            None => std::thread::sleep(std::time::Duration::from_millis(400)),
        }
        received
    })
}

fn read_message(conn: &mut UnixStream) -> Vec<u8> {
    let mut fixed = [0u8; FIXED_HEADER];
    conn.read_exact(&mut fixed).unwrap();
    let mut message = fixed.to_vec();
    message.resize(message_len(&fixed).unwrap(), 0);
    conn.read_exact(&mut message[FIXED_HEADER..]).unwrap();
    message
}

fn serial_of(message: &[u8]) -> u32 {
    u32::from_le_bytes(message[8..12].try_into().unwrap())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A message with only a reply serial (`kind` 2 or 3) and maybe an error.
fn answer_message(kind: u8, serial: u32, error: Option<(&str, &str)>) -> Vec<u8> {
    let mut fields = vec![5u8, 1, b'u', 0];
    fields.extend(serial.to_le_bytes());
    let mut body = Vec::new();
    if let Some((name, text)) = error {
        fields.extend([4u8, 1, b's', 0]);
        fields.extend((name.len() as u32).to_le_bytes());
        fields.extend(name.as_bytes());
        fields.push(0);
        while !fields.len().is_multiple_of(8) {
            fields.push(0);
        }
        fields.extend([8u8, 1, b'g', 0, 1, b's', 0]);
        body.extend((text.len() as u32).to_le_bytes());
        body.extend(text.as_bytes());
        body.push(0);
    }
    let mut out = vec![b'l', kind, 1, 1];
    out.extend((body.len() as u32).to_le_bytes());
    out.extend(1000u32.to_le_bytes());
    out.extend((fields.len() as u32).to_le_bytes());
    out.extend(&fields);
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
    out.extend(body);
    out
}

fn method_return(serial: u32) -> Vec<u8> {
    answer_message(2, serial, None)
}

fn no_such_unit(serial: u32) -> Vec<u8> {
    answer_message(
        3,
        serial,
        Some((
            "org.freedesktop.systemd1.NoSuchUnit",
            "Unit docker-abc.scope not loaded.",
        )),
    )
}

/// A signal: no reply serial.
fn signal() -> Vec<u8> {
    let mut message = answer_message(2, 0, None);
    message[1] = 4;
    message[16] = 9; // SENDER, not REPLY_SERIAL
    message
}

/// A fake proc where process 7 is in `cgroup` (v2) and a v1 hierarchy.
fn proc_in(cgroup: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("7")).unwrap();
    std::fs::write(
        dir.path().join("7/cgroup"),
        format!("12:devices:/other\n0::{cgroup}\n"),
    )
    .unwrap();
    dir
}

fn gpu_rules() -> Vec<CgroupRule> {
    [(195, 255), (195, 1), (195, 1), (508, 0)]
        .into_iter()
        .map(|(major, minor)| CgroupRule {
            kind: 'c',
            major,
            minor,
            access: "rw",
        })
        .collect()
}

const UNIT: &str = "docker-abc.scope";

#[test]
fn the_scope_gets_each_node_once_on_the_private_socket() {
    let run = tempfile::tempdir().unwrap();
    let proc = proc_in("/system.slice/docker-abc.scope");
    let fake = peer(run.path(), Endpoint::Private, Some(method_return));
    let told = allow(proc.path(), run.path(), 7, UNIT, &gpu_rules()).unwrap();
    assert_eq!(told.endpoint, Endpoint::Private);
    let entries: Vec<String> = told
        .entries
        .iter()
        .map(|(p, a)| format!("{p} {a}"))
        .collect();
    assert_eq!(
        entries,
        [
            "/dev/char/195:255 rw",
            "/dev/char/195:1 rw",
            "/dev/char/508:0 rw"
        ]
    );
    let received = fake.join().unwrap();
    let call = &received[0];
    for part in [
        &b"SetUnitProperties"[..],
        b"docker-abc.scope",
        b"DeviceAllow",
        b"/dev/char/508:0",
    ] {
        assert!(contains(call, part), "{}", String::from_utf8_lossy(part));
    }
}

#[test]
fn without_the_private_socket_the_system_bus_is_used_after_hello() {
    let run = tempfile::tempdir().unwrap();
    let proc = proc_in("/kubepods.slice/cri-containerd-abc.scope");
    let fake = peer(run.path(), Endpoint::SystemBus, Some(method_return));
    let unit = "cri-containerd-abc.scope";
    let told = allow(proc.path(), run.path(), 7, unit, &gpu_rules()).unwrap();
    assert_eq!(told.endpoint, Endpoint::SystemBus);
    let received = fake.join().unwrap();
    assert!(contains(&received[0], b"org.freedesktop.systemd1"));
}

#[test]
fn systemds_refusal_is_one_line_naming_it() {
    let run = tempfile::tempdir().unwrap();
    let proc = proc_in("/system.slice/docker-abc.scope");
    let fake = peer(run.path(), Endpoint::Private, Some(no_such_unit));
    let err = allow(proc.path(), run.path(), 7, UNIT, &gpu_rules()).unwrap_err();
    fake.join().unwrap();
    let text = err.to_string();
    assert!(matches!(err, Error::Failed { .. }), "{text}");
    assert!(
        text.contains("SetUnitProperties")
            && text.contains("NoSuchUnit")
            && text.contains("not loaded")
            && !text.contains('\n'),
        "{text}"
    );
}

#[test]
fn a_process_outside_the_unit_is_never_told_about() {
    let run = tempfile::tempdir().unwrap();
    // Nothing listens: reaching systemd would fail differently.
    for cgroup in [
        "/system.slice/docker-abcd.scope",
        "/docker-abc.scope/sub",
        "/",
    ] {
        let proc = proc_in(cgroup);
        let err = allow(proc.path(), run.path(), 7, UNIT, &gpu_rules()).unwrap_err();
        assert!(
            matches!(err, Error::NotInUnit { pid: 7, .. }),
            "{cgroup}: {err}"
        );
    }
}

#[test]
fn no_systemd_names_both_sockets_and_a_silent_one_times_out() {
    let run = tempfile::tempdir().unwrap();
    let err = call_within(run.path(), &PING, Duration::from_millis(200)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("systemd/private") && text.contains("dbus/system_bus_socket"),
        "{text}"
    );
    let fake = peer(run.path(), Endpoint::Private, None);
    let started = std::time::Instant::now();
    let err = call_within(run.path(), &PING, Duration::from_millis(200)).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "bounded");
    assert!(err.to_string().contains("in time"), "{err}");
    fake.join().unwrap();
}

#[test]
fn a_peer_whose_backlog_is_full_is_given_up_on_in_time() {
    use rustix::net::{self as net, AddressFamily, SocketAddrUnix, SocketType};
    let run = tempfile::tempdir().unwrap();
    let socket = Endpoint::Private.socket(run.path());
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let listener = net::socket(AddressFamily::UNIX, SocketType::STREAM, None).unwrap();
    net::bind(&listener, &SocketAddrUnix::new(&socket).unwrap()).unwrap();
    net::listen(&listener, 0).unwrap();
    // One connection nobody accepts fills a backlog of 0.
    let _queued = UnixStream::connect(&socket).unwrap();
    let started = std::time::Instant::now();
    let err = call_within(run.path(), &PING, Duration::from_millis(200)).unwrap_err();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(2),
        "{took:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("no answer on") && text.contains("systemd/private in time"),
        "{text}"
    );
}
