//! A small JSON scanner: walks the members of an object and skips values without building
//! anything.
//!
//! The members of the objects it walks are checked strictly (keys, separators, escapes in keys
//! and strings). A skipped array or object is only checked structurally: strings must end and
//! brackets must balance, but `[}` or `[1 2]` inside it pass. That is what lets the decoder read
//! a 5 KB Pod's metadata without paying to validate its spec and status (they reach plugins as
//! the server sent them); every value the machinery itself reads is parsed strictly by
//! serde_json. The input is a `&str`, so it is valid UTF-8.
//!
//! [`path`] evaluates field paths (`spec.containers[*].image`) with these scanners: the path
//! language of `path` indexes and projections.

use std::borrow::Cow;
use std::ops::Range;

use wide::u8x16;

pub mod path;
pub mod unique;

/// What was wrong with the bytes, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} at byte {at}")]
pub struct ScanError {
    /// Byte offset of the problem.
    pub at: usize,
    /// What the scanner expected or found.
    pub what: &'static str,
}

/// Iterates over the members of one JSON object.
///
/// Use [`next_member`](Self::next_member) to get each key with its raw value, or
/// [`next_key`](Self::next_key) followed by either [`skip_value`](Self::skip_value) or
/// [`enter_object`](Self::enter_object) to walk into a nested object without scanning it twice.
pub struct ObjectScanner<'a> {
    text: &'a str,
    /// Cursor: a byte offset into `text`.
    pos: usize,
    /// Where this object's opening brace is.
    start: usize,
    first: bool,
    done: bool,
    /// A nested scanner stops at its closing brace; a top-level one also checks that nothing
    /// but white space follows.
    nested: bool,
}

/// One member as [`ObjectScanner::next_member`] returns it: the unescaped key and the byte
/// range of the raw value in the scanned text.
pub type Member<'a> = (Cow<'a, str>, Range<usize>);

impl<'a> ObjectScanner<'a> {
    /// Starts scanning `text`, which must hold one JSON object (surrounding white space allowed).
    pub fn new(text: &'a str) -> Result<Self, ScanError> {
        Self::at(text, 0, false)
    }

    fn at(text: &'a str, pos: usize, nested: bool) -> Result<Self, ScanError> {
        let mut scanner = Self {
            text,
            pos,
            start: pos,
            first: true,
            done: false,
            nested,
        };
        scanner.skip_ws();
        scanner.start = scanner.pos;
        scanner.expect(b'{', "expected '{'")?;
        Ok(scanner)
    }

