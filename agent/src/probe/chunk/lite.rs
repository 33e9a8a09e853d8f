//! The fast path for the common chunk: [`decode_lite`] reads it in one pass without
//! building anything, and [`decode_cached`] answers a chunk that is the previous one with
//! another token without parsing it again. Both answer only what the full decoder
//! ([`super::decode`]) would, and hand anything else to it.

/// What a measurement reads from a common streamed chunk, found by [`decode_lite`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteChunk<'a> {
    /// Visible text of the measured choice's delta (`""` when none).
    pub content: &'a str,
    /// Its reasoning text: the first non-empty of `reasoning_content`, `reasoning`,
    /// `reasoning_text`, `thinking` (as [`DeltaWire::reasoning`]).
    pub reasoning: &'a str,
    /// The field `reasoning` came from (`None` when it is empty).
    pub reasoning_field: Option<&'static str>,
    /// Its non-empty `finish_reason`.
    pub finish_reason: Option<&'a str>,
    /// Top-level `model` (`""` when absent or null), as [`ChunkWire::model`].
    pub model: &'a str,
    /// Top-level `system_fingerprint` (`""` when absent or null).
    pub system_fingerprint: &'a str,
}

/// The fast path of [`decode`](super::decode) for the chunks nearly every stream is made of:
/// `{…,"choices":[{"index":0,"delta":{"content":"…"},"finish_reason":null,…}],"usage":null,…}`.
///
/// One pass over the bytes, nothing built but the fields of [`LiteChunk`]: strings
/// without escapes borrow from `bytes`, the others are unescaped into `scratch` (cleared
/// first; no allocation once it has grown to the longest such text). It answers only when it
/// can answer exactly what [`decode`](super::decode) and the accessors of [`ChunkWire`](super::ChunkWire) would (same
/// `content`, `reasoning`, `finish_reason`, `model`, `system_fingerprint`; no tool call, no
/// usage, no error), and `None`
/// otherwise, for the full decoder to handle: bytes that are not valid UTF-8 or not JSON
/// exactly as serde_json reads it, any control character (even the whitespace `\t`, `\n`,
/// `\r` between tokens), a key with an escape, a field present twice, more than one
/// choice, a choice `index` other than a literal `0`, a `\u` escape of a UTF-16 surrogate
/// in a string it returns, a non-null `usage`, `error`, `x_groq`, `message`, `tool_calls`,
/// `function_call`, `reasoning_details`, `refusal` or `audio` in the delta, an `object` of
/// `"error"` (or with an escape), a
/// top-level `message`, `type` or `code`, a `model` or `system_fingerprint` that is neither
/// null nor a string, or a field of a type it does not expect. Values
/// of other fields are skipped with serde_json's own rules for ignored values (strings with
/// valid escapes, numbers by its grammar, nested arrays and objects).
pub fn decode_lite<'a>(bytes: &'a [u8], scratch: &'a mut String) -> Option<LiteChunk<'a>> {
    // A control character is an error inside a string and allowed outside only as
    // whitespace (\t, \n, \r), which one-line SSE payloads do not carry: any of them sends
    // the payload to the full decoder, so strings below are only scanned for `"` and `\`.
    // (A fold rather than `any`: it compiles to a vector loop.)
    if bytes.iter().fold(false, |ctl, &c| ctl | (c < 0x20)) {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    scratch.clear();
    let mut c = Cursor {
        s: text,
        b: bytes,
        i: 0,
        scratch: &mut *scratch,
    };
    let found = c.chunk()?;
    c.ws();
    if c.i != bytes.len() {
        return None;
    }
    let scratch: &'a str = scratch;
    let text = |s: Span<'a>| match s {
        Span::Empty => "",
        Span::Raw(s) => s,
        Span::Scratch(a, b) => &scratch[a..b],
    };
    let reasoning = found.reasoning.into_iter().position(|s| !s.is_empty());
    Some(LiteChunk {
        content: text(found.content),
        reasoning: reasoning.map_or("", |i| text(found.reasoning[i])),
        reasoning_field: reasoning.map(|i| REASONING_FIELDS[i]),
        finish_reason: found.finish_reason.map(text),
        model: text(found.model),
        system_fingerprint: text(found.system_fingerprint),
    })
}

