//! The wrong-key check: a random key shaped like the real one (never the real one), sent the
//! provider's auth way, must be answered 401 or 403 quickly.

use latmesh_core::compat::{Evidence, PLAIN_PROMPT, Verdict};
use latmesh_core::prompts::Message;
use latmesh_core::record::Outcome;
use rand::Rng as _;
use rand::distr::Alphanumeric;

use super::context::ProviderContext;
use super::send::{Call, error_words, evidence, is_inconclusive, send};
use crate::probe::ProbeResult;

/// The longest the wrong-key request may take, seconds.
pub const WRONG_KEY_TIMEOUT_S: f64 = 10.0;

/// Length of the random part of a key made up for a provider without one (`sk-` + 48).
const BARE_KEY_LEN: usize = 48;

/// A random key shaped like `real`: the same prefix up to and including its first `-`,
/// then random ASCII letters and digits to the same length (never equal to `real`);
/// without a real key, `sk-` and 48 of them.
pub fn wrong_key(real: Option<&str>) -> String {
    let (prefix, len) = match real {
        Some(k) => {
            let prefix = key_prefix(k);
            (
                prefix,
                k.chars().count().saturating_sub(prefix.chars().count()),
            )
        }
        None => ("sk-", BARE_KEY_LEN),
    };
    loop {
        let tail: String = rand::rng()
            .sample_iter(Alphanumeric)
            .take(len.max(1))
            .map(char::from)
            .collect();
        let key = format!("{prefix}{tail}");
        if Some(key.as_str()) != real {
            return key;
        }
    }
}

/// [`latmesh_core::compat::CompatCheck::WrongKey`]: 401 or 403 passes; a 2xx is *not
/// offered* (the endpoint checks no key); throttling or a connection error is inconclusive;
/// a 5xx, another status or no answer in time fails.
/// The vendor prefix of a key kept in the wrong one: up to three leading segments of 1-5
/// lowercase ASCII letters, each followed by `-` or `_` (`sk-`, `sk-ant-`, `sk-proj-`,
/// `gsk_`); empty for any other key (an uppercase, hex or UUID key keeps nothing of itself).
pub fn key_prefix(key: &str) -> &str {
    let mut end = 0;
    for _ in 0..3 {
        let rest = &key[end..];
        let letters = rest.bytes().take_while(u8::is_ascii_lowercase).count();
        if !(1..=5).contains(&letters) || !matches!(rest.as_bytes().get(letters), Some(b'-' | b'_'))
        {
            break;
        }
        end += letters + 1;
    }
    &key[..end]
}

#[doc = "Judges the wrong-key request `r`."]
pub fn judge_wrong_key(r: &ProbeResult) -> (Verdict, Evidence) {
    let rec = &r.record;
    let o = rec.outcome();
    let status = rec.http_status;
    let field = Some("authorization");
    let words = error_words(rec);
    let took = rec
        .e2e_us
        .or(rec.ttfb_us)
        .map_or(String::new(), |us| format!(" after {} ms", us / 1000));
    match status {
        Some(401 | 403) => (
            Verdict::Pass,
            evidence(status, field, format!("refused{took}: {words}")),
        ),
        Some(s) if (200..300).contains(&s) => (
            Verdict::NotOffered,
            evidence(
                status,
                field,
                format!("answered HTTP {s} to a wrong key: the endpoint checks no key"),
            ),
        ),
        _ if matches!(
            o,
            Outcome::Throttled | Outcome::ConnectionError | Outcome::TimeoutConnect
        ) =>
        {
            (Verdict::Inconclusive, evidence(status, None, words))
        }
        Some(_) => (
            Verdict::Fail,
            evidence(status, field, format!("expected 401 or 403, got {words}")),
        ),
        None if is_inconclusive(o) => (
            Verdict::Fail,
            evidence(
                status,
                field,
                format!("no answer to a wrong key within {WRONG_KEY_TIMEOUT_S} s: {words}"),
            ),
        ),
        None => (Verdict::Fail, evidence(status, field, words)),
    }
}

/// Sends the wrong-key request (callers skip providers whose key is not sent:
/// `auth = "none"`).
pub async fn wrong_key_check(ctx: &ProviderContext<'_>, timeout_s: f64) -> (Verdict, Evidence) {
    let key = wrong_key(ctx.api_key());
    let messages = [Message::new("user", PLAIN_PROMPT)];
    // Streamed, so a server that checks no key answers its headers (200) before it
    // generates; the wait is never shorter than the rule's 10 s (a shorter `timeout_s`
    // would blame the provider for this machine's impatience).
    let mut call = Call::new(&messages, true, 16, timeout_s.max(WRONG_KEY_TIMEOUT_S));
    call.wrong_key = Some(&key);
    call.timeout_is_answer = true;
    let r = send(ctx, &call).await;
    judge_wrong_key(&r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::record::ProbeRecord;

    #[test]
    fn wrong_keys_keep_the_shape_and_never_the_value() {
        let real = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789";
        let k = wrong_key(Some(real));
        assert!(
            k.starts_with("sk-") && k.len() == real.len() && k != real,
            "{k}"
        );
        assert!(!k.contains("abcdefgh"));
        let bare = wrong_key(None);
        assert!(bare.starts_with("sk-") && bare.len() == 51, "{bare}");
        assert!(bare[3..].chars().all(|c| c.is_ascii_alphanumeric()));
        let canary = "CANARYxyz12345678";
        let k = wrong_key(Some(canary));
        assert_eq!(k.len(), canary.len());
        assert_ne!(k, canary);
    }

    #[test]
    fn judged_by_status() {
        let r = |o, s: Option<u16>| ProbeResult {
            record: ProbeRecord {
                outcome: Some(o),
                http_status: s,
                ..ProbeRecord::default()
            },
            ..ProbeResult::default()
        };
        assert_eq!(
            judge_wrong_key(&r(Outcome::Http4xx, Some(401))).0,
            Verdict::Pass
        );
        assert_eq!(
            judge_wrong_key(&r(Outcome::Http4xx, Some(403))).0,
            Verdict::Pass
        );
        assert_eq!(
            judge_wrong_key(&r(Outcome::Ok, Some(200))).0,
            Verdict::NotOffered
        );
        assert_eq!(
            judge_wrong_key(&r(Outcome::Http5xx, Some(500))).0,
            Verdict::Fail
        );
        assert_eq!(
            judge_wrong_key(&r(Outcome::Http4xx, Some(400))).0,
            Verdict::Fail
        );
        assert_eq!(
            judge_wrong_key(&r(Outcome::Throttled, Some(429))).0,
            Verdict::Inconclusive
        );
        assert_eq!(
            judge_wrong_key(&r(Outcome::TimeoutTotal, None)).0,
            Verdict::Fail
        );
        assert_eq!(
            judge_wrong_key(&r(Outcome::ConnectionError, None)).0,
            Verdict::Inconclusive
        );
    }
}
