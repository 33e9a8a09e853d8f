//! Deterministic token text and prompt-size estimation.
//!
//! The simulator does not run a model: each generated token is a word picked by hashing a
//! per-response key with the token's index, so the same request (same prompt and `seed`)
//! always gets the same text. Prompts that are mostly CJK get Chinese characters back, one
//! character per token, as real tokenizers often do.

/// FNV-1a, 64-bit: a stable hash (unlike `std`'s `DefaultHasher`, fixed across Rust releases).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64 finalizer: spreads the bits of `x` (used to combine hashes and counters).
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Estimated prompt tokens: `ceil(chars / 4)` where `chars` is the number of Unicode scalar
/// values in all message contents together (text parts only). A rough stand-in for a real
/// tokenizer, which the simulator does not have.
pub fn estimate_prompt_tokens(total_chars: usize) -> u32 {
    u32::try_from(total_chars.div_ceil(4)).unwrap_or(u32::MAX)
}

/// True when more than a third of the non-whitespace characters of `text` are CJK.
pub fn is_mostly_cjk(text: &str) -> bool {
    let (mut cjk, mut total) = (0usize, 0usize);
    for c in text.chars().filter(|c| !c.is_whitespace()) {
        total += 1;
        if matches!(c as u32, 0x3000..=0x303F | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xFF00..=0xFFEF)
        {
            cjk += 1;
        }
    }
    total > 0 && cjk * 3 > total
}

/// Which part of the answer a token belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// Visible `content`.
    Content,
    /// `reasoning_content` (the "thinking" before the answer).
    Reasoning,
}

const WORDS: &[&str] = &[
    "the",
    "latency",
    "of",
    "a",
    "model",
    "depends",
    "on",
    "load",
    "and",
    "region",
    "each",
    "provider",
    "serves",
    "tokens",
    "at",
    "its",
    "own",
    "pace",
    "while",
    "users",
    "wait",
    "for",
    "first",
    "byte",
    "streaming",
    "helps",
    "because",
    "output",
    "arrives",
    "early",
    "in",
    "small",
    "pieces",
    "queue",
    "time",
    "grows",
    "with",
    "traffic",
    "so",
    "peak",
    "hours",
    "look",
    "different",
    "from",
    "quiet",
    "ones",
    "measure",
    "carefully",
    "compare",
    "fairly",
    "cache",
    "prefill",
    "decode",
    "batch",
    "throughput",
    "answer",
    "question",
    "simple",
    "result",
    "network",
    "path",
    "server",
    "request",
    "response",
];

const THINK_WORDS: &[&str] = &[
    "let", "me", "think", "about", "this", "first", "consider", "what", "the", "user", "asks",
    "then", "check", "whether", "it", "holds", "maybe", "another", "approach", "works", "better",
    "so", "step", "by", "hmm", "okay", "now", "verify", "that", "case",
];

const HANZI: &[&str] = &[
    "我", "们", "的", "模", "型", "延", "迟", "取", "决", "于", "负", "载", "和", "地", "区", "每",
    "个", "服", "务", "商", "输", "出", "速", "度", "不", "同", "用", "户", "等", "待", "第", "一",
    "字", "流", "式", "回", "答", "问", "题", "时", "间", "网", "络", "高", "峰", "比", "较", "好",
];

const HANZI_THINK: &[&str] = &[
    "让", "我", "想", "一", "下", "首", "先", "考", "虑", "这", "个", "问", "题", "然", "后", "检",
    "查", "是", "否", "成", "立", "嗯", "好", "的",
];

/// The text of token `index` (0-based within its kind) of the response identified by `key`.
///
/// English tokens after the first carry a leading space; every so often a token is
/// punctuation. Concatenating tokens `0..n` gives readable-looking filler text.
pub fn token_text(key: u64, kind: TokenKind, index: u32, cjk: bool) -> String {
    let h = mix64(key ^ mix64(u64::from(index) ^ ((kind as u64) << 40)));
    let punct = index > 0 && h.is_multiple_of(11);
    if cjk {
        if punct {
            return if h.is_multiple_of(3) { "。" } else { "，" }.to_string();
        }
        let list = if kind == TokenKind::Content {
            HANZI
        } else {
            HANZI_THINK
        };
        return list[(h >> 8) as usize % list.len()].to_string();
    }
    if punct {
        return if h.is_multiple_of(3) { "." } else { "," }.to_string();
    }
    let list = if kind == TokenKind::Content {
        WORDS
    } else {
        THINK_WORDS
    };
    let word = list[(h >> 8) as usize % list.len()];
    if index == 0 {
        word.to_string()
    } else {
        format!(" {word}")
    }
}

/// Splits `text` into tokens for streaming: each token is a run of whitespace followed by a
/// run of letters and digits, or by one other character (punctuation, a JSON brace, a quote),
/// so `"Answer: 391"` is `["Answer", ":", " 391"]`. Concatenating the tokens gives `text`
/// back; whitespace at the very end is a token of its own.
pub fn split_tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    for c in text.chars() {
        let word = c.is_alphanumeric();
        let space = c.is_whitespace();
        let cur_has_body = !cur.chars().all(char::is_whitespace);
        if cur_has_body && (space || !word || !in_word) {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(c);
        in_word = word;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_tokens_round_trips() {
        assert_eq!(split_tokens("Answer: 391"), ["Answer", ":", " 391"]);
        assert_eq!(split_tokens("1 2 30"), ["1", " 2", " 30"]);
        assert_eq!(
            split_tokens(r#"{"a":1}"#),
            ["{", "\"", "a", "\"", ":", "1", "}"]
        );
        assert_eq!(split_tokens("x\nAnswer"), ["x", "\nAnswer"]);
        assert_eq!(split_tokens("a "), ["a", " "]);
        assert!(split_tokens("").is_empty());
        for t in ["the cat, sat.\nAnswer: {\"k\": [1, 2]}  ", "  lead"] {
            assert_eq!(split_tokens(t).concat(), t);
        }
    }

    #[test]
    fn prompt_tokens_round_up() {
        assert_eq!(estimate_prompt_tokens(0), 0);
        assert_eq!(estimate_prompt_tokens(1), 1);
        assert_eq!(estimate_prompt_tokens(4), 1);
        assert_eq!(estimate_prompt_tokens(5), 2);
        assert_eq!(estimate_prompt_tokens(400), 100);
    }

    #[test]
    fn tokens_are_deterministic_and_non_empty() {
        for i in 0..200 {
            let a = token_text(42, TokenKind::Content, i, false);
            assert_eq!(a, token_text(42, TokenKind::Content, i, false));
            assert!(!a.is_empty());
            assert!(!token_text(42, TokenKind::Reasoning, i, true).is_empty());
        }
        let first: String = (0..20)
            .map(|i| token_text(1, TokenKind::Content, i, false))
            .collect();
        let other: String = (0..20)
            .map(|i| token_text(2, TokenKind::Content, i, false))
            .collect();
        assert_ne!(first, other);
        assert!(!first.starts_with(' '));
    }

    #[test]
    fn cjk_detection() {
        assert!(is_mostly_cjk("请比较这些服务商的延迟"));
        assert!(!is_mostly_cjk("Compare the latency of these providers"));
        assert!(!is_mostly_cjk(""));
    }
}