/// Where a range of a payload is, and which text of [`LiteChunk`] it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotKind {
    Content,
    Reasoning,
}

/// The last chunk [`decode_lite`] read whole, kept by [`decode_cached`] for the next ones.
///
/// The chunks of one stream usually differ only in their token: same id, same `created`,
/// same model, same shape. When a payload is this one with only the token string changed
/// (same bytes before it, same bytes after it), it reads exactly as this one did with the
/// new token, so it need not be parsed again.
#[derive(Debug, Default)]
pub struct LiteCache {
    /// The payload the template was taken from.
    buf: Vec<u8>,
    /// Its token string (between the quotes): start, end, which text; `None`: no template.
    slot: Option<(usize, usize, SlotKind)>,
    /// Where its other texts are in `buf` (`None`: absent or empty).
    content: Option<(usize, usize)>,
    reasoning: Option<(usize, usize)>,
    /// The field its reasoning came from.
    reasoning_field: Option<&'static str>,
    finish_reason: Option<(usize, usize)>,
    model: Option<(usize, usize)>,
    system_fingerprint: Option<(usize, usize)>,
    /// Unescaped texts for [`decode_lite`].
    scratch: String,
}

/// [`decode_lite`], remembering the payload in `cache` as a template: a payload that is the
/// template with only its token string replaced by another non-empty string without `"`,
/// `\`, control characters or invalid UTF-8 is answered from the template without being
/// parsed (the same answer [`decode_lite`] gives: the rest of its bytes are the template's,
/// which parsed to the same structure). Anything else is read by [`decode_lite`], which
/// replaces the template when what it read has a token and no escaped text. No allocation
/// once `cache` has grown to the longest payload.
pub fn decode_cached<'a>(bytes: &'a [u8], cache: &'a mut LiteCache) -> Option<LiteChunk<'a>> {
    // Does the payload match the template? (Decided first, answered after: the answer
    // borrows the cache, which the other path changes.)
    let hit = cache.slot.and_then(|(start, end, kind)| {
        let tail = cache.buf.len() - end;
        let token_end = bytes.len().checked_sub(tail)?;
        let matches = token_end > start
            && bytes[..start] == cache.buf[..start]
            && bytes[token_end..] == cache.buf[end..];
        let token = bytes.get(start..token_end).filter(|_| matches)?;
        let plain = !token.iter().fold(false, |bad, &c| {
            bad | (c < 0x20) | (c == b'"') | (c == b'\\')
        });
        (plain && std::str::from_utf8(token).is_ok()).then_some((start, token_end, kind))
    });
    if let Some((start, token_end, kind)) = hit {
        let cache: &'a LiteCache = cache;
        let token = std::str::from_utf8(&bytes[start..token_end]).unwrap_or("");
        let text = |r: Option<(usize, usize)>| {
            r.map_or("", |(a, b)| {
                std::str::from_utf8(&cache.buf[a..b]).unwrap_or("")
            })
        };
        let (content, reasoning) = match kind {
            SlotKind::Content => (token, text(cache.reasoning)),
            SlotKind::Reasoning => (text(cache.content), token),
        };
        return Some(LiteChunk {
            content,
            reasoning,
            reasoning_field: cache.reasoning_field.filter(|_| !reasoning.is_empty()),
            finish_reason: cache.finish_reason.map(|r| text(Some(r))),
            model: text(cache.model),
            system_fingerprint: text(cache.system_fingerprint),
        });
    }
    let LiteCache {
        buf,
        slot,
        content,
        reasoning,
        reasoning_field,
        finish_reason,
        model,
        system_fingerprint,
        scratch,
    } = cache;
    let found = decode_lite(bytes, scratch)?;
    // A template only from texts that are slices of `bytes` (no escapes), with a token.
    let range = |t: &str| {
        let a = (t.as_ptr() as usize).wrapping_sub(bytes.as_ptr() as usize);
        (a <= bytes.len() && a + t.len() <= bytes.len()).then_some((a, a + t.len()))
    };
    let texts = [
        Some(found.content),
        Some(found.reasoning),
        found.finish_reason,
        Some(found.model),
        Some(found.system_fingerprint),
    ];
    let raw = texts
        .iter()
        .flatten()
        .all(|t| t.is_empty() || range(t).is_some());
    let token = if !found.content.is_empty() {
        Some((found.content, SlotKind::Content))
    } else if !found.reasoning.is_empty() {
        Some((found.reasoning, SlotKind::Reasoning))
    } else {
        None
    };
    match token {
        Some((t, kind)) if raw => {
            let (a, b) = range(t).unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(bytes);
            *slot = Some((a, b, kind));
            let nonempty = |t: &str| range(t).filter(|r| r.0 < r.1);
            *content = nonempty(found.content);
            *reasoning = nonempty(found.reasoning);
            *reasoning_field = found.reasoning_field;
            *finish_reason = found.finish_reason.and_then(nonempty);
            *model = nonempty(found.model);
            *system_fingerprint = nonempty(found.system_fingerprint);
        }
        // Keep the template: the next token chunk will likely match it again.
        _ => {}
    }
    Some(found)
}

