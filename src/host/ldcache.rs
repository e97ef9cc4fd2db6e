//! Parses the dynamic loader's cache, `/etc/ld.so.cache`, in all three formats
//! that `ldconfig -c new|old|compat` writes.
//!
//! The parser works on bytes only: it never touches the filesystem, never
//! panics on hostile input, and reports every defect with the byte offset at
//! which it was found.

use std::cmp::Ordering;
use std::ops::Range;

use thiserror::Error;

/// Magic of the libc5-era format, `ldconfig -c old`.
const MAGIC_OLD: &[u8] = b"ld.so-1.7.0";
/// Magic and version of the glibc 2.x format, `ldconfig -c new`.
const MAGIC_NEW: &[u8] = b"glibc-ld.so.cache1.1";
/// `struct cache_file`: magic[11], padding, `u32 nlibs`.
const OLD_HEADER_LEN: usize = 16;
/// `struct file_entry`: `i32 flags; u32 key; u32 value`.
const OLD_ENTRY_LEN: usize = 12;
/// `struct cache_file_new`: magic and version, `nlibs`, `len_strings`, flags,
/// padding, `extension_offset`, three unused words.
const NEW_HEADER_LEN: usize = 48;
/// `struct file_entry_new`: `i32 flags; u32 key, value, osversion; u64 hwcap`.
const NEW_ENTRY_LEN: usize = 24;
/// The new block of a compat cache starts at this alignment after the old entries.
const NEW_ALIGN: usize = 8;
/// `cache_file_new_flags_endian_little`, what glibc writes on little-endian hosts.
const ENDIAN_LITTLE: u8 = 2;
/// Bits of an entry's flags that name the library type (`FLAG_ELF_LIBC6` etc.).
pub const FLAG_TYPE_MASK: i32 = 0x00ff;
/// Bits of an entry's flags that name the architecture.
pub const FLAG_ARCH_MASK: i32 = 0xff00;
/// `FLAG_ELF`: an ELF library that does not link libc (e.g. some i386 objects).
pub const FLAG_ELF: i32 = 0x0001;
/// `FLAG_ELF_LIBC6`: an ELF library linked against glibc.
pub const FLAG_ELF_LIBC6: i32 = 0x0003;
/// Architecture bits of an x86-64 library.
pub const FLAG_X8664_LIB64: i32 = 0x0300;
/// Architecture bits of an aarch64 library.
pub const FLAG_AARCH64_LIB64: i32 = 0x0a00;
/// Architecture bits of an i386 library: none.
pub const FLAG_I386: i32 = 0x0000;

/// What can be wrong with a cache file; each error carries the offending offset.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Error {
    #[error("not an ld.so.cache: unknown magic at offset 0")]
    UnknownMagic,
    #[error("truncated {what} at offset {offset}: need {need} bytes, file has {len}")]
    Truncated {
        what: &'static str,
        offset: usize,
        need: usize,
        len: usize,
    },
    #[error("entry {index} at offset {offset}: string offset {string} lies outside the file")]
    StringOutOfRange {
        index: usize,
        offset: usize,
        string: usize,
    },
    #[error("entry {index} at offset {offset}: string at {string} is not NUL-terminated")]
    UnterminatedString {
        index: usize,
        offset: usize,
        string: usize,
    },
    #[error("entry {index} at offset {offset}: string at {string} is not valid UTF-8")]
    NotUtf8 {
        index: usize,
        offset: usize,
        string: usize,
    },
    #[error("cache at offset {offset} is big-endian (flags {flags:#x}); only little-endian caches are supported")]
    BigEndian { offset: usize, flags: u8 },
    #[error("{count} entries: more than the {limit} read")]
    TooManyEntries { count: usize, limit: usize },
    #[error("entry {index} at offset {offset}: string at {string} is longer than {limit} bytes")]
    StringTooLong {
        index: usize,
        offset: usize,
        string: usize,
        limit: usize,
    },
    #[error(
        "entry {index} at offset {offset}: its strings bring the text read past {limit} bytes"
    )]
    TooMuchText {
        index: usize,
        offset: usize,
        limit: usize,
    },
}

