//! The storage server's client is `gantry_api::storage::client`, shared with the unpack
//! program; its failures are the provisioner's `StorageFailed`.

pub use gantry_api::storage::client::{ClientError, StorageClient, Token};

use crate::error::Error;

impl From<ClientError> for Error {
    fn from(error: ClientError) -> Self {
        Error::Storage(error.0)
    }
}
