//! Coordinator addresses as URLs.

/// A coordinator address as a URL: `host:port` gets `http://` in front; URLs are kept.
pub fn coordinator_url(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

/// A coordinator URL's port, when it has one, is a number: `http::Uri` takes
/// `host:notaport` and connects to port 80 (then "connection refused" hides the typo).
///
/// # Errors
/// The port is not a number in 0..=65535 (the message quotes the URL and the port).
pub(crate) fn check_port(url: &str) -> anyhow::Result<()> {
    let authority = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', '?'])
        .next()
        .unwrap_or_default();
    let host_end = authority.rfind(']').map_or(0, |i| i + 1); // [::1]:port
    if let Some((_, port)) = authority[host_end..].rsplit_once(':') {
        anyhow::ensure!(
            port.parse::<u16>().is_ok(),
            "bad coordinator URL {url:?}: the port {port:?} is not a number in 0..=65535"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_address_means_http() {
        assert_eq!(coordinator_url("127.0.0.1:7700"), "http://127.0.0.1:7700");
        assert_eq!(coordinator_url("https://c.example"), "https://c.example");
    }

    #[test]
    fn a_coordinator_url_s_port_must_be_a_number() {
        for ok in [
            "http://127.0.0.1:7700",
            "https://coord.example:443/",
            "http://[::1]:7700",
            "http://[::1]",
            "https://coord.example",
        ] {
            assert!(check_port(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://127.0.0.1:notaport",
            "http://h:70000",
            "http://[::1]:x/",
        ] {
            let e = check_port(bad).unwrap_err().to_string();
            assert!(e.contains("is not a number"), "{bad}: {e}");
        }
    }
}