    /// The next member's key, leaving the cursor on its value; `None` after the last member.
    pub fn next_key(&mut self) -> Result<Option<Cow<'a, str>>, ScanError> {
        if self.done {
            return Ok(None);
        }
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.done = true;
            self.skip_ws();
            if !self.nested && self.pos != self.text.len() {
                return Err(self.error("trailing bytes after the object"));
            }
            return Ok(None);
        }
        if !self.first {
            self.expect(b',', "expected ',' or '}'")?;
            self.skip_ws();
        }
        self.first = false;
        let key = self.read_key()?;
        self.skip_ws();
        self.expect(b':', "expected ':'")?;
        self.skip_ws();
        Ok(Some(key))
    }

    /// The next member with the range of its raw value.
    pub fn next_member(&mut self) -> Result<Option<Member<'a>>, ScanError> {
        let Some(key) = self.next_key()? else {
            return Ok(None);
        };
        let value = self.skip_value()?;
        Ok(Some((key, value)))
    }

    /// A cursor on the value at `pos` of `text`, to move past it (skipping or entering it)
    /// as if a nested object's member were under it.
    pub(crate) fn cursor_at(text: &'a str, pos: usize) -> Self {
        Self {
            text,
            pos,
            start: pos,
            first: false,
            done: false,
            nested: true,
        }
    }

    /// Moves past the rest of the object, its closing brace included, checking only its
    /// structure (as [`skip_value`](Self::skip_value) does): for a walk that found what it
    /// came for. Call it between members (after a value, or before the first key).
    pub fn skip_rest(&mut self) -> Result<(), ScanError> {
        if self.done {
            return Ok(());
        }
        self.pos = skip_to_close(self.bytes(), self.pos, 1).map_err(|what| self.error(what))?;
        self.done = true;
        self.skip_ws();
        if !self.nested && self.pos != self.text.len() {
            return Err(self.error("trailing bytes after the object"));
        }
        Ok(())
    }

    /// The cursor: the byte offset of the value after [`next_key`](Self::next_key).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// A scanner over the object value under the cursor; hand it back with
    /// [`leave_object`](Self::leave_object) once it returned its last member.
    pub fn enter_object(&mut self) -> Result<ObjectScanner<'a>, ScanError> {
        Self::at(self.text, self.pos, true)
    }

    /// Moves past a nested object that `child` walked to its end; returns the object's range.
    pub fn leave_object(&mut self, child: ObjectScanner<'a>) -> Range<usize> {
        debug_assert!(child.done, "leave_object before the nested object ended");
        self.leave(&child, b'}')
    }

    /// A scanner over the array value under the cursor; hand it back with
    /// [`leave_array`](Self::leave_array) once it returned its last element.
    pub fn enter_array(&mut self) -> Result<ArrayScanner<'a>, ScanError> {
        ArrayScanner::at(self.text, self.pos, true)
    }

    /// Moves past a nested array that `child` walked to its end; returns the array's range.
    pub fn leave_array(&mut self, child: ArrayScanner<'a>) -> Range<usize> {
        debug_assert!(
            child.inner.done,
            "leave_array before the nested array ended"
        );
        self.leave(&child.inner, b']')
    }

    /// Moves the cursor to where the finished nested `child` stopped; returns the range from
    /// its opening bracket to its closing one, `close`.
    fn leave(&mut self, child: &ObjectScanner<'a>, close: u8) -> Range<usize> {
        self.pos = child.pos;
        let mut end = child.pos;
        while self.text.as_bytes()[end - 1] != close {
            end -= 1;
        }
        child.start..end
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.pos).copied()
    }

    fn error(&self, what: &'static str) -> ScanError {
        ScanError { at: self.pos, what }
    }

    fn expect(&mut self, byte: u8, what: &'static str) -> Result<(), ScanError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(what))
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.pos += 1;
        }
    }

    fn read_key(&mut self) -> Result<Cow<'a, str>, ScanError> {
        if self.peek() != Some(b'"') {
            return Err(self.error("expected a string key"));
        }
        let start = self.pos;
        let escaped = self.skip_string()?;
        let raw = &self.text[start..self.pos];
        if escaped {
            serde_json::from_str::<String>(raw)
                .map(Cow::Owned)
                .map_err(|_| ScanError {
                    at: start,
                    what: "malformed escape in key",
                })
        } else {
            Ok(Cow::Borrowed(&raw[1..raw.len() - 1]))
        }
    }

    /// Skips a string starting at its opening quote; returns whether it held escapes.
    #[inline]
    fn skip_string(&mut self) -> Result<bool, ScanError> {
        let bytes = self.bytes();
        let mut escaped = false;
        let mut pos = self.pos + 1;
        loop {
            pos = skip_plain_string_bytes(bytes, pos);
            let Some(&byte) = bytes.get(pos) else {
                self.pos = pos;
                return Err(self.error("unterminated string"));
            };
            match byte {
                b'"' => {
                    self.pos = pos + 1;
                    return Ok(escaped);
                }
                b'\\' => {
                    escaped = true;
                    pos += match bytes.get(pos + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => 2,
                        Some(b'u')
                            if bytes
                                .get(pos + 2..pos + 6)
                                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) =>
                        {
                            6
                        }
                        _ => {
                            self.pos = pos;
                            return Err(self.error("malformed escape"));
                        }
                    };
                }
                _ => {
                    self.pos = pos;
                    return Err(self.error("control character in string"));
                }
            }
        }
    }

    /// Skips the value under the cursor (structurally; see the module docs); returns its range.
    pub fn skip_value(&mut self) -> Result<Range<usize>, ScanError> {
        let bytes = self.bytes();
        let start = self.pos;
        match bytes.get(start) {
            None => Err(self.error("unexpected end of input")),
            Some(b'"') => {
                self.skip_string()?;
                Ok(start..self.pos)
            }
            Some(b'{' | b'[') => {
                self.pos =
                    skip_container(bytes, start).map_err(|what| ScanError { at: start, what })?;
                Ok(start..self.pos)
            }
            Some(_) => {
                // A number or literal: a run of the bytes they are made of.
                while let Some(byte) = bytes.get(self.pos)
                    && SCALAR[usize::from(*byte)]
                {
                    self.pos += 1;
                }
                if self.pos == start {
                    return Err(self.error("expected a value"));
                }
                Ok(start..self.pos)
            }
        }
    }
}

