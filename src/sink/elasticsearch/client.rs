//! The HTTP client of the Elasticsearch REST API (Elasticsearch 7.x, 8.x, OpenSearch).

use std::time::Duration;

use elasticsearch::auth::Credentials as EsCredentials;
use elasticsearch::cert::{Certificate, CertificateValidation};
use elasticsearch::http::transport::{MultiNodeConnectionPool, SingleNodeConnectionPool, TransportBuilder};
use elasticsearch::http::Url;
use elasticsearch::Elasticsearch;

use super::config::{ElasticsearchConfig, SECTION};
use crate::sink::auth::Credentials;
use crate::sink::contract::SinkError;
use crate::sink::tls::Trust;

pub fn connect(config: &ElasticsearchConfig) -> Result<Elasticsearch, SinkError> {
    let urls = config
        .urls
        .iter()
        .map(|url| Url::parse(url).map_err(|_| SinkError::Config(format!("{SECTION}.urls: {url:?} is not a URL"))))
        .collect::<Result<Vec<Url>, SinkError>>()?;
    let mut builder = match urls.len() {
        0 => return Err(SinkError::Config(format!("{SECTION}.urls is empty"))),
        1 => TransportBuilder::new(SingleNodeConnectionPool::new(urls[0].clone())),
        _ => TransportBuilder::new(MultiNodeConnectionPool::round_robin(urls, None)),
    };
    builder = builder
        .timeout(Duration::from_millis(config.request_timeout_ms))
        .disable_proxy();
    builder = match config.client.auth.credentials(SECTION)? {
        None => builder,
        Some(Credentials::ApiKey(key)) => builder.auth(EsCredentials::EncodedApiKey(key)),
        Some(Credentials::Basic { username, password }) => builder.auth(EsCredentials::Basic(username, password)),
    };
    builder = match config.client.tls.trust()? {
        Trust::System => builder,
        Trust::Any => builder.cert_validation(CertificateValidation::None),
        Trust::Ca(pem) => builder.cert_validation(CertificateValidation::Full(
            Certificate::from_pem(&pem).map_err(|error| SinkError::Config(error.to_string()))?,
        )),
    };
    let transport = builder
        .build()
        .map_err(|error| SinkError::Config(format!("cannot build the Elasticsearch client: {error}")))?;
    Ok(Elasticsearch::new(transport))
}
