//! One D-Bus connection to systemd's manager, used for one call: a unix
//! socket with read and write timeouts, the SASL `EXTERNAL` handshake with
//! this process's uid, `Hello` where the socket is the system bus (systemd's
//! private socket is peer-to-peer and has none), then the call and the
//! wait for its reply, every read bounded in size.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::wire::{self, Call, Reply, FIXED_HEADER};
use super::{Error, Result};

/// The largest message read: systemd's replies here are a few hundred bytes.
const MAX_MESSAGE: usize = 64 * 1024;
/// The longest line of the SASL handshake read.
const MAX_AUTH_LINE: usize = 512;
/// How many other messages (signals) are skipped while waiting for a reply.
const MAX_SKIPPED: usize = 32;

/// Where systemd's manager is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// systemd's own socket (`/run/systemd/private`): root only, no bus daemon.
    Private,
    /// The system bus (`/run/dbus/system_bus_socket`), through dbus-daemon or dbus-broker.
    SystemBus,
}

impl Endpoint {
    /// Where its socket is below `run` (the host's `/run`).
    pub fn socket(self, run: &Path) -> PathBuf {
        match self {
            Endpoint::Private => run.join("systemd/private"),
            Endpoint::SystemBus => run.join("dbus/system_bus_socket"),
        }
    }
}

/// An authenticated connection.
pub(super) struct Bus {
    stream: UnixStream,
    socket: PathBuf,
    serial: u32,
    until: Instant,
}

impl Bus {
    /// Connects to `endpoint` below `run` and authenticates within `bound`;
    /// on the system bus, says `Hello` too.
    pub fn connect(endpoint: Endpoint, run: &Path, bound: Duration) -> Result<Bus> {
        let socket = endpoint.socket(run);
        let until = Instant::now() + bound;
        let stream = connect_until(&socket, until)?;
        let mut bus = Bus {
            stream,
            socket,
            serial: 0,
            until,
        };
        bus.authenticate()?;
        if endpoint == Endpoint::SystemBus {
            bus.call(&Call {
                destination: Some("org.freedesktop.DBus"),
                path: "/org/freedesktop/DBus",
                interface: "org.freedesktop.DBus",
                member: "Hello",
                args: &[],
            })?;
        }
        Ok(bus)
    }

    /// The socket, for messages.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// SASL: `AUTH EXTERNAL` with this process's effective uid (which the
    /// peer checks against the socket's credentials) and `BEGIN` in one
    /// write, then `OK`, as sd-bus's own clients pipeline them. Sent after
    /// the `OK` instead, `BEGIN` tends to arrive with the first message in
    /// one read, and systemd 262's private socket then leaves that message
    /// unread until more bytes come (seen here: no answer in 5 s).
    fn authenticate(&mut self) -> Result<()> {
        let uid = nix::unistd::geteuid().as_raw().to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        self.send(format!("\0AUTH EXTERNAL {hex}\r\nBEGIN\r\n").as_bytes())?;
        let line = self.auth_line()?;
        if !line.starts_with("OK ") {
            return Err(Error::Refused {
                socket: self.socket.clone(),
                answer: line,
            });
        }
        Ok(())
    }

    /// One line of the handshake, without its `\r\n`.
    fn auth_line(&mut self) -> Result<String> {
        let mut line = Vec::new();
        while !line.ends_with(b"\r\n") {
            if line.len() >= MAX_AUTH_LINE {
                return Err(Error::Malformed(format!(
                    "an authentication line longer than {MAX_AUTH_LINE} bytes"
                )));
            }
            let mut byte = [0u8; 1];
            self.read_exact(&mut byte)?;
            line.push(byte[0]);
        }
        line.truncate(line.len() - 2);
        Ok(String::from_utf8_lossy(&line).into_owned())
    }

    /// Sends `call` and waits for its reply; an error reply is [`Error::Failed`].
    pub fn call(&mut self, call: &Call<'_>) -> Result<()> {
        self.serial += 1;
        let serial = self.serial;
        self.send(&call.encode(serial))?;
        for _ in 0..MAX_SKIPPED {
            match wire::parse_reply(&self.message()?)? {
                Reply::Return { serial: s } if s == serial => return Ok(()),
                Reply::Error {
                    serial: s,
                    name,
                    message,
                } if s == serial => {
                    return Err(Error::Failed {
                        method: call.member.to_string(),
                        name,
                        message,
                    })
                }
                _ => {}
            }
        }
        Err(Error::Malformed(format!(
            "no reply to {} among {MAX_SKIPPED} messages",
            call.member
        )))
    }

    /// The next whole message, bounded by [`MAX_MESSAGE`].
    fn message(&mut self) -> Result<Vec<u8>> {
        let mut fixed = [0u8; FIXED_HEADER];
        self.read_exact(&mut fixed)?;
        let len = wire::message_len(&fixed)?;
        if !(FIXED_HEADER..=MAX_MESSAGE).contains(&len) {
            return Err(Error::Malformed(format!(
                "a message of {len} bytes (at most {MAX_MESSAGE} are read)"
            )));
        }
        let mut message = vec![0u8; len];
        message[..FIXED_HEADER].copy_from_slice(&fixed);
        self.read_exact(&mut message[FIXED_HEADER..])?;
        Ok(message)
    }

    /// What is left of the bound, at least 1 ms (a zero timeout means none).
    fn left(&self) -> Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout {
                socket: self.socket.clone(),
            });
        }
        Ok(left.max(Duration::from_millis(1)))
    }

    fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let left = self.left()?;
        self.stream
            .set_write_timeout(Some(left))
            .map_err(|source| self.io_error(source))?;
        self.stream
            .write_all(bytes)
            .map_err(|source| self.io_error(source))
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        let mut at = 0;
        while at < buf.len() {
            let left = self.left()?;
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|source| self.io_error(source))?;
            match self.stream.read(&mut buf[at..]) {
                Ok(0) => {
                    return Err(Error::Closed {
                        socket: self.socket.clone(),
                    })
                }
                Ok(n) => at += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => return Err(self.io_error(source)),
            }
        }
        Ok(())
    }

    /// A socket error; a timed-out read or write is [`Error::Timeout`].
    fn io_error(&self, source: std::io::Error) -> Error {
        match source.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Timeout {
                socket: self.socket.clone(),
            },
            _ => Error::Io {
                socket: self.socket.clone(),
                source,
            },
        }
    }
}

/// Connects to the unix socket `socket` without blocking past `until`: a
/// stuck peer whose backlog is full answers a blocking `connect` never.
fn connect_until(socket: &Path, until: Instant) -> Result<UnixStream> {
    use rustix::io::Errno;
    use rustix::net::{self as net, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

    let failed = |errno: Errno| Error::Connect {
        socket: socket.to_path_buf(),
        source: errno.into(),
    };
    let addr = SocketAddrUnix::new(socket).map_err(failed)?;
    let fd = net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(failed)?;
    loop {
        match net::connect(&fd, &addr) {
            Ok(()) => break,
            // The peer's backlog is full (or a signal came): again, within the bound.
            Err(Errno::AGAIN | Errno::INTR) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(Errno::AGAIN | Errno::INTR) => {
                return Err(Error::Timeout {
                    socket: socket.to_path_buf(),
                })
            }
            Err(errno) => return Err(failed(errno)),
        }
    }
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false).map_err(|source| Error::Io {
        socket: socket.to_path_buf(),
        source,
    })?;
    Ok(stream)
}