/// Whether `s` can stand between quotes as a JSON string as it is: no quote, backslash or
/// control character.
pub fn needs_no_escapes(s: &str) -> bool {
    skip_plain_string_bytes(s.as_bytes(), 0) == s.len()
}

/// `bytes` as text. A SIMD validator: with the standard library's byte loop, validation was
/// a fifth of decoding a Pod. Only a failure pays for the standard library's error, which
/// says where the bad byte is.
pub fn utf8(bytes: &[u8]) -> Result<&str, std::str::Utf8Error> {
    simdutf8::basic::from_utf8(bytes).or_else(|_| std::str::from_utf8(bytes))
}

/// The value of the raw JSON string literal `raw` (a range the scanners gave), borrowed
/// unless it has escapes; `None` if `raw` is not a string.
pub fn string_value(raw: &str) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if needs_no_escapes(inner) {
        Some(Cow::Borrowed(inner))
    } else {
        serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
    }
}

/// Appends `s` as a JSON string literal.
pub fn push_json_string(out: &mut String, s: &str) {
    if needs_no_escapes(s) {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(s).expect("a str always serializes"));
    }
}

/// Iterates over the elements of one JSON array, giving each one's byte range.
pub struct ArrayScanner<'a> {
    /// The cursor and bookkeeping; [`path`] walks elements in place through its ways past
    /// a value (`skip_value`, `enter_object`, `enter_array`), never `next_key`.
    inner: ObjectScanner<'a>,
}

impl<'a> ArrayScanner<'a> {
    /// Starts scanning `text`, which must hold one JSON array (surrounding white space allowed).
    pub fn new(text: &'a str) -> Result<Self, ScanError> {
        Self::at(text, 0, false)
    }

    fn at(text: &'a str, pos: usize, nested: bool) -> Result<Self, ScanError> {
        let mut inner = ObjectScanner {
            text,
            pos,
            start: pos,
            first: true,
            done: false,
            nested,
        };
        inner.skip_ws();
        inner.start = inner.pos;
        inner.expect(b'[', "expected '['")?;
        Ok(Self { inner })
    }

    /// The byte range of the next element; `None` after the last.
    pub fn next_element(&mut self) -> Result<Option<Range<usize>>, ScanError> {
        if self.next_is_element()? {
            self.inner.skip_value().map(Some)
        } else {
            Ok(None)
        }
    }

    /// Moves the cursor onto the next element, or past the closing bracket after the last
    /// (then `false`). The caller moves past the element (skipping or entering it through
    /// `inner`) before asking for the next.
    fn next_is_element(&mut self) -> Result<bool, ScanError> {
        let scanner = &mut self.inner;
        if scanner.done {
            return Ok(false);
        }
        scanner.skip_ws();
        if scanner.peek() == Some(b']') {
            scanner.pos += 1;
            scanner.done = true;
            scanner.skip_ws();
            if !scanner.nested && scanner.pos != scanner.text.len() {
                return Err(scanner.error("trailing bytes after the array"));
            }
            return Ok(false);
        }
        if !scanner.first {
            scanner.expect(b',', "expected ',' or ']'")?;
            scanner.skip_ws();
        }
        scanner.first = false;
        Ok(true)
    }
}

/// Bytes that may make up a number or a literal.
static SCALAR: [bool; 256] = {
    let mut table = [false; 256];
    let allowed = b"0123456789+-.eEtrufalsn";
    let mut i = 0;
    while i < allowed.len() {
        table[allowed[i] as usize] = true;
        i += 1;
    }
    table
};

/// Finds the end of the array or object whose opening bracket is at `start`: the position
/// after its closing bracket.
fn skip_container(bytes: &[u8], start: usize) -> Result<usize, &'static str> {
    skip_to_close(bytes, start, 0)
}

