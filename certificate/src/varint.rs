//! LEB128 varints: the numbers of a certificate's body ([`crate::format`]) and of the
//! engine's proof exports, written and read one way.

/// Appends `v` as a LEB128 varint (7 bits a byte, low bits first).
pub fn put(out: &mut Vec<u8>, mut v: u128) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Where and why reading stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    /// Offset of the byte or number that could not be read.
    pub at: usize,
    /// What is wrong there.
    pub what: String,
}

/// Reads bytes and varints from a buffer, front to back.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// The offset of the next byte.
    pub fn at(&self) -> usize {
        self.at
    }

    /// Bytes not read yet.
    pub fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// True when every byte was read.
    pub fn is_done(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// A refusal naming offset `at`.
    pub fn fail<T>(&self, at: usize, what: impl Into<String>) -> Result<T, ReadError> {
        Err(ReadError { at, what: what.into() })
    }

    /// The next byte.
    pub fn byte(&mut self) -> Result<u8, ReadError> {
        match self.bytes.get(self.at) {
            Some(&b) => {
                self.at += 1;
                Ok(b)
            }
            None => self.fail(self.at, "the data ends here"),
        }
    }

    /// The next varint, refused when longer than 128 bits or above `max`.
    pub fn varint(&mut self, max: u128) -> Result<u128, ReadError> {
        let start = self.at;
        let mut v = 0u128;
        for shift in (0..).step_by(7) {
            let b = self.byte()?;
            if shift >= 128 || (shift == 126 && b & 0x7f > 3) {
                return self.fail(start, "a number longer than 128 bits");
            }
            v |= ((b & 0x7f) as u128) << shift;
            if b & 0x80 == 0 {
                break;
            }
        }
        if v > max {
            return self.fail(start, format!("{v} is over {max}"));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_survive_and_bad_ones_are_refused() {
        let mut out = Vec::new();
        let values = [0u128, 1, 127, 128, 300, u64::MAX as u128, u128::MAX];
        for &v in &values {
            put(&mut out, v);
        }
        let mut r = Reader::new(&out);
        for &v in &values {
            assert_eq!(r.varint(u128::MAX), Ok(v));
        }
        assert!(r.is_done());
        assert_eq!(Reader::new(&[0x80]).varint(10).unwrap_err().what, "the data ends here");
        assert_eq!(Reader::new(&[0x0b]).varint(10).unwrap_err().at, 0);
        // 19 bytes of continuation: past 128 bits.
        assert!(Reader::new(&[0xff; 19]).varint(u128::MAX).is_err());
    }
}
