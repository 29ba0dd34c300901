//! Compact identifiers: pod UIDs and Kyuubi tags, which are UUIDs in practice.
//!
//! A tracked pod is held by its UID in several structures (records, timers, due list), so the
//! UID's size is paid many times over: [`Ident`] is 16 bytes. It keeps a canonical lower-case UUID
//! inline (its two 8-byte halves; the second half is never zero, and that niche tells the
//! variants apart), and any other string as shared text behind one thin pointer. The conversion is
//! exact both ways: an [`Ident`] displays as the very string it was made from (the UID
//! precondition of a DELETE sends it back).

use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

/// A UID or tag: inline when it is a canonical UUID (`8-4-4-4-12` lower-case hex digits) whose
/// last 8 bytes are not all zero, else shared text. Which one depends on the string alone, so
/// equal strings give equal idents.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ident {
    /// The UUID's 16 bytes as two big-endian halves (so idents order as the bytes do). The
    /// second half is non-zero: the compiler keeps the other variant's pointer beside it, in 16
    /// bytes in all.
    Uuid(u64, NonZeroU64),
    /// Any other string; a thin pointer (8 bytes), so that it fits beside the niche.
    Text(Arc<Box<str>>),
}

/// Where each byte's two hex digits start in a canonical UUID (the dashes are at 8, 13, 18, 23).
const DIGITS: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

/// Each byte's value as a lower-case hex digit, `0xff` for a byte that is not one.
static HEX: [u8; 256] = {
    let mut t = [0xff_u8; 256];
    let mut i = 0;
    while i < 16 {
        t[b"0123456789abcdef"[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// The 16 bytes of a canonical UUID (`8-4-4-4-12` lower-case hex digits), `None` for anything
/// else. On the JVM's hot path: one table lookup per digit, no branch per digit.
pub fn uuid_bytes(b: &[u8]) -> Option<[u8; 16]> {
    let b: &[u8; 36] = b.try_into().ok()?;
    if b[8] != b'-' || b[13] != b'-' || b[18] != b'-' || b[23] != b'-' {
        return None;
    }
    let mut out = [0u8; 16];
    // Any byte that is not a digit sets high bits here.
    let mut bad = 0u8;
    for (o, &at) in out.iter_mut().zip(&DIGITS) {
        let (hi, lo) = (HEX[usize::from(b[at])], HEX[usize::from(b[at + 1])]);
        bad |= hi | lo;
        *o = (hi << 4) | (lo & 0x0f);
    }
    (bad & 0xf0 == 0).then_some(out)
}

impl Ident {
    pub fn new(s: &str) -> Self {
        if let Some(u) = uuid_bytes(s.as_bytes()) {
            let v = u128::from_be_bytes(u);
            if let Some(lo) = NonZeroU64::new(v as u64) {
                return Ident::Uuid((v >> 64) as u64, lo);
            }
        }
        Ident::Text(Arc::new(Box::from(s)))
    }

    pub fn is_empty(&self) -> bool {
        matches!(self, Ident::Text(t) if t.is_empty())
    }
}

impl From<&str> for Ident {
    fn from(s: &str) -> Self {
        Ident::new(s)
    }
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ident::Text(t) => f.write_str(t),
            Ident::Uuid(hi, lo) => {
                let u = ((u128::from(*hi) << 64) | u128::from(lo.get())).to_be_bytes();
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut out = [0u8; 36];
                let mut at = 0;
                for (i, byte) in u.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        out[at] = b'-';
                        at += 1;
                    }
                    out[at] = HEX[usize::from(byte >> 4)];
                    out[at + 1] = HEX[usize::from(byte & 0xf)];
                    at += 2;
                }
                // Only ASCII digits, letters and dashes were written.
                f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
            }
        }
    }
}