/// From `start`, outside any string and `depth` brackets deep, finds the position after the
/// bracket that brings the depth to zero (the first bracket at `start` counts when `depth` is
/// zero).
///
/// Works on 64-byte blocks as simdjson's first stage does: bit masks of quotes, backslashes
/// and brackets; escaped quotes removed; the inside of strings found with a prefix XOR; then
/// only brackets outside strings count towards the depth. A block that cannot close the
/// container costs two popcounts.
fn skip_to_close(bytes: &[u8], start: usize, mut depth: u64) -> Result<usize, &'static str> {
    let mut escape_carry = 0u64;
    let mut string_carry = 0u64;
    let mut block_start = start;
    while block_start < bytes.len() {
        let block = Block::load(&bytes[block_start..]);
        let escaped = if block.backslash | escape_carry == 0 {
            0
        } else {
            escaped_bits(block.backslash, &mut escape_carry)
        };
        let quotes = block.quote & !escaped;
        let in_string = prefix_xor(quotes) ^ string_carry;
        string_carry = 0u64.wrapping_sub(in_string >> 63);
        let opens = block.open & !in_string;
        let closes = block.close & !in_string;
        if u64::from(closes.count_ones()) < depth {
            depth = depth + u64::from(opens.count_ones()) - u64::from(closes.count_ones());
        } else {
            let mut brackets = opens | closes;
            while brackets != 0 {
                let bit = brackets & brackets.wrapping_neg();
                if opens & bit != 0 {
                    depth += 1;
                } else {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(block_start + bit.trailing_zeros() as usize + 1);
                    }
                }
                brackets &= brackets - 1;
            }
        }
        block_start += 64;
    }
    Err(if string_carry != 0 {
        "unterminated string"
    } else {
        "unexpected end of input"
    })
}

/// One 64-byte block as bit masks (bit i is byte i); bytes past the input count as spaces.
struct Block {
    quote: u64,
    backslash: u64,
    open: u64,
    close: u64,
}

impl Block {
    fn load(bytes: &[u8]) -> Self {
        match bytes.first_chunk::<64>() {
            Some(full) => Self::classify(full),
            None => {
                let mut padded = [b' '; 64];
                padded[..bytes.len()].copy_from_slice(bytes);
                Self::classify(&padded)
            }
        }
    }

    fn classify(bytes: &[u8; 64]) -> Self {
        let mut block = Self {
            quote: 0,
            backslash: 0,
            open: 0,
            close: 0,
        };
        for (lane, bytes) in bytes.chunks_exact(16).enumerate() {
            let v = u8x16::new(bytes.try_into().expect("16 bytes"));
            // `{` and `[` differ only in bit 0x20, as do `}` and `]`.
            let folded = v | u8x16::splat(0x20);
            let mask =
                |v: u8x16, c: u8| u64::from(v.simd_eq(u8x16::splat(c)).to_bitmask()) << (16 * lane);
            block.quote |= mask(v, b'"');
            block.backslash |= mask(v, b'\\');
            block.open |= mask(folded, b'{');
            block.close |= mask(folded, b'}');
        }
        block
    }
}

/// Bits of the characters escaped by a backslash; `carry` says whether the first byte of this
/// block is escaped by the previous block's last backslash, and is updated for the next one.
fn escaped_bits(backslash: u64, carry: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    let backslash = backslash & !*carry;
    let follows_escape = (backslash << 1) | *carry;
    let odd_starts = backslash & !EVEN & !follows_escape;
    let (even_starts, overflow) = odd_starts.overflowing_add(backslash);
    *carry = u64::from(overflow);
    let invert = even_starts << 1;
    (EVEN ^ invert) & follows_escape
}

/// Bit i of the result is the XOR of bits 0..=i of `x`: inside-string bits from quote bits.
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// Returns the position of the first byte at or after `pos` that is a quote, a backslash or
/// a control character (or the end). Eight bytes at a time, as serde_json does.
#[inline]
fn skip_plain_string_bytes(bytes: &[u8], mut pos: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    while let Some(chunk) = bytes.get(pos..pos + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let special = has_zero(word ^ (ONES * u64::from(b'"')))
            | has_zero(word ^ (ONES * u64::from(b'\\')))
            | (word.wrapping_sub(ONES * 0x20) & !word & HIGHS);
        if special != 0 {
            return pos + (special.trailing_zeros() / 8) as usize;
        }
        pos += 8;
    }
    while pos < bytes.len() && !STRING_SPECIAL[usize::from(bytes[pos])] {
        pos += 1;
    }
    pos
}

