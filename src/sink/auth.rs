//! `[sinks.*.auth]`: how a sink authenticates. Secrets come from environment variables,
//! never from the file.

use serde::Deserialize;

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Basic authentication user; the password comes from `password_env`.
    pub username: Option<String>,
    /// Environment variable holding the password.
    pub password_env: Option<String>,
    /// Environment variable holding an API key (Elasticsearch's base64 `id:key` form).
    pub api_key_env: Option<String>,
}

/// The credentials a client sends, resolved from the environment.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    Basic { username: String, password: String },
    ApiKey(String),
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("{section}.auth.{field}: environment variable {variable} is not set")]
    MissingVariable {
        section: &'static str,
        field: &'static str,
        variable: String,
    },
    #[error("{0}.auth.username is set but password_env is not")]
    NoPassword(&'static str),
}

impl AuthConfig {
    /// The credentials, or `None` for none; `section` names the config table in errors.
    pub fn credentials(&self, section: &'static str) -> Result<Option<Credentials>, AuthError> {
        let read = |field: &'static str, variable: &String| {
            std::env::var(variable).map_err(|_| AuthError::MissingVariable {
                section,
                field,
                variable: variable.clone(),
            })
        };
        if let Some(variable) = &self.api_key_env {
            return Ok(Some(Credentials::ApiKey(read("api_key_env", variable)?)));
        }
        let Some(username) = &self.username else {
            return Ok(None);
        };
        let variable = self.password_env.as_ref().ok_or(AuthError::NoPassword(section))?;
        Ok(Some(Credentials::Basic {
            username: username.clone(),
            password: read("password_env", variable)?,
        }))
    }
}
