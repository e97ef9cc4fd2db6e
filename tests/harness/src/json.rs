//! Reading the JSON the binary under test prints (`list --json`,
//! `info --json`): a string at a JSON pointer, or a panic naming what is
//! missing.

use serde_json::Value;

/// `v`'s string at `pointer`.
pub fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {v}"))
}
