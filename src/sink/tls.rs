//! `[sinks.*.tls]`: which server certificates a sink's HTTPS client trusts.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of the CA that signed the servers' certificates.
    pub ca_certificate: Option<PathBuf>,
    /// Accept any certificate (development only).
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// What a client trusts, read once from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// The system's roots.
    System,
    /// This CA (PEM), besides nothing else.
    Ca(Vec<u8>),
    /// Anything (`insecure_skip_verify`).
    Any,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the CA certificate {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the CA certificate {0} is not PEM")]
    NotPem(PathBuf),
}

impl TlsConfig {
    pub fn trust(&self) -> Result<Trust, TlsError> {
        if self.insecure_skip_verify {
            return Ok(Trust::Any);
        }
        let Some(path) = &self.ca_certificate else {
            return Ok(Trust::System);
        };
        let pem = std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.clone(),
            source,
        })?;
        if !pem.windows(11).any(|window| window == b"-----BEGIN ") {
            return Err(TlsError::NotPem(path.clone()));
        }
        Ok(Trust::Ca(pem))
    }
}
