//! The HTTP client of the Elasticsearch REST API (Elasticsearch 7.x, 8.x, OpenSearch).

use std::time::Duration;

use anyhow::{bail, Context};
use elasticsearch::auth::Credentials;
use elasticsearch::cert::{Certificate, CertificateValidation};
use elasticsearch::http::transport::{MultiNodeConnectionPool, SingleNodeConnectionPool, TransportBuilder};
use elasticsearch::http::Url;
use elasticsearch::Elasticsearch;

use super::config::ElasticsearchConfig;

pub fn connect(config: &ElasticsearchConfig) -> anyhow::Result<Elasticsearch> {
    let urls = config
        .urls
        .iter()
        .map(|url| Url::parse(url).with_context(|| format!("sinks.elasticsearch.urls: {url:?} is not a URL")))
        .collect::<anyhow::Result<Vec<Url>>>()?;
    let mut builder = match urls.len() {
        0 => bail!("sinks.elasticsearch.urls is empty"),
        1 => TransportBuilder::new(SingleNodeConnectionPool::new(urls[0].clone())),
        _ => TransportBuilder::new(MultiNodeConnectionPool::round_robin(urls, None)),
    };
    builder = builder
        .timeout(Duration::from_millis(config.request_timeout_ms))
        .disable_proxy();
    if let Some(variable) = &config.api_key_env {
        let key = std::env::var(variable)
            .with_context(|| format!("sinks.elasticsearch.api_key_env: {variable} is not set"))?;
        builder = builder.auth(Credentials::EncodedApiKey(key));
    } else if let Some(username) = &config.username {
        let password = match &config.password_env {
            Some(variable) => std::env::var(variable)
                .with_context(|| format!("sinks.elasticsearch.password_env: {variable} is not set"))?,
            None => bail!("sinks.elasticsearch.username is set but password_env is not"),
        };
        builder = builder.auth(Credentials::Basic(username.clone(), password));
    }
    if config.insecure_skip_verify {
        builder = builder.cert_validation(CertificateValidation::None);
    } else if let Some(path) = &config.ca_certificate {
        let pem = std::fs::read(path).with_context(|| format!("cannot read the CA certificate {}", path.display()))?;
        let certificate = Certificate::from_pem(&pem).context("the CA certificate is not PEM")?;
        builder = builder.cert_validation(CertificateValidation::Full(certificate));
    }
    Ok(Elasticsearch::new(
        builder.build().context("cannot build the Elasticsearch client")?,
    ))
}
