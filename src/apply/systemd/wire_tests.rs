use super::*;

/// What busctl 252 sent for
/// `busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1
/// org.freedesktop.systemd1.Manager SetUnitProperties 'sba(sv)'
/// docker-abc.scope true 1 DeviceAllow 'a(ss)' 2 /dev/char/195:0 rw
/// /dev/char/195:255 rw`, captured on a socket after its `Hello` (serial 2),
/// in hex.
const BUSCTL: [&str; 9] = [
    "6c0104017f00000002000000ad00000001016f00190000002f6f72672f667265",
    "656465736b746f702f73797374656d6431000000000000000301730011000000",
    "536574556e697450726f70657274696573000000000000000201730020000000",
    "6f72672e667265656465736b746f702e73797374656d64312e4d616e61676572",
    "000000000000000006017300180000006f72672e667265656465736b746f702e",
    "73797374656d6431000000000000000008016700077362612873762900000000",
    "10000000646f636b65722d6162632e73636f706500000000010000005f000000",
    "0b000000446576696365416c6c6f770005612873732900003f00000000000000",
    "0f0000002f6465762f636861722f3139353a3000020000007277000000000000",
];

/// The capture's last, shorter line.
const BUSCTL_TAIL: &str = "110000002f6465762f636861722f3139353a32353500000002000000727700";

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn set_device_allow<'a>(properties: &'a [(&'a str, Vec<(String, String)>)]) -> [Value<'a>; 3] {
    [
        Value::Str("docker-abc.scope"),
        Value::Bool(true),
        Value::PairLists(properties),
    ]
}

#[test]
fn set_unit_properties_is_what_busctl_sends() {
    let mut expected: Vec<u8> = BUSCTL.iter().flat_map(|line| hex(line)).collect();
    expected.extend(hex(BUSCTL_TAIL));
    // busctl allows interactive authorisation (flag 4); the hook never does.
    assert_eq!(expected[2], 4);
    expected[2] = 0;
    let pairs = vec![
        ("/dev/char/195:0".to_string(), "rw".to_string()),
        ("/dev/char/195:255".to_string(), "rw".to_string()),
    ];
    let properties = [("DeviceAllow", pairs)];
    let args = set_device_allow(&properties);
    let call = Call {
        destination: Some("org.freedesktop.systemd1"),
        path: "/org/freedesktop/systemd1",
        interface: "org.freedesktop.systemd1.Manager",
        member: "SetUnitProperties",
        args: &args,
    };
    assert_eq!(call.encode(2), expected);
}

#[test]
fn a_call_without_arguments_has_no_signature_field() {
    let message = Call {
        destination: None,
        path: "/",
        interface: "org.freedesktop.DBus.Peer",
        member: "Ping",
        args: &[],
    }
    .encode(7);
    let fixed: [u8; FIXED_HEADER] = message[..FIXED_HEADER].try_into().unwrap();
    assert_eq!(message_len(&fixed).unwrap(), message.len());
    assert_eq!(&message[..4], &[b'l', METHOD_CALL, 0, 1]);
    assert_eq!(&message[4..8], &0u32.to_le_bytes(), "no body");
    assert!(!message.windows(4).any(|w| w == [SIGNATURE, 1, b'g', 0]));
}

/// A reply as a peer sends it: type, reply serial, error name, body string.
fn reply(kind: u8, serial: u32, error: Option<&str>, text: Option<&str>) -> Vec<u8> {
    let mut body = Writer::default();
    if let Some(text) = text {
        body.string(text);
    }
    let mut out = Writer::default();
    out.buf.extend_from_slice(&[b'l', kind, 1, 1]);
    out.u32(body.buf.len() as u32);
    out.u32(99);
    out.array(8, |w| {
        w.field(REPLY_SERIAL, "u", |w| w.u32(serial));
        if let Some(name) = error {
            w.field(ERROR_NAME, "s", |w| w.string(name));
        }
        if text.is_some() {
            w.field(SIGNATURE, "g", |w| w.signature("s"));
        }
    });
    out.pad(8);
    out.buf.extend_from_slice(&body.buf);
    out.buf
}

#[test]
fn replies_are_matched_by_serial_and_errors_keep_their_message() {
    assert_eq!(
        parse_reply(&reply(METHOD_RETURN, 3, None, None)).unwrap(),
        Reply::Return { serial: 3 }
    );
    assert_eq!(
        parse_reply(&reply(
            ERROR,
            4,
            Some("org.freedesktop.systemd1.NoSuchUnit"),
            Some("Unit x.scope not loaded.")
        ))
        .unwrap(),
        Reply::Error {
            serial: 4,
            name: "org.freedesktop.systemd1.NoSuchUnit".into(),
            message: "Unit x.scope not loaded.".into(),
        }
    );
    // A signal (no reply serial) is another message.
    let mut signal = reply(METHOD_RETURN, 1, None, Some(":1.4"));
    signal[1] = 4;
    assert_eq!(parse_reply(&signal).unwrap(), Reply::Other);
}

#[test]
fn a_truncated_or_lying_message_is_malformed_not_a_panic() {
    let whole = reply(ERROR, 4, Some("e.E"), Some("text"));
    for cut in 0..whole.len() {
        assert!(parse_reply(&whole[..cut]).is_err(), "cut at {cut}");
    }
    let mut long = whole.clone();
    long[12] = 0xff; // a field array longer than the message
    assert!(parse_reply(&long).is_err());
    let mut odd = whole;
    odd[0] = b'x';
    assert!(matches!(parse_reply(&odd), Err(Error::Malformed(_))));
}
