//! object_store clients of an S3 endpoint given by address and
//! credentials: the embedded server's ([`crate::s3`]) or another's (Ceph's
//! RADOS Gateway, MinIO). Built with or without the server.

use std::sync::Arc;

/// The access key and secret the server takes (any other is refused).
pub const ACCESS_KEY: &str = "ahead-test";
/// See [`ACCESS_KEY`].
pub const SECRET_KEY: &str = "ahead-test-secret";

/// An object_store client of `bucket` at `endpoint` (this server's, or a
/// proxy's in front of it) with the server's credentials.
pub fn client(endpoint: &str, bucket: &str) -> std::io::Result<Arc<dyn object_store::ObjectStore>> {
    client_as(endpoint, bucket, ACCESS_KEY, SECRET_KEY)
}

/// An object_store client of `bucket` at the plain-HTTP S3 `endpoint`
/// with these credentials (another server's: Ceph's RADOS Gateway, MinIO).
pub fn client_as(
    endpoint: &str,
    bucket: &str,
    key: &str,
    secret: &str,
) -> std::io::Result<Arc<dyn object_store::ObjectStore>> {
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_bucket_name(bucket)
        .with_access_key_id(key)
        .with_secret_access_key(secret)
        .with_region("us-east-1")
        .with_allow_http(true)
        .build()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(Arc::new(s3))
}
