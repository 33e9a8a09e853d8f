//! TLS set-up the user controls, and what to tell them when a handshake fails: CA files (the
//! coordinator's `--ca-file`, the providers' `--provider-ca-file`) and hints for the two
//! usual mistakes (`https://` to a plain-HTTP server; a certificate no trusted CA signed).

use std::path::Path;

use anyhow::Context as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// The PEM text of the CA file `path`.
///
/// # Errors
/// The file cannot be read, holds no PEM certificate, or a certificate block that does not
/// decode (the message names the file).
pub fn read_ca_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    let pem = std::fs::read(path)
        .with_context(|| format!("cannot read the CA file {}", path.display()))?;
    let mut certificates = 0;
    for (i, c) in CertificateDer::pem_slice_iter(&pem).enumerate() {
        c.map_err(|e| {
            anyhow::anyhow!(
                "the CA file {}: certificate {} does not decode: {e}",
                path.display(),
                i + 1
            )
        })?;
        certificates += 1;
    }
    anyhow::ensure!(
        certificates > 0,
        "the CA file {} holds no PEM certificate",
        path.display()
    );
    Ok(pem)
}

/// What went wrong in a TLS handshake, as far as a user can act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsProblem {
    /// The server did not answer in TLS (a plain-HTTP server behind an `https://` URL).
    NotTls,
    /// The server's certificate is not signed by a trusted CA (self-signed, a private CA).
    Untrusted,
}

impl TlsProblem {
    /// The problem behind `e`, found anywhere in its chain (also inside an `io::Error`, where
    /// tokio-rustls puts rustls' error).
    pub fn of(e: &(dyn std::error::Error + 'static)) -> Option<TlsProblem> {
        let mut cur = Some(e);
        while let Some(err) = cur {
            let tls = err.downcast_ref::<rustls::Error>().or_else(|| {
                err.downcast_ref::<std::io::Error>()
                    .and_then(|io| io.get_ref())
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            });
            match tls {
                Some(rustls::Error::InvalidCertificate(_)) => return Some(TlsProblem::Untrusted),
                Some(rustls::Error::InvalidMessage(_)) => return Some(TlsProblem::NotTls),
                _ => {}
            }
            cur = err.source();
        }
        None
    }

    /// The hint, as a parenthesis to append; `ca_flag` says how to trust a private CA.
    pub fn hint(self, ca_flag: &str) -> String {
        match self {
            TlsProblem::NotTls => {
                " (the server did not answer in TLS: is it plain http? then use http://)".into()
            }
            TlsProblem::Untrusted => format!(
                " (the server's certificate is not signed by a trusted CA: for a private CA, \
                 give its PEM with {ca_flag})"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_must_hold_a_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = read_ca_file(&junk).unwrap_err().to_string();
        assert!(e.ends_with("junk.pem holds no PEM certificate"), "{e}");
        let e = read_ca_file(&dir.path().join("gone.pem")).unwrap_err();
        assert!(
            format!("{e:#}").contains("cannot read the CA file"),
            "{e:#}"
        );
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let garbled = dir.path().join("garbled.pem");
        std::fs::write(
            &garbled,
            "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = read_ca_file(&garbled).unwrap_err().to_string();
        assert!(
            e.contains("garbled.pem: certificate 1 does not decode"),
            "{e}"
        );
        let good = dir.path().join("ca.pem");
        std::fs::write(&good, ck.cert.pem()).unwrap();
        assert_eq!(read_ca_file(&good).unwrap(), ck.cert.pem().into_bytes());
    }

    #[test]
    fn the_problem_is_found_inside_an_io_error_anywhere_in_the_chain() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let wrapped = anyhow::Error::new(io).context("transport error");
        assert_eq!(
            TlsProblem::of(wrapped.as_ref()),
            Some(TlsProblem::Untrusted)
        );
        let plain = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        assert_eq!(TlsProblem::of(&plain), Some(TlsProblem::NotTls));
        assert_eq!(TlsProblem::of(&std::io::Error::other("x")), None);
    }
}