/// The most entries read: real caches list a few thousand libraries.
pub const MAX_ENTRIES: usize = 1 << 16;

/// The longest string read: a path, `PATH_MAX`.
pub const MAX_STRING: usize = 4096;

/// The most string bytes read over all entries: entries may share their
/// strings, so a file far under its size cap could otherwise describe far
/// more text (to copy, or to scan) than it holds. Real caches have well
/// under 1 MiB.
pub const MAX_TEXT: usize = 4 * 1024 * 1024;

/// What the strings read so far cost, against [`MAX_TEXT`].
#[derive(Default)]
struct Text(usize);

impl Text {
    /// Counts `bytes`, read for entry `index` at `offset`.
    fn count(&mut self, bytes: &[u8], index: usize, offset: usize) -> Result<()> {
        self.0 = self.0.saturating_add(bytes.len() + 1);
        match self.0 > MAX_TEXT {
            true => Err(Error::TooMuchText {
                index,
                offset,
                limit: MAX_TEXT,
            }),
            false => Ok(()),
        }
    }
}

/// Refuses a table of `count` entries past [`MAX_ENTRIES`].
fn check_count(count: usize) -> Result<()> {
    match count > MAX_ENTRIES {
        true => Err(Error::TooManyEntries {
            count,
            limit: MAX_ENTRIES,
        }),
        false => Ok(()),
    }
}

/// Result of parsing a cache.
pub type Result<T> = std::result::Result<T, Error>;

/// Which on-disk format a cache was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `ld.so-1.7.0` only.
    Old,
    /// `glibc-ld.so.cache1.1` only.
    New,
    /// An old header whose string table hides a new-format block; glibc uses the new one.
    Compat,
}

/// One library the loader knows: its SONAME and the path it resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LdCacheEntry {
    /// Library type and architecture, `FLAG_*`.
    pub flags: i32,
    /// The name a program asks for, e.g. `libcuda.so.1`.
    pub soname: String,
    /// Absolute path of the file (often a symlink), e.g. `/usr/lib/x86_64-linux-gnu/libcuda.so.1`.
    pub path: String,
    /// Hardware capability bits of the new format; zero in the old one.
    pub hwcap: u64,
}

impl LdCacheEntry {
    /// Architecture bits of the entry, to compare with `FLAG_X8664_LIB64` and friends.
    pub fn arch(&self) -> i32 {
        self.flags & FLAG_ARCH_MASK
    }

    /// Whether the entry is an ELF library, the only kind we inject. glibc's
    /// loader accepts both `FLAG_ELF` and `FLAG_ELF_LIBC6` (`_dl_cache_check_flags`).
    pub fn is_elf(&self) -> bool {
        matches!(self.flags & FLAG_TYPE_MASK, FLAG_ELF | FLAG_ELF_LIBC6)
    }
}

/// A parsed cache: its format and its entries in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LdCache {
    /// The format found on disk.
    pub format: Format,
    /// Entries in the order the file lists them, which is the loader's order.
    pub entries: Vec<LdCacheEntry>,
}

impl LdCache {
    /// Parses a whole cache file. A compat file yields its new-format block,
    /// the same entries glibc's loader reads.
    pub fn parse(data: &[u8]) -> Result<Self> {
        Self::parse_where(data, |_| true)
    }