/// A JSON value as the fast path sees it.
enum Val<'a> {
    Null,
    /// A string without escapes.
    Str(&'a str),
    /// A string with escapes (validated), as it is between its quotes.
    Escaped(&'a str),
}

/// A text found: borrowed from the payload, or unescaped into the scratch buffer.
#[derive(Clone, Copy, Debug, Default)]
enum Span<'a> {
    #[default]
    Empty,
    Raw(&'a str),
    Scratch(usize, usize),
}

impl Span<'_> {
    fn is_empty(&self) -> bool {
        match self {
            Span::Empty => true,
            Span::Raw(s) => s.is_empty(),
            Span::Scratch(a, b) => a == b,
        }
    }
}

/// The names of [`Found::reasoning`]'s fields, in its order.
const REASONING_FIELDS: [&str; 4] = [
    "reasoning_content",
    "reasoning",
    "reasoning_text",
    "thinking",
];

/// The texts of a chunk, before the scratch buffer can be borrowed.
#[derive(Default)]
struct Found<'a> {
    content: Span<'a>,
    /// `reasoning_content`, `reasoning`, `reasoning_text`, `thinking`.
    reasoning: [Span<'a>; 4],
    finish_reason: Option<Span<'a>>,
    model: Span<'a>,
    system_fingerprint: Span<'a>,
}

/// Appends the JSON string `raw` (escapes validated, as between its quotes) to `out`,
/// unescaped as serde_json unescapes strings it returns; `None` for a `\u` escape of a
/// UTF-16 surrogate (paired or not: left to serde_json).
fn unescape(raw: &str, out: &mut String) -> Option<()> {
    let mut rest = raw;
    while let Some(p) = rest.find('\\') {
        out.push_str(&rest[..p]);
        let (ch, used) = match *rest.as_bytes().get(p + 1)? {
            b'"' => ('"', 2),
            b'\\' => ('\\', 2),
            b'/' => ('/', 2),
            b'b' => ('\u{8}', 2),
            b'f' => ('\u{c}', 2),
            b'n' => ('\n', 2),
            b'r' => ('\r', 2),
            b't' => ('\t', 2),
            b'u' => {
                let n = u32::from_str_radix(rest.get(p + 2..p + 6)?, 16).ok()?;
                if (0xD800..=0xDFFF).contains(&n) {
                    return None;
                }
                (char::from_u32(n)?, 6)
            }
            _ => return None,
        };
        out.push(ch);
        rest = rest.get(p + used..)?;
    }
    out.push_str(rest);
    Some(())
}

