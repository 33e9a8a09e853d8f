//! The simulated prompt cache of a provider with
//! [`prompt_cache`](crate::ProviderProfile::prompt_cache): it remembers, bounded, the hash of
//! the first [`CACHE_PREFIX_BYTES`] of each long request's prompt text, and a later request
//! whose prefix is remembered reports that prefix's tokens as cached (and prefills only the
//! rest).

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use crate::text;

/// Bytes of prompt text (system prompt and messages, as
/// [`SimRequest::prompt_text`](crate::request::SimRequest::prompt_text) joins them) hashed
/// as the cache key, cut back to a character boundary.
pub const CACHE_PREFIX_BYTES: usize = 4096;

/// Fewest estimated prompt tokens a request needs for its prefix to be cached (as real
/// providers cache prefixes of 1,024 tokens or more).
pub const CACHE_MIN_PROMPT_TOKENS: u32 = 1024;

/// Prefixes remembered per provider; the oldest is forgotten first.
pub const CACHE_ENTRIES: usize = 1024;

/// One provider's remembered prefixes (one per served router, shared by every region).
#[derive(Debug, Default)]
pub struct PromptCache {
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    seen: HashSet<u64>,
    order: VecDeque<u64>,
}

/// The first [`CACHE_PREFIX_BYTES`] of `prompt`, cut back to a character boundary.
fn prefix(prompt: &str) -> &str {
    let mut end = prompt.len().min(CACHE_PREFIX_BYTES);
    while !prompt.is_char_boundary(end) {
        end -= 1;
    }
    &prompt[..end]
}

impl PromptCache {
    /// Looks up and remembers the prefix of a request with `prompt` text and `prompt_tokens`
    /// tokens: the cached tokens it reports (the prefix's tokens, as `count` counts a text,
    /// when the prefix was remembered, else 0). Requests under [`CACHE_MIN_PROMPT_TOKENS`]
    /// are neither cached nor remembered.
    pub fn lookup(&self, prompt: &str, prompt_tokens: u32, count: impl Fn(&str) -> u32) -> u32 {
        if prompt_tokens < CACHE_MIN_PROMPT_TOKENS {
            return 0;
        }
        let p = prefix(prompt);
        let key = text::fnv1a64(p.as_bytes());
        let mut e = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if e.seen.contains(&key) {
            return count(p).min(prompt_tokens);
        }
        if e.order.len() >= CACHE_ENTRIES
            && let Some(old) = e.order.pop_front()
        {
            e.seen.remove(&old);
        }
        e.seen.insert(key);
        e.order.push_back(key);
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(t: &str) -> u32 {
        text::estimate_prompt_tokens(t.chars().count())
    }

    #[test]
    fn long_prefixes_hit_on_the_second_request_and_the_oldest_is_forgotten() {
        let c = PromptCache::default();
        let long = "a".repeat(5000);
        assert_eq!(c.lookup(&long, 1250, chars), 0);
        assert_eq!(c.lookup(&long, 1250, chars), 1024);
        // Same first 4 KiB, another tail: a hit.
        assert_eq!(c.lookup(&format!("{long}tail"), 1251, chars), 1024);
        // Short prompts are never cached.
        assert_eq!(c.lookup("short", 2, chars), 0);
        assert_eq!(c.lookup("short", 2, chars), 0);
        // Multi-byte text is cut on a character boundary.
        let wide = "é".repeat(3000);
        assert_eq!(c.lookup(&wide, 1500, chars), 0);
        assert_eq!(c.lookup(&wide, 1500, chars), 512);
        for i in 0..CACHE_ENTRIES {
            c.lookup(&format!("{i:08}{long}"), 1250, chars);
        }
        assert_eq!(c.lookup(&long, 1250, chars), 0, "evicted");
    }
}