    /// Parses a cache file, keeping only the entries whose SONAME `keep`
    /// accepts. A host cache lists thousands of libraries and discovery wants
    /// a few dozen: the others are checked (in range, terminated) but never
    /// copied or decoded.
    pub fn parse_where(data: &[u8], keep: impl Fn(&[u8]) -> bool) -> Result<Self> {
        if data.starts_with(MAGIC_NEW) {
            let entries = parse_new(data, 0, &keep)?;
            return Ok(LdCache {
                format: Format::New,
                entries,
            });
        }
        if !data.starts_with(MAGIC_OLD) {
            return Err(Error::UnknownMagic);
        }
        let nlibs = read_u32(data, MAGIC_OLD.len() + 1, "old header")? as usize;
        let entries_end = nlibs
            .checked_mul(OLD_ENTRY_LEN)
            .and_then(|n| n.checked_add(OLD_HEADER_LEN))
            .ok_or(Error::Truncated {
                what: "old entry table",
                offset: OLD_HEADER_LEN,
                need: usize::MAX,
                len: data.len(),
            })?;
        let new_start = align_up(entries_end, NEW_ALIGN);
        if data.len() >= new_start && data[new_start..].starts_with(MAGIC_NEW) {
            let entries = parse_new(data, new_start, &keep)?;
            return Ok(LdCache {
                format: Format::Compat,
                entries,
            });
        }
        let entries = parse_old(data, nlibs, &keep)?;
        Ok(LdCache {
            format: Format::Old,
            entries,
        })
    }
}

impl LdCache {
    /// Sorts entries the way `ldconfig` does, which the loader's binary search
    /// relies on: by name descending in `_dl_cache_libcmp` order, then by
    /// flags and hwcap descending.
    pub fn sort_for_lookup(&mut self) {
        self.entries.sort_by(|a, b| {
            libcmp(&b.soname, &a.soname)
                .then(b.flags.cmp(&a.flags))
                .then(b.hwcap.cmp(&a.hwcap))
        });
    }

    /// Serialises the entries, in their current order, in the new format that
    /// every glibc 2.x loader reads. Call [`LdCache::sort_for_lookup`] first.
    pub fn to_bytes(&self) -> Vec<u8> {
        let table = NEW_HEADER_LEN + self.entries.len() * NEW_ENTRY_LEN;
        let mut strings: Vec<u8> = Vec::new();
        let mut offsets = Vec::with_capacity(self.entries.len());
        for entry in &self.entries {
            let key = table + strings.len();
            strings.extend_from_slice(entry.soname.as_bytes());
            strings.push(0);
            let value = table + strings.len();
            strings.extend_from_slice(entry.path.as_bytes());
            strings.push(0);
            offsets.push((key as u32, value as u32));
        }
        let mut out = Vec::with_capacity(table + strings.len());
        out.extend_from_slice(MAGIC_NEW);
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        out.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        out.extend_from_slice(&[ENDIAN_LITTLE, 0, 0, 0]);
        // No extension section, and three unused words.
        out.extend_from_slice(&[0u8; 16]);
        for (entry, (key, value)) in self.entries.iter().zip(offsets) {
            out.extend_from_slice(&entry.flags.to_le_bytes());
            out.extend_from_slice(&key.to_le_bytes());
            out.extend_from_slice(&value.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&entry.hwcap.to_le_bytes());
        }
        out.extend_from_slice(&strings);
        out
    }
}

/// glibc's `_dl_cache_libcmp`: byte order, except that runs of digits
/// compare as numbers, and a digit sorts after any other byte.
pub fn libcmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() {
        match (
            a[i].is_ascii_digit(),
            b.get(j).is_some_and(u8::is_ascii_digit),
        ) {
            (true, true) => {
                let (x, next_i) = number(a, i);
                let (y, next_j) = number(b, j);
                if x != y {
                    return x.cmp(&y);
                }
                (i, j) = (next_i, next_j);
            }
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            (false, false) => {
                let y = b.get(j).copied().unwrap_or(0);
                if a[i] != y {
                    return a[i].cmp(&y);
                }
                i += 1;
                j += 1;
            }
        }
    }
    0u8.cmp(&b.get(j).copied().unwrap_or(0))
}

/// The decimal number starting at `at`, wrapping like glibc's `int`, and where it ends.
fn number(s: &[u8], mut at: usize) -> (i32, usize) {
    let mut value: i32 = 0;
    while let Some(d) = s.get(at).filter(|d| d.is_ascii_digit()) {
        value = value.wrapping_mul(10).wrapping_add(i32::from(d - b'0'));
        at += 1;
    }
    (value, at)
}