/// Position of the first `"` or `\\` in `b`, eight bytes at a time. (The strings of a chunk
/// are short, keys, ids, a token: memchr's setup costs more than it saves there.)
#[inline(always)]
fn quote_or_backslash(b: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // High bit of every zero byte of `x` (the lowest one exactly: a borrow only goes up).
    let zero_bytes = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut words = b.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().unwrap_or_default());
        let hit =
            zero_bytes(w ^ (ONES * u64::from(b'"'))) | zero_bytes(w ^ (ONES * u64::from(b'\\')));
        if hit != 0 {
            return Some(at + (hit.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = words.remainder();
    tail.iter()
        .position(|&c| c == b'"' || c == b'\\')
        .map(|p| at + p)
}

struct Cursor<'a, 's> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    scratch: &'s mut String,
}

impl<'a> Cursor<'a, '_> {
    #[inline(always)]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    #[inline(always)]
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    #[inline(always)]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// After an opening quote: the string up to its closing quote, and whether it holds
    /// an escape (validated as serde_json validates ignored strings). The payload holds no
    /// control character (checked by [`decode_lite`]).
    #[inline(always)]
    fn string(&mut self) -> Option<(&'a str, bool)> {
        let start = self.i;
        let mut escaped = false;
        loop {
            self.i += quote_or_backslash(self.b.get(self.i..)?)?;
            if self.b[self.i] == b'"' {
                let s = &self.s[start..self.i];
                self.i += 1;
                return Some((s, escaped));
            }
            escaped = true;
            match *self.b.get(self.i + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                b'u' => {
                    let hex = self.b.get(self.i + 2..self.i + 6)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    self.i += 6;
                }
                _ => return None,
            }
        }
    }

    /// An object key (no escape) and its colon.
    #[inline(always)]
    fn key(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let (k, escaped) = self.string()?;
        if escaped {
            return None;
        }
        self.eat(b':')?;
        Some(k)
    }

    /// Null or a string; anything else is not for the fast path.
    #[inline(always)]
    fn null_or_str(&mut self) -> Option<Val<'a>> {
        match self.peek()? {
            b'n' => self.literal(b"null").map(|()| Val::Null),
            b'"' => {
                self.i += 1;
                match self.string()? {
                    (s, false) => Some(Val::Str(s)),
                    (s, true) => Some(Val::Escaped(s)),
                }
            }
            _ => None,
        }
    }

    fn null(&mut self) -> Option<()> {
        match self.null_or_str()? {
            Val::Null => Some(()),
            Val::Str(_) | Val::Escaped(_) => None,
        }
    }

    /// A text field: null (absent) or a string, unescaped into the scratch buffer when it
    /// has escapes.
    fn text(&mut self) -> Option<Span<'a>> {
        Some(match self.null_or_str()? {
            Val::Null => Span::Empty,
            Val::Str(s) => Span::Raw(s),
            Val::Escaped(raw) => {
                let from = self.scratch.len();
                unescape(raw, self.scratch)?;
                Span::Scratch(from, self.scratch.len())
            }
        })
    }

    #[inline(always)]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + word.len())? == word {
            self.i += word.len();
            Some(())
        } else {
            None
        }
    }

    /// A number by serde_json's grammar for ignored numbers.
    fn number(&mut self) -> Option<()> {
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        let digits = |c: &mut Self| {
            let from = c.i;
            while c.b.get(c.i).is_some_and(u8::is_ascii_digit) {
                c.i += 1;
            }
            c.i > from
        };
        match *self.b.get(self.i)? {
            b'0' => {
                self.i += 1;
                if self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
                    return None;
                }
            }
            b'1'..=b'9' => {
                digits(self);
            }
            _ => return None,
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if !digits(self) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if !digits(self) {
                return None;
            }
        }
        Some(())
    }

    /// Skips any value (serde_json's `ignore_value`); nesting deeper than 64 is left to the
    /// full decoder.
    fn skip(&mut self, depth: u32) -> Option<()> {
        if depth > 64 {
            return None;
        }
        match self.peek()? {
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'"' => {
                self.i += 1;
                self.string().map(|_| ())
            }
            b'-' | b'0'..=b'9' => self.number(),
            b'[' => {
                self.i += 1;
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.skip(depth + 1)?;
                    match self.peek()? {
                        b',' => self.i += 1,
                        b']' => {
                            self.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b'{' => {
                self.i += 1;
                if self.peek()? == b'}' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.eat(b'"')?;
                    self.string()?;
                    self.eat(b':')?;
                    self.skip(depth + 1)?;
                    match self.peek()? {
                        b',' => self.i += 1,
                        b'}' => {
                            self.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            _ => None,
        }
    }

    /// The members of an object, after its `{`: `f(self, key)` reads each value. A known
    /// key seen twice (bit `seen` of the mask `f` returns) is left to the full decoder,
    /// whose derived structs refuse duplicate fields.
    fn members(&mut self, mut f: impl FnMut(&mut Self, &'a str) -> Option<u32>) -> Option<()> {
        let mut seen = 0u32;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let k = self.key()?;
            let bit = f(self, k)?;
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn chunk(&mut self) -> Option<Found<'a>> {
        self.eat(b'{')?;
        let mut out = Found::default();
        self.members(|c, k| {
            Some(match k {
                "choices" => {
                    c.choices(&mut out)?;
                    1
                }
                "usage" | "x_groq" | "error" => {
                    c.null()?;
                    match k {
                        "usage" => 2,
                        "x_groq" => 4,
                        _ => 8,
                    }
                }
                "object" => {
                    match c.null_or_str()? {
                        Val::Str("error") | Val::Escaped(_) => return None,
                        Val::Str(_) | Val::Null => {}
                    }
                    16
                }
                "message" | "type" | "code" => return None,
                "model" => {
                    out.model = c.text()?;
                    32
                }
                "system_fingerprint" => {
                    out.system_fingerprint = c.text()?;
                    64
                }
                _ => {
                    c.skip(0)?;
                    0
                }
            })
        })?;
        Some(out)
    }

    /// `choices`: an empty array or one choice object.
    fn choices(&mut self, out: &mut Found<'a>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        self.eat(b'{')?;
        self.members(|c, k| {
            Some(match k {
                "index" => {
                    c.peek()?;
                    c.literal(b"0")?;
                    if c.b
                        .get(c.i)
                        .is_some_and(|b| b.is_ascii_digit() || b".eE".contains(b))
                    {
                        return None;
                    }
                    1
                }
                "delta" => {
                    match c.peek()? {
                        b'n' => c.literal(b"null")?,
                        b'{' => {
                            c.i += 1;
                            c.delta(out)?;
                        }
                        _ => return None,
                    }
                    2
                }
                "message" | "usage" => {
                    c.null()?;
                    if k == "message" { 4 } else { 8 }
                }
                "finish_reason" => {
                    out.finish_reason = Some(c.text()?).filter(|s| !s.is_empty());
                    16
                }
                _ => {
                    c.skip(0)?;
                    0
                }
            })
        })?;
        self.eat(b']')
    }

    /// The members of a delta, after its `{`.
    fn delta(&mut self, out: &mut Found<'a>) -> Option<()> {
        self.members(|c, k| {
            let slot = match k {
                "content" => None,
                "reasoning_content" => Some(0),
                "reasoning" => Some(1),
                "reasoning_text" => Some(2),
                "thinking" => Some(3),
                "reasoning_details" | "tool_calls" | "function_call" | "refusal" | "audio" => {
                    c.null()?;
                    return Some(match k {
                        "reasoning_details" => 1 << 5,
                        "tool_calls" => 1 << 6,
                        "function_call" => 1 << 7,
                        "refusal" => 1 << 8,
                        _ => 1 << 9,
                    });
                }
                _ => {
                    c.skip(0)?;
                    return Some(0);
                }
            };
            let v = c.text()?;
            Some(match slot {
                None => {
                    out.content = v;
                    1
                }
                Some(i) => {
                    out.reasoning[i] = v;
                    2 << i
                }
            })
        })
    }
}

#[cfg(test)]
mod tests;
