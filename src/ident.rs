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

/// Where the dashes of a canonical UUID are.
const DASHES: [usize; 4] = [8, 13, 18, 23];

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 36 || DASHES.iter().any(|&i| b[i] != b'-') {
        return None;
    }
    let mut out = [0u8; 16];
    let mut digits = b.iter().enumerate().filter(|(i, _)| !DASHES.contains(i));
    for byte in &mut out {
        let (_, hi) = digits.next()?;
        let (_, lo) = digits.next()?;
        *byte = (hex(*hi)? << 4) | hex(*lo)?;
    }
    Some(out)
}

impl Ident {
    pub fn new(s: &str) -> Self {
        match parse_uuid(s) {
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
    fn an_ident_is_small() {
        assert!(std::mem::size_of::<Ident>() <= 24);
    }
}