fn align_up(n: usize, align: usize) -> usize {
    n.div_ceil(align) * align
}

fn slice<'a>(data: &'a [u8], range: Range<usize>, what: &'static str) -> Result<&'a [u8]> {
    data.get(range.clone()).ok_or(Error::Truncated {
        what,
        offset: range.start,
        need: range.end.saturating_sub(range.start),
        len: data.len(),
    })
}

fn read_u32(data: &[u8], offset: usize, what: &'static str) -> Result<u32> {
    let bytes = slice(data, offset..offset.saturating_add(4), what)?;
    Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

fn read_u64(data: &[u8], offset: usize, what: &'static str) -> Result<u64> {
    let bytes = slice(data, offset..offset.saturating_add(8), what)?;
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    Ok(u64::from_le_bytes(word))
}

/// The NUL-terminated bytes at `base + rel`, for entry `index` at `offset`.
fn read_bytes(data: &[u8], base: usize, rel: u32, index: usize, offset: usize) -> Result<&[u8]> {
    let string = base.saturating_add(rel as usize);
    let tail = data
        .get(string..)
        .filter(|t| !t.is_empty())
        .ok_or(Error::StringOutOfRange {
            index,
            offset,
            string,
        })?;
    let scanned = &tail[..tail.len().min(MAX_STRING + 1)];
    let end = match scanned.iter().position(|&b| b == 0) {
        Some(end) => end,
        None if tail.len() > MAX_STRING => {
            return Err(Error::StringTooLong {
                index,
                offset,
                string,
                limit: MAX_STRING,
            })
        }
        None => {
            return Err(Error::UnterminatedString {
                index,
                offset,
                string,
            })
        }
    };
    Ok(&tail[..end])
}

/// `bytes`, read at `base + rel` for entry `index` at `offset`, as a String.
fn to_string(bytes: &[u8], base: usize, rel: u32, index: usize, offset: usize) -> Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::NotUtf8 {
        index,
        offset,
        string: base.saturating_add(rel as usize),
    })
}

/// Checks that `count` entries of `len` bytes fit after `start`, before
/// allocating for them, so that a lying count cannot exhaust memory.
fn check_table(
    data: &[u8],
    start: usize,
    count: usize,
    len: usize,
    what: &'static str,
) -> Result<()> {
    let need = count.saturating_mul(len);
    if data.len().saturating_sub(start) < need {
        return Err(Error::Truncated {
            what,
            offset: start,
            need,
            len: data.len(),
        });
    }
    Ok(())
}

fn parse_old(
    data: &[u8],
    nlibs: usize,
    keep: &impl Fn(&[u8]) -> bool,
) -> Result<Vec<LdCacheEntry>> {
    check_table(
        data,
        OLD_HEADER_LEN,
        nlibs,
        OLD_ENTRY_LEN,
        "old entry table",
    )?;
    check_count(nlibs)?;
    let strings = OLD_HEADER_LEN + nlibs * OLD_ENTRY_LEN;
    let mut entries = Vec::new();
    let mut text = Text::default();
    for index in 0..nlibs {
        let offset = OLD_HEADER_LEN + index * OLD_ENTRY_LEN;
        let flags = read_u32(data, offset, "old entry")? as i32;
        let key = read_u32(data, offset + 4, "old entry")?;
        let value = read_u32(data, offset + 8, "old entry")?;
        let soname = read_bytes(data, strings, key, index, offset)?;
        text.count(soname, index, offset)?;
        if !keep(soname) {
            continue;
        }
        let path = read_bytes(data, strings, value, index, offset)?;
        text.count(path, index, offset)?;
        entries.push(LdCacheEntry {
            flags,
            soname: to_string(soname, strings, key, index, offset)?,
            path: to_string(path, strings, value, index, offset)?,
            hwcap: 0,
        });
    }
    Ok(entries)
}