impl fmt::Debug for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_string_comes_back_exactly() {
        let cases = [
            "0f8fad5b-d9cb-469f-a165-70867728950e",
            "00000000-0000-0000-0000-000000000000",
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
            // Canonical with the last 8 bytes all zero: kept as text (the niche), still exact.
            "0f8fad5b-d9cb-469f-0000-000000000000",
            "00000000-0000-0000-0000-000000000001",
            "00000000-0000-0000-0100-000000000000",
            "ffffffff-ffff-ffff-0000-000000000000",
            // Not canonical: kept as text, so they come back as they were.
            "0F8FAD5B-D9CB-469F-A165-70867728950E",
            "0f8fad5bd9cb469fa16570867728950e",
            "0f8fad5b-d9cb-469f-a165-70867728950",
            "0f8fad5b-d9cb-469f-a165-70867728950e0",
            "0f8fad5b_d9cb-469f-a165-70867728950e",
            "0f8fad5b-d9cb-469f-a165-70867728950g",
            "uid-1",
            "",
            "ünï-cøde",
        ];
        for s in cases {
            let id = Ident::new(s);
            assert_eq!(id.to_string(), s);
            assert_eq!(id, Ident::new(s));
            assert_eq!(id.is_empty(), s.is_empty());
        }
        let inline = |s: &str| matches!(Ident::new(s), Ident::Uuid(..));
        assert!(inline(cases[0]));
        assert!(inline(cases[2]));
        assert!(
            !inline(cases[1]),
            "the last 8 bytes all zero cannot be inlined"
        );
        assert!(!inline(cases[3]));
        assert!(inline(cases[4]));
        assert!(inline(cases[5]));
        assert!(!inline(cases[6]));
        assert!(!inline("0F8FAD5B-D9CB-469F-A165-70867728950E"));
        assert_ne!(
            Ident::new(cases[0]),
            Ident::new("0F8FAD5B-D9CB-469F-A165-70867728950E")
        );
        assert_ne!(Ident::new(cases[1]), Ident::new(cases[4]));
    }

    #[test]
    fn inline_uuids_order_as_their_strings() {
        let mut strings = [
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
            "0f8fad5b-d9cb-469f-a165-70867728950e",
            "00000000-0000-0000-0000-000000000001",
            "0f8fad5b-d9cb-469f-a165-70867728950f",
            "0f8fad5c-0000-0000-0000-000000000001",
            "10000000-0000-0000-0000-000000000001",
        ];
        let mut idents: Vec<Ident> = strings.iter().map(|s| Ident::new(s)).collect();
        strings.sort_unstable();
        idents.sort();
        let back: Vec<String> = idents.iter().map(Ident::to_string).collect();
        assert_eq!(back, strings);
    }

    #[test]
    fn clones_and_hashes_agree_with_equality() {
        use std::collections::HashSet;
        let strings = [
            "0f8fad5b-d9cb-469f-a165-70867728950e",
            "0f8fad5b-d9cb-469f-0000-000000000000",
            "uid-1",
            "",
        ];
        let set: HashSet<Ident> = strings.iter().map(|s| Ident::new(s)).collect();
        assert_eq!(set.len(), strings.len());
        for s in strings {
            let id = Ident::new(s);
            assert_eq!(id.clone(), id);
            assert!(set.contains(&Ident::new(s)), "{s}");
            assert_eq!(id.clone().to_string(), s);
        }
    }

    #[test]
    fn only_canonical_uuids_parse_whatever_byte_is_changed() {
        let good = *b"0f8fad5b-d9cb-469f-a165-70867728950e";
        let want = uuid_bytes(&good).expect("canonical");
        assert_eq!(want[0], 0x0f);
        assert_eq!(want[15], 0x0e);
        for at in 0..good.len() {
            for byte in 0..=255u8 {
                let mut b = good;
                b[at] = byte;
                let dash = matches!(at, 8 | 13 | 18 | 23);
                let ok = if dash {
                    byte == b'-'
                } else {
                    byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)
                };
                assert_eq!(uuid_bytes(&b).is_some(), ok, "byte {byte:#x} at {at}");
                if ok {
                    let text = std::str::from_utf8(&b).expect("ASCII");
                    assert_eq!(Ident::new(text).to_string(), text);
                }
            }
        }
    }

    #[test]
    fn an_ident_is_small() {
        // Two halves, the text's thin pointer beside the second half's niche.
        assert_eq!(std::mem::size_of::<Ident>(), 16);
    }
}
