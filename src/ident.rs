//! Compact identifiers: pod UIDs and Kyuubi tags, which are UUIDs in practice.
//!
//! A tracked pod is held by its UID in several structures (records, timers, due list), so the
//! UID's size is paid many times over: [`Ident`] keeps a canonical lower-case UUID in 16 bytes
//! inline, and any other string as shared text. The conversion is exact both ways: an [`Ident`]
//! displays as the very string it was made from (the UID precondition of a DELETE sends it back).

use std::fmt;
use std::sync::Arc;

/// A UID or tag: inline when it is a canonical UUID (`8-4-4-4-12` lower-case hex digits), else
/// shared text. Equal strings give equal idents.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ident {
    Uuid([u8; 16]),
    Text(Arc<str>),
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
        match uuid_bytes(s.as_bytes()) {
            Some(u) => Ident::Uuid(u),
            None => Ident::Text(Arc::from(s)),
        }
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
            Ident::Uuid(u) => {
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
        assert!(matches!(Ident::new(cases[0]), Ident::Uuid(_)));
        assert!(matches!(Ident::new(cases[3]), Ident::Text(_)));
        assert_ne!(Ident::new(cases[0]), Ident::new(cases[3]));
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
        assert!(std::mem::size_of::<Ident>() <= 24);
    }
}
