use std::path::PathBuf;

/// Why the harness could not start or drive a part.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("generating certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("{what} did not become ready within {seconds}s; last lines of {}:\n{log}", log_path.display())]
    NotReady {
        what: String,
        seconds: u64,
        log_path: PathBuf,
        log: String,
    },
    #[error("{0}")]
    Other(String),
}

pub(crate) trait IoContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, HarnessError>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, HarnessError> {
        self.map_err(|source| HarnessError::Io {
            what: what(),
            source,
        })
    }
}

pub(crate) trait KubeContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, HarnessError>;
}

impl<T> KubeContext<T> for kube::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, HarnessError> {
        self.map_err(|source| HarnessError::Kube {
            what: what(),
            source,
        })
    }
}