fn parse_new(
    data: &[u8],
    header: usize,
    keep: &impl Fn(&[u8]) -> bool,
) -> Result<Vec<LdCacheEntry>> {
    slice(data, header..header + NEW_HEADER_LEN, "new header")?;
    let nlibs = read_u32(data, header + 20, "new header")? as usize;
    let endian = data[header + 28];
    if endian != 0 && endian != ENDIAN_LITTLE {
        return Err(Error::BigEndian {
            offset: header + 28,
            flags: endian,
        });
    }
    let first = header + NEW_HEADER_LEN;
    check_table(data, first, nlibs, NEW_ENTRY_LEN, "new entry table")?;
    check_count(nlibs)?;
    let mut entries = Vec::new();
    let mut text = Text::default();
    for index in 0..nlibs {
        let offset = first + index * NEW_ENTRY_LEN;
        let flags = read_u32(data, offset, "new entry")? as i32;
        let key = read_u32(data, offset + 4, "new entry")?;
        let value = read_u32(data, offset + 8, "new entry")?;
        let hwcap = read_u64(data, offset + 16, "new entry")?;
        let soname = read_bytes(data, header, key, index, offset)?;
        text.count(soname, index, offset)?;
        if !keep(soname) {
            continue;
        }
        let path = read_bytes(data, header, value, index, offset)?;
        text.count(path, index, offset)?;
        entries.push(LdCacheEntry {
            flags,
            soname: to_string(soname, header, key, index, offset)?,
            path: to_string(path, header, value, index, offset)?,
            hwcap,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new-format cache of `count` entries whose SONAME and path are all
    /// the one string `shared` (entries may share strings).
    fn shared_strings(count: usize, shared: &[u8]) -> Vec<u8> {
        let mut data = Vec::new();
        data.extend_from_slice(MAGIC_NEW);
        data.resize(NEW_HEADER_LEN, 0);
        data[20..24].copy_from_slice(&(count as u32).to_le_bytes());
        data[28] = ENDIAN_LITTLE;
        let strings = NEW_HEADER_LEN + count * NEW_ENTRY_LEN;
        for _ in 0..count {
            let mut entry = [0u8; NEW_ENTRY_LEN];
            entry[..4].copy_from_slice(&FLAG_ELF_LIBC6.to_le_bytes());
            entry[4..8].copy_from_slice(&(strings as u32).to_le_bytes());
            entry[8..12].copy_from_slice(&(strings as u32).to_le_bytes());
            data.extend_from_slice(&entry);
        }
        data.extend_from_slice(shared);
        data.push(0);
        data
    }

    /// A cache far under any size cap whose entries share one long string
    /// describes far more text than it holds: refused once the text read
    /// passes the bound, never copied whole (issue 40).
    #[test]
    fn shared_strings_cannot_amplify_what_is_read() {
        let long = vec![b'a'; MAX_STRING];
        let count = MAX_TEXT / MAX_STRING + 2;
        let data = shared_strings(count, &long);
        assert!(data.len() < 1024 * 1024, "{} bytes", data.len());
        let err = LdCache::parse(&data).unwrap_err();
        assert!(
            matches!(
                err,
                Error::TooMuchText {
                    limit: MAX_TEXT,
                    ..
                }
            ),
            "{err}"
        );
        // The same file whose entries the caller skips scans only SONAMEs:
        // still bounded.
        assert!(LdCache::parse_where(&data, |_| false).is_err());
        // A few entries sharing a string are fine, as ldconfig writes them.
        let few = LdCache::parse(&shared_strings(3, b"libx.so.1")).unwrap();
        assert_eq!(few.entries.len(), 3);
    }

    #[test]
    fn strings_and_entry_counts_are_bounded() {
        let err = LdCache::parse(&shared_strings(1, &vec![b'a'; MAX_STRING + 1])).unwrap_err();
        assert!(
            matches!(
                err,
                Error::StringTooLong {
                    limit: MAX_STRING,
                    ..
                }
            ),
            "{err}"
        );
        assert!(LdCache::parse(&shared_strings(1, &vec![b'a'; MAX_STRING])).is_ok());
        let err = LdCache::parse(&shared_strings(MAX_ENTRIES + 1, b"l")).unwrap_err();
        assert!(matches!(err, Error::TooManyEntries { .. }), "{err}");
        assert!(!err.to_string().contains('\n'));
    }

    /// Builds caches byte by byte, the way `ldconfig` lays them out, so tests
    /// need no binary fixtures.
    struct Builder {
        entries: Vec<(i32, &'static str, &'static str)>,
    }

    impl Builder {
        fn new(entries: &[(i32, &'static str, &'static str)]) -> Self {
            Builder {
                entries: entries.to_vec(),
            }
        }

        /// Strings for entries, with offsets relative to the string table start.
        fn strings(&self, base: usize) -> (Vec<u8>, Vec<(u32, u32)>) {
            let mut table = Vec::new();
            let mut offsets = Vec::new();
            for (_, key, value) in &self.entries {
                let v = base + table.len();
                table.extend_from_slice(value.as_bytes());
                table.push(0);
                let k = base + table.len();
                table.extend_from_slice(key.as_bytes());
                table.push(0);
                offsets.push((k as u32, v as u32));
            }
            (table, offsets)
        }

        fn new_block(&self) -> Vec<u8> {
            let table_start = NEW_HEADER_LEN + self.entries.len() * NEW_ENTRY_LEN;
            let (strings, offsets) = self.strings(table_start);
            let mut out = Vec::new();
            out.extend_from_slice(MAGIC_NEW);
            out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
            out.extend_from_slice(&(strings.len() as u32).to_le_bytes());
            out.extend_from_slice(&[ENDIAN_LITTLE, 0, 0, 0]);
            out.extend_from_slice(&[0u8; 16]);
            for ((flags, _, _), (k, v)) in self.entries.iter().zip(&offsets) {
                out.extend_from_slice(&flags.to_le_bytes());
                out.extend_from_slice(&k.to_le_bytes());
                out.extend_from_slice(&v.to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
            }
            out.extend_from_slice(&strings);
            out
        }

        fn old(&self) -> Vec<u8> {
            let (strings, offsets) = self.strings(0);
            let mut out = self.old_header_and_entries(&offsets);
            out.extend_from_slice(&strings);
            out
        }

        fn old_header_and_entries(&self, offsets: &[(u32, u32)]) -> Vec<u8> {
            let mut out = Vec::new();
            out.extend_from_slice(MAGIC_OLD);
            out.push(0);
            out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
            for ((flags, _, _), (k, v)) in self.entries.iter().zip(offsets) {
                out.extend_from_slice(&flags.to_le_bytes());
                out.extend_from_slice(&k.to_le_bytes());
                out.extend_from_slice(&v.to_le_bytes());
            }
            out
        }

        /// Old entries whose strings live past the hidden new block, as glibc writes.
        fn compat(&self) -> Vec<u8> {
            let new = self.new_block();
            let old_len = OLD_HEADER_LEN + self.entries.len() * OLD_ENTRY_LEN;
            let pad = align_up(old_len, NEW_ALIGN) - old_len;
            // Old offsets count from the end of the old entries, into the new block's strings.
            let new_strings = NEW_HEADER_LEN + self.entries.len() * NEW_ENTRY_LEN;
            let (_, offsets) = self.strings(pad + new_strings);
            let mut out = self.old_header_and_entries(&offsets);
            out.resize(out.len() + pad, 0);
            out.extend_from_slice(&new);
            out
        }
    }

    const X86: i32 = FLAG_ELF_LIBC6 | FLAG_X8664_LIB64;
    const ENTRIES: &[(i32, &str, &str)] = &[
        (
            X86,
            "libcuda.so.1",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        ),
        (
            FLAG_ELF_LIBC6,
            "libcuda.so.1",
            "/usr/lib/i386-linux-gnu/libcuda.so.1",
        ),
        (
            X86,
            "libnvidia-ml.so.1",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        ),
    ];

    fn expected() -> Vec<LdCacheEntry> {
        ENTRIES
            .iter()
            .map(|(flags, key, value)| LdCacheEntry {
                flags: *flags,
                soname: key.to_string(),
                path: value.to_string(),
                hwcap: 0,
            })
            .collect()
    }

    #[test]
    fn parses_new_format() {
        let cache = LdCache::parse(&Builder::new(ENTRIES).new_block()).unwrap();
        assert_eq!(cache.format, Format::New);
        assert_eq!(cache.entries, expected());
    }

    #[test]
    fn parses_old_format() {
        let cache = LdCache::parse(&Builder::new(ENTRIES).old()).unwrap();
        assert_eq!(cache.format, Format::Old);
        assert_eq!(cache.entries, expected());
    }

    #[test]
    fn parses_compat_format_from_its_new_block() {
        let cache = LdCache::parse(&Builder::new(ENTRIES).compat()).unwrap();
        assert_eq!(cache.format, Format::Compat);
        assert_eq!(cache.entries, expected());
    }

    #[test]
    fn parse_where_keeps_only_accepted_entries_in_every_format() {
        let builder = Builder::new(ENTRIES);
        for data in [builder.new_block(), builder.old(), builder.compat()] {
            let cache =
                LdCache::parse_where(&data, |soname| soname.starts_with(b"libnvidia")).unwrap();
            let want: Vec<_> = expected()
                .into_iter()
                .filter(|e| e.soname.starts_with("libnvidia"))
                .collect();
            assert_eq!(cache.entries, want);
        }
    }

    #[test]
    fn parse_where_still_refuses_a_broken_skipped_entry() {
        let mut data = Builder::new(ENTRIES).new_block();
        // Entry 0's key points past the end: skipped or not, it is an error.
        let offset = NEW_HEADER_LEN;
        data[offset + 4..offset + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            LdCache::parse_where(&data, |_| false),
            Err(Error::StringOutOfRange { index: 0, .. })
        ));
    }

    #[test]
    fn reports_architecture_bits() {
        let cache = LdCache::parse(&Builder::new(ENTRIES).new_block()).unwrap();
        assert_eq!(cache.entries[0].arch(), FLAG_X8664_LIB64);
        assert_eq!(cache.entries[1].arch(), FLAG_I386);
        assert!(cache.entries.iter().all(LdCacheEntry::is_elf));
    }

    #[test]
    fn parses_empty_caches() {
        for data in [
            Builder::new(&[]).new_block(),
            Builder::new(&[]).old(),
            Builder::new(&[]).compat(),
        ] {
            assert!(LdCache::parse(&data).unwrap().entries.is_empty());
        }
    }

    #[test]
    fn rejects_unknown_magic() {
        assert_eq!(LdCache::parse(b"").unwrap_err(), Error::UnknownMagic);
        assert_eq!(
            LdCache::parse(b"\x7fELF....").unwrap_err(),
            Error::UnknownMagic
        );
    }

    #[test]
    fn every_truncation_is_an_error_never_a_panic() {
        let builder = Builder::new(ENTRIES);
        for full in [builder.new_block(), builder.old(), builder.compat()] {
            // The last string is the last entry's key, so any cut loses a referenced byte.
            for len in 0..full.len() {
                assert!(
                    LdCache::parse(&full[..len]).is_err(),
                    "length {len} of {}",
                    full.len()
                );
            }
        }
    }

    #[test]
    fn truncated_entry_table_names_its_offset() {
        let full = Builder::new(ENTRIES).new_block();
        let err = LdCache::parse(&full[..NEW_HEADER_LEN + 30]).unwrap_err();
        assert_eq!(
            err,
            Error::Truncated {
                what: "new entry table",
                offset: NEW_HEADER_LEN,
                need: 3 * NEW_ENTRY_LEN,
                len: NEW_HEADER_LEN + 30,
            }
        );
        assert!(err.to_string().contains("offset 48"), "{err}");
    }

    #[test]
    fn huge_entry_count_is_refused_without_allocating() {
        let mut data = Builder::new(ENTRIES).new_block();
        data[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            LdCache::parse(&data),
            Err(Error::Truncated { .. })
        ));
        let mut data = Builder::new(ENTRIES).old();
        data[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            LdCache::parse(&data),
            Err(Error::Truncated { .. })
        ));
    }

    #[test]
    fn string_offset_past_the_end_names_entry_and_offset() {
        let mut data = Builder::new(ENTRIES).new_block();
        let key = NEW_HEADER_LEN + NEW_ENTRY_LEN + 4;
        data[key..key + 4].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
        assert_eq!(
            LdCache::parse(&data).unwrap_err(),
            Error::StringOutOfRange {
                index: 1,
                offset: NEW_HEADER_LEN + NEW_ENTRY_LEN,
                string: 0x7fff_0000,
            }
        );
    }

    #[test]
    fn unterminated_string_is_an_error() {
        let mut data = Builder::new(&[(X86, "libx.so.1", "/x")]).new_block();
        data.pop();
        assert!(matches!(
            LdCache::parse(&data),
            Err(Error::UnterminatedString { index: 0, .. })
        ));
    }

    #[test]
    fn corrupt_bytes_never_panic() {
        let builder = Builder::new(ENTRIES);
        for full in [builder.new_block(), builder.old(), builder.compat()] {
            for i in 0..full.len() {
                for byte in [0x00, 0x7f, 0xff] {
                    let mut data = full.clone();
                    data[i] = byte;
                    let _ = LdCache::parse(&data);
                }
            }
        }
    }

    #[test]
    fn refuses_big_endian_cache() {
        let mut data = Builder::new(ENTRIES).new_block();
        data[28] = 3;
        assert_eq!(
            LdCache::parse(&data).unwrap_err(),
            Error::BigEndian {
                offset: 28,
                flags: 3
            }
        );
    }

    #[test]
    fn writer_output_parses_back() {
        let mut cache = LdCache::parse(&Builder::new(ENTRIES).old()).unwrap();
        cache.sort_for_lookup();
        let again = LdCache::parse(&cache.to_bytes()).unwrap();
        assert_eq!(again.format, Format::New);
        assert_eq!(again.entries, cache.entries);
    }

    #[test]
    fn sorts_like_ldconfig() {
        let entry = |soname: &str, flags| LdCacheEntry {
            flags,
            soname: soname.into(),
            path: format!("/lib/{soname}"),
            hwcap: 0,
        };
        let mut cache = LdCache {
            format: Format::New,
            entries: vec![
                entry("libcuda.so.1", FLAG_ELF_LIBC6),
                entry("libc.so.6", X86),
                entry("libcuda.so.1", X86),
                entry("libz.so.1", X86),
                entry("libcuda.so", X86),
                entry("libnvidia-ml.so.10", X86),
                entry("libnvidia-ml.so.9", X86),
            ],
        };
        cache.sort_for_lookup();
        let order: Vec<(&str, i32)> = cache
            .entries
            .iter()
            .map(|e| (e.soname.as_str(), e.flags))
            .collect();
        assert_eq!(
            order,
            [
                ("libz.so.1", X86),
                ("libnvidia-ml.so.10", X86),
                ("libnvidia-ml.so.9", X86),
                ("libcuda.so.1", X86),
                ("libcuda.so.1", FLAG_ELF_LIBC6),
                ("libcuda.so", X86),
                ("libc.so.6", X86),
            ]
        );
    }

    #[test]
    fn libcmp_compares_digit_runs_as_numbers() {
        assert_eq!(libcmp("libx.so.10", "libx.so.9"), Ordering::Greater);
        assert_eq!(libcmp("libx.so.1", "libx.so.1"), Ordering::Equal);
        assert_eq!(libcmp("libx.so", "libx.so.1"), Ordering::Less);
        assert_eq!(libcmp("lib1", "liba"), Ordering::Greater);
        assert_eq!(libcmp("libx.so.01", "libx.so.1"), Ordering::Equal);
    }
}
