//! Units: pages inside `ra` and the cache, bytes in the public API.
//!
//! Every conversion between the two lives here, so that a page size other
//! than 4 KiB changes one place. Sizes typed by people (`64k`, `1MiB`,
//! `2G`) are parsed here too; `k`, `m`, `g`, `t` are binary multiples
//! (KiB, MiB, ...), as in dd, fio and the kernel's sysfs knobs.

use std::fmt;

/// The default page size: 4 KiB, the x86-64 and arm64 base page.
pub const DEFAULT_PAGE_SIZE: u64 = 4096;

/// Bytes in one KiB.
pub const KIB: u64 = 1024;
/// Bytes in one MiB.
pub const MIB: u64 = 1024 * KIB;
/// Bytes in one GiB.
pub const GIB: u64 = 1024 * MIB;

/// Multiplicative hashing for page indexes: they are already well spread
/// integers, and SipHash would be most of the cost of a cache hit.
#[derive(Default)]
pub(crate) struct IndexHasher(u64);

impl std::hash::Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (i ^ self.0)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
}

/// Converts between byte offsets and page indexes for one page size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageSize(u64);

impl PageSize {
    /// A page size; it must be a power of two of at least 512 bytes.
    pub fn new(bytes: u64) -> Option<PageSize> {
        (bytes >= 512 && bytes.is_power_of_two()).then_some(PageSize(bytes))
    }

    /// The page size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }

    /// The page holding byte `offset`.
    pub fn index_of(self, offset: u64) -> u64 {
        offset / self.0
    }

    /// The pages touched by `len` bytes at `offset`: (first index, count).
    /// A zero-length range touches no page.
    pub fn span(self, offset: u64, len: u64) -> (u64, u64) {
        if len == 0 {
            return (self.index_of(offset), 0);
        }
        let first = offset / self.0;
        let last = offset.saturating_add(len - 1) / self.0;
        (first, last - first + 1)
    }

    /// Number of pages needed to hold `bytes` (rounded up).
    pub fn pages_for(self, bytes: u64) -> u64 {
        bytes.div_ceil(self.0)
    }

    /// Byte offset of page `index`.
    pub fn offset_of(self, index: u64) -> u64 {
        index * self.0
    }
}

impl Default for PageSize {
    fn default() -> Self {
        PageSize(DEFAULT_PAGE_SIZE)
    }
}

/// Why a size did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseSizeError {
    input: String,
}

impl fmt::Display for ParseSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid size '{}': expected a number with an optional unit (b, k, m, g, t; KiB, MiB, ...)",
            self.input
        )
    }
}

impl std::error::Error for ParseSizeError {}

/// Parses a size such as `4096`, `64k`, `64KiB`, `1.5M`, `2g` into bytes.
///
/// Units are binary (`k` = 1024). A fractional number is allowed with a
/// unit and is rounded down to whole bytes.
pub fn parse_size(input: &str) -> Result<u64, ParseSizeError> {
    let err = || ParseSizeError {
        input: input.to_string(),
    };
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(err());
    }
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => MIB,
        "g" | "gb" | "gib" => GIB,
        "t" | "tb" | "tib" => 1024 * GIB,
        _ => return Err(err()),
    };
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(err);
    }
    let f: f64 = num.parse().map_err(|_| err())?;
    let bytes = f * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(err());
    }
    Ok(bytes as u64)
}

/// Formats a byte count for people: `512 B`, `64 KiB`, `1.5 MiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() == 0.0 {
        format!("{} {}", value as u64, UNITS[unit])
    } else {
        format!("{:.1} {}", value, UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64k").unwrap(), 64 * KIB);
        assert_eq!(parse_size("64KiB").unwrap(), 64 * KIB);
        assert_eq!(parse_size("1M").unwrap(), MIB);
        assert_eq!(parse_size("2g").unwrap(), 2 * GIB);
        assert_eq!(parse_size("1.5m").unwrap(), 3 * MIB / 2);
        assert_eq!(parse_size(" 8 mib ").unwrap(), 8 * MIB);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "k", "12q", "1..2m", "-1", "99999999999999999999t"] {
            assert!(parse_size(bad).is_err(), "{bad} should not parse");
        }
        let msg = parse_size("12q").unwrap_err().to_string();
        assert!(msg.contains("'12q'"), "{msg}");
    }

    #[test]
    fn spans_pages() {
        let p = PageSize::default();
        assert_eq!(p.span(0, 4096), (0, 1));
        assert_eq!(p.span(4095, 2), (0, 2));
        assert_eq!(p.span(8192, 0), (2, 0));
        assert_eq!(p.pages_for(4097), 2);
        assert!(PageSize::new(3000).is_none());
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(64 * KIB), "64 KiB");
        assert_eq!(format_size(3 * MIB / 2), "1.5 MiB");
    }
}
