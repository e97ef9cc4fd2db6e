//! The D-Bus wire format, as far as telling systemd about a scope's devices
//! needs it: method calls marshalled little-endian (header, header fields,
//! body, each value at its natural alignment from the message's start) and
//! replies parsed just enough to match them to their call and to read an
//! error's name and message. Pure data in and out: the socket is `bus`'s.

use super::{Error, Result};

/// D-Bus message types.
pub(super) const METHOD_CALL: u8 = 1;
const METHOD_RETURN: u8 = 2;
const ERROR: u8 = 3;

/// Header field codes.
const PATH: u8 = 1;
const INTERFACE: u8 = 2;
const MEMBER: u8 = 3;
const ERROR_NAME: u8 = 4;
const REPLY_SERIAL: u8 = 5;
const DESTINATION: u8 = 6;
const SIGNATURE: u8 = 8;

/// The fixed part of every message header: endianness, type, flags,
/// version, body length, serial, header field array length.
pub(super) const FIXED_HEADER: usize = 16;

/// A value in a message body, as far as the calls here need them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value<'a> {
    /// `s`
    Str(&'a str),
    /// `b`
    Bool(bool),
    /// `a(sv)` with each variant `a(ss)`: systemd's property list where
    /// every property is a list of string pairs (`DeviceAllow`).
    PairLists(&'a [(&'a str, Vec<(String, String)>)]),
}

impl Value<'_> {
    /// The value's D-Bus signature.
    fn signature(&self) -> &'static str {
        match self {
            Value::Str(_) => "s",
            Value::Bool(_) => "b",
            Value::PairLists(_) => "a(sv)",
        }
    }
}

/// A method call, to be marshalled with [`Call::encode`].
#[derive(Debug, Clone)]
pub(super) struct Call<'a> {
    /// The bus name it goes to, when on a bus.
    pub destination: Option<&'a str>,
    /// The object.
    pub path: &'a str,
    /// The interface.
    pub interface: &'a str,
    /// The method.
    pub member: &'a str,
    /// Its arguments, in order.
    pub args: &'a [Value<'a>],
}

impl Call<'_> {
    /// The whole message with `serial`: header, fields, padding and body.
    pub fn encode(&self, serial: u32) -> Vec<u8> {
        let mut body = Writer::default();
        let mut signature = String::new();
        for arg in self.args {
            signature.push_str(arg.signature());
            body.value(arg);
        }
        let mut out = Writer::default();
        // No flags: a reply is wanted, and the hook never waits on a
        // person's interactive authorisation.
        out.buf.extend_from_slice(&[b'l', METHOD_CALL, 0, 1]);
        out.u32(u32::try_from(body.buf.len()).unwrap_or(u32::MAX));
        out.u32(serial);
        out.array(8, |w| {
            // sd-bus's order, so that a message compares with busctl's.
            w.field(PATH, "o", |w| w.string(self.path));
            w.field(MEMBER, "s", |w| w.string(self.member));
            w.field(INTERFACE, "s", |w| w.string(self.interface));
            if let Some(destination) = self.destination {
                w.field(DESTINATION, "s", |w| w.string(destination));
            }
            if !signature.is_empty() {
                w.field(SIGNATURE, "g", |w| w.signature(&signature));
            }
        });
        out.pad(8);
        out.buf.extend_from_slice(&body.buf);
        out.buf
    }
}

/// A message being marshalled; alignment counts from its first byte.
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn pad(&mut self, align: usize) {
        while !self.buf.len().is_multiple_of(align) {
            self.buf.push(0);
        }
    }

    fn u32(&mut self, value: u32) {
        self.pad(4);
        self.buf.extend_from_slice(&value.to_le_bytes());
    }

    /// `s` and `o`: length, bytes, NUL.
    fn string(&mut self, text: &str) {
        self.u32(u32::try_from(text.len()).unwrap_or(u32::MAX));
        self.buf.extend_from_slice(text.as_bytes());
        self.buf.push(0);
    }

    /// `g`: one-byte length, bytes, NUL (signatures here are short).
    fn signature(&mut self, text: &str) {
        self.buf.push(u8::try_from(text.len()).unwrap_or(u8::MAX));
        self.buf.extend_from_slice(text.as_bytes());
        self.buf.push(0);
    }

    /// An array whose elements align to `align`: its byte length (not
    /// counting the padding before the first element), then them.
    fn array(&mut self, align: usize, elements: impl FnOnce(&mut Writer)) {
        self.pad(4);
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        self.pad(align);
        let start = self.buf.len();
        elements(self);
        let len = u32::try_from(self.buf.len() - start).unwrap_or(u32::MAX);
        self.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// A header field: `(y v)`.
    fn field(&mut self, code: u8, signature: &str, value: impl FnOnce(&mut Writer)) {
        self.pad(8);
        self.buf.push(code);
        self.signature(signature);
        value(self);
    }

    fn value(&mut self, value: &Value<'_>) {
        match value {
            Value::Str(text) => self.string(text),
            Value::Bool(b) => self.u32(u32::from(*b)),
            Value::PairLists(properties) => self.array(8, |w| {
                for (name, pairs) in properties.iter() {
                    w.pad(8);
                    w.string(name);
                    w.signature("a(ss)");
                    w.array(8, |w| {
                        for (a, b) in pairs {
                            w.pad(8);
                            w.string(a);
                            w.string(b);
                        }
                    });
                }
            }),
        }
    }
}

