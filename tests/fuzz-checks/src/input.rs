//! Fuzz bytes read as a sequence of choices, for the structure-aware checks: a mutation of
//! one byte changes one choice, so the fuzzer explores shapes instead of JSON syntax.

/// The fuzz input, read front to back; past the end every byte reads as zero.
///
/// Strings come mostly from `words` (values the parser knows, valid and not), now and then
/// exactly `bound` bytes long or one byte over it, so that every length bound is crossed, and
/// otherwise are raw bytes read as text.
pub(crate) struct Input<'a> {
    bytes: &'a [u8],
    words: &'static [&'static str],
    bound: usize,
}

impl<'a> Input<'a> {
    pub(crate) fn new(bytes: &'a [u8], words: &'static [&'static str], bound: usize) -> Self {
        Self {
            bytes,
            words,
            bound,
        }
    }

    /// Whether every byte has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub(crate) fn byte(&mut self) -> u8 {
        let Some((&first, rest)) = self.bytes.split_first() else {
            return 0;
        };
        self.bytes = rest;
        first
    }

    pub(crate) fn text(&mut self) -> String {
        let pick = usize::from(self.byte());
        match pick {
            _ if pick < 200 => self.words[pick % self.words.len()].to_owned(),
            200..=209 => "a".repeat(self.bound),
            210..=219 => "a".repeat(self.bound + 1),
            _ => {
                let len = usize::from(self.byte()) % 32;
                let raw: Vec<u8> = (0..len).map(|_| self.byte()).collect();
                String::from_utf8_lossy(&raw).into_owned()
            }
        }
    }

    pub(crate) fn optional_text(&mut self) -> Option<String> {
        (self.byte() % 2 == 1).then(|| self.text())
    }
}
