//! The API server's errors, read one way everywhere.

/// Whether the API server answered 404 Not Found.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Whether the API server answered 403 Forbidden.
pub fn is_forbidden(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 403)
}

/// The API server's message for an error, without kube's wrapping.
pub fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.reason.is_empty() => status.message.clone(),
        kube::Error::Api(status) => format!("{} ({})", status.message, status.reason),
        other => other.to_string(),
    }
}

/// Whether the API server answered 422 Unprocessable Entity: it refuses the object as invalid.
pub fn is_invalid(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 422)
}