/// What a received message says, as far as a caller waits for a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    /// The method returned.
    Return { serial: u32 },
    /// The method failed: its error name and message.
    Error {
        serial: u32,
        name: String,
        message: String,
    },
    /// Another message (a signal, the bus's `NameAcquired`): skipped.
    Other,
}

/// The whole length of a message whose first [`FIXED_HEADER`] bytes are
/// `fixed`; fails on a byte order or version we do not speak.
pub(super) fn message_len(fixed: &[u8; FIXED_HEADER]) -> Result<usize> {
    let big = match fixed[0] {
        b'l' => false,
        b'B' => true,
        other => return Err(Error::Malformed(format!("byte order {other:#04x}"))),
    };
    if fixed[3] != 1 {
        return Err(Error::Malformed(format!("protocol version {}", fixed[3])));
    }
    let word = |at: usize| {
        let bytes = [fixed[at], fixed[at + 1], fixed[at + 2], fixed[at + 3]];
        (if big {
            u32::from_be_bytes(bytes)
        } else {
            u32::from_le_bytes(bytes)
        }) as usize
    };
    let fields_end = (FIXED_HEADER + word(12)).next_multiple_of(8);
    Ok(fields_end.saturating_add(word(4)))
}

/// Parses a whole message (as long as [`message_len`] said).
pub(super) fn parse_reply(message: &[u8]) -> Result<Reply> {
    let fixed: &[u8; FIXED_HEADER] = message
        .get(..FIXED_HEADER)
        .and_then(|head| head.try_into().ok())
        .ok_or_else(|| Error::Malformed("a message shorter than its header".into()))?;
    if message_len(fixed)? != message.len() {
        return Err(Error::Malformed(
            "a message of another length than its header says".into(),
        ));
    }
    let mut r = Reader {
        buf: message,
        at: 0,
        big: message[0] == b'B',
    };
    r.at = 4;
    let body_len = r.u32()? as usize;
    let _serial = r.u32()?;
    let fields_len = r.u32()? as usize;
    let fields_end = FIXED_HEADER + fields_len;
    let (mut reply_serial, mut error_name, mut body_signature) = (None, None, String::new());
    while r.at < fields_end {
        r.pad(8)?;
        let code = r.byte()?;
        let signature = r.signature()?;
        match (code, signature.as_str()) {
            (REPLY_SERIAL, "u") => reply_serial = Some(r.u32()?),
            (ERROR_NAME, "s") => error_name = Some(r.string()?),
            (SIGNATURE, "g") => body_signature = r.signature()?,
            (_, "u") => {
                r.u32()?;
            }
            (_, "s" | "o") => {
                r.string()?;
            }
            (_, "g") => {
                r.signature()?;
            }
            (code, other) => {
                return Err(Error::Malformed(format!(
                    "header field {code} of type {other:?}"
                )))
            }
        }
    }
    r.at = fields_end.next_multiple_of(8);
    if r.at + body_len != message.len() {
        return Err(Error::Malformed(
            "a body of another length than the header says".into(),
        ));
    }
    Ok(match (message[1], reply_serial) {
        (METHOD_RETURN, Some(serial)) => Reply::Return { serial },
        (ERROR, Some(serial)) => Reply::Error {
            serial,
            name: error_name.unwrap_or_default(),
            message: if body_signature.starts_with('s') {
                r.string()?
            } else {
                String::new()
            },
        },
        _ => Reply::Other,
    })
}

/// Reads a received message, every read checked against its end.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
    big: bool,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.buf.len());
        let end = end.ok_or_else(|| Error::Malformed("a value past the message's end".into()))?;
        let bytes = &self.buf[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn pad(&mut self, align: usize) -> Result<()> {
        let to = self.at.next_multiple_of(align);
        self.take(to - self.at).map(|_| ())
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32> {
        self.pad(4)?;
        let big = self.big;
        let b = self.take(4)?;
        let bytes = [b[0], b[1], b[2], b[3]];
        Ok(if big {
            u32::from_be_bytes(bytes)
        } else {
            u32::from_le_bytes(bytes)
        })
    }

    fn text(&mut self, len: usize) -> Result<String> {
        let bytes = self.take(len + 1)?;
        if bytes[len] != 0 {
            return Err(Error::Malformed("a string without its NUL".into()));
        }
        Ok(String::from_utf8_lossy(&bytes[..len]).into_owned())
    }

    fn string(&mut self) -> Result<String> {
        let len = self.u32()? as usize;
        self.text(len)
    }

    fn signature(&mut self) -> Result<String> {
        let len = self.byte()? as usize;
        self.text(len)
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
