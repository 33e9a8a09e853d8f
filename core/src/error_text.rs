//! One line for an error and its causes, as people read it.

/// `e` with its causes, joined by `: `, each said once: a cause whose text is already in the
/// line is left out. Libraries often repeat their cause in their own message (hyper-util's
/// `tcp connect error` twice behind tonic's `transport error`), which `{:#}` would print
/// every time.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !msg.contains(&t) {
            msg.push_str(": ");
            msg.push_str(&t);
        }
        src = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn a_repeated_cause_is_said_once() {
        let e = E(
            "transport error",
            Some(Box::new(E(
                "tcp connect error",
                Some(Box::new(E(
                    "tcp connect error",
                    Some(Box::new(E("Connection refused (os error 111)", None))),
                ))),
            ))),
        );
        assert_eq!(
            chain(&e),
            "transport error: tcp connect error: Connection refused (os error 111)"
        );
        assert_eq!(chain(&E("alone", None)), "alone");
    }
}