/// Bytes that end the fast path inside a string: the closing quote, a backslash, and the
/// control characters JSON forbids unescaped.
static STRING_SPECIAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn members(text: &str) -> Result<Vec<(String, String)>, ScanError> {
        let mut scanner = ObjectScanner::new(text)?;
        let mut out = Vec::new();
        while let Some((key, range)) = scanner.next_member()? {
            out.push((key.into_owned(), text[range].to_owned()));
        }
        Ok(out)
    }

    #[test]
    fn walks_members_and_keeps_raw_values() {
        let got = members(
            r#" { "a" : 1.5e3 , "b":[1,{"c":"}"}], "d\"e":"x\\y\u00e9", "n":null,"t":true } "#,
        )
        .unwrap();
        assert_eq!(
            got,
            [
                ("a".into(), "1.5e3".into()),
                ("b".into(), r#"[1,{"c":"}"}]"#.into()),
                ("d\"e".into(), r#""x\\y\u00e9""#.into()),
                ("n".into(), "null".into()),
                ("t".into(), "true".into()),
            ]
        );
        assert_eq!(members("{}").unwrap(), []);
    }

    #[test]
    fn rejects_broken_structure() {
        for bad in [
            "",
            "[]",
            "{",
            r#"{"a":1"#,
            r#"{"a":[1"#,
            r#"{"a":["x]}"#,
            r#"{"a":1 2}"#,
            r#"{"a":"abc}"#,
            r#"{"a":"\q"}"#,
            r#"{"a":nope}"#,
            r#"{"a":1}x"#,
            r#"{"a" 1}"#,
            r#"{"a":1,}"#,
            r#"{a:1}"#,
            r#"{"a":}"#,
            "{\"a\":\"line\nbreak\"}",
        ] {
            assert!(members(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn arrays_give_their_elements() {
        let text = r#" [ {"a":1}, "x", 2 ,[3]] "#;
        let mut scanner = ArrayScanner::new(text).unwrap();
        let mut elements = Vec::new();
        while let Some(range) = scanner.next_element().unwrap() {
            elements.push(&text[range]);
        }
        assert_eq!(elements, [r#"{"a":1}"#, r#""x""#, "2", "[3]"]);
        for bad in ["[1,]", "[1 2]", "[", "{}", "[1]x"] {
            let mut scanner = ArrayScanner::new(bad);
            let failed = loop {
                match scanner.as_mut().map(|s| s.next_element()) {
                    Err(_) | Ok(Err(_)) => break true,
                    Ok(Ok(None)) => break false,
                    Ok(Ok(Some(_))) => {}
                }
            };
            assert!(failed, "accepted {bad:?}");
        }
    }

    #[test]
    fn nested_objects_are_walked_in_place() {
        let text = r#"{"a":1,"m": {"x":[1],"y":{"z":2}} ,"b":"c"}"#;
        let mut top = ObjectScanner::new(text).unwrap();
        assert_eq!(top.next_member().unwrap().unwrap().0, "a");
        assert_eq!(top.next_key().unwrap().unwrap(), "m");
        let mut inner = top.enter_object().unwrap();
        let (key, range) = inner.next_member().unwrap().unwrap();
        assert_eq!((&*key, &text[range]), ("x", "[1]"));
        let (key, range) = inner.next_member().unwrap().unwrap();
        assert_eq!((&*key, &text[range]), ("y", r#"{"z":2}"#));
        assert!(inner.next_member().unwrap().is_none());
        let range = top.leave_object(inner);
        assert_eq!(&text[range], r#"{"x":[1],"y":{"z":2}}"#);
        let (key, range) = top.next_member().unwrap().unwrap();
        assert_eq!((&*key, &text[range]), ("b", r#""c""#));
        assert!(top.next_member().unwrap().is_none());
    }

    #[test]
    fn nested_arrays_and_their_elements_are_walked_in_place() {
        let text = r#"{"l": [ {"k":1}, [2, [3]], "s" ] ,"b":[]}"#;
        let mut top = ObjectScanner::new(text).unwrap();
        assert_eq!(top.next_key().unwrap().unwrap(), "l");
        let mut list = top.enter_array().unwrap();
        assert!(list.next_is_element().unwrap());
        let mut object = list.inner.enter_object().unwrap();
        assert_eq!(object.next_member().unwrap().unwrap().0, "k");
        assert!(object.next_member().unwrap().is_none());
        assert_eq!(&text[list.inner.leave_object(object)], r#"{"k":1}"#);
        assert!(list.next_is_element().unwrap());
        let mut inner = list.inner.enter_array().unwrap();
        assert_eq!(&text[inner.next_element().unwrap().unwrap()], "2");
        assert_eq!(&text[inner.next_element().unwrap().unwrap()], "[3]");
        assert!(inner.next_element().unwrap().is_none());
        assert_eq!(&text[list.inner.leave_array(inner)], "[2, [3]]");
        assert!(list.next_is_element().unwrap());
        assert_eq!(&text[list.inner.skip_value().unwrap()], r#""s""#);
        assert!(!list.next_is_element().unwrap());
        assert_eq!(
            &text[top.leave_array(list)],
            r#"[ {"k":1}, [2, [3]], "s" ]"#
        );
        let (key, range) = top.next_member().unwrap().unwrap();
        assert_eq!((&*key, &text[range]), ("b", "[]"));
        assert!(top.next_member().unwrap().is_none());
        // A nested array does not look past its end; its parent does.
        let mut top = ObjectScanner::new(r#"{"l":[1] x}"#).unwrap();
        top.next_key().unwrap();
        let mut list = top.enter_array().unwrap();
        assert!(list.next_element().unwrap().is_some());
        assert!(list.next_element().unwrap().is_none());
        top.leave_array(list);
        assert!(top.next_key().is_err());
    }

    #[test]
    fn containers_skip_across_blocks_strings_and_escapes() {
        // Brackets inside strings, escaped quotes and backslash runs at block boundaries.
        let mut inner = String::new();
        for i in 0..40 {
            inner.push_str(&format!(
                r#"{{"k{i}":"a\"]}}{}\\","v":[1,{{"x":"\\\\"}}]}},"#,
                "\\\\".repeat(i % 5)
            ));
        }
        inner.pop();
        let text = format!(r#"{{"a":[{inner}],"b":"[{{"}}"#);
        let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
        for (key, raw) in members(&text).unwrap() {
            let parsed: serde_json::Value = serde_json::from_str(&raw).unwrap();
            assert_eq!(parsed, expected[&key]);
        }
        let deep = format!(r#"{{"a":{}{}}}"#, "[".repeat(10_000), "]".repeat(10_000));
        assert!(members(&deep).is_ok());
        let unbalanced = format!(r#"{{"a":{}{}}}"#, "[".repeat(100), "]".repeat(99));
        assert!(members(&unbalanced).is_err());
    }

    #[test]
    fn agrees_with_serde_on_valid_json() {
        let text = r#"{"kind":"Pod","metadata":{"name":"p","labels":{"a":"b"}},"spec":{"x":[1,2,{"y":false}]},"n":-0.5}"#;
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        for (key, raw) in members(text).unwrap() {
            let parsed: serde_json::Value = serde_json::from_str(&raw).unwrap();
            assert_eq!(parsed, value[&key]);
        }
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            // Quarters print and parse back exactly; serde_json's float round trip may not.
            any::<i32>().prop_map(|i| Value::from(f64::from(i) / 4.0)),
            "[ -~\\\\\"\u{e9}\u{2603}\n\t]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
                prop::collection::btree_map("[a-z\"\\\\{}\\[\\]]{0,6}", inner, 0..8)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn members_round_trip_through_serde(
            members_in in prop::collection::btree_map("[a-z\"\\\\]{0,8}", json_value(), 0..6),
            pretty in any::<bool>(),
        ) {
            let object = serde_json::Value::Object(members_in.into_iter().collect());
            let text = if pretty {
                serde_json::to_string_pretty(&object).unwrap()
            } else {
                serde_json::to_string(&object).unwrap()
            };
            let got = members(&text).unwrap();
            prop_assert_eq!(got.len(), object.as_object().unwrap().len());
            for (key, raw) in got {
                let parsed: serde_json::Value = serde_json::from_str(&raw).unwrap();
                prop_assert_eq!(&parsed, &object[&key]);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(text in "[{}\\[\\]\",:\\\\a0 ]{0,200}") {
            if let Ok(mut scanner) = ObjectScanner::new(&text) {
                while let Ok(Some((_, range))) = scanner.next_member() {
                    prop_assert!(range.end <= text.len());
                }
            }
        }
    }
}
