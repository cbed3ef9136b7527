//! An S3 store's settings checked before its first request.

/// Where an S3 store's requests will go, and what their headers carry,
/// checked before the first one: object_store 0.14 panics, in the request
/// that fails, on an address it cannot parse (an endpoint without its
/// scheme, `localhost:9000`, or a region with a space or a colon made
/// one) and on a key or session token with a line break in it.
///
/// The address is the endpoint (`AWS_ENDPOINT_URL`, the `endpoint`
/// option) where one is given, else AWS's for the region, the bucket in
/// its host name for virtual-hosted requests: an `http(s)://` URL with a
/// host, or an error saying which setting made it.
pub(super) fn s3_base(b: &object_store::aws::AmazonS3Builder, bucket: &str) -> Result<(), String> {
    use object_store::aws::AmazonS3ConfigKey as Key;
    let get = |k: Key| b.get_config_value(&k).filter(|v| !v.is_empty());
    // The key and the session token travel in headers, which object_store
    // builds with a panic for a character no header may carry.
    for (key, name) in [
        (
            Key::AccessKeyId,
            "the access key (AWS_ACCESS_KEY_ID, or -o access_key_id=…)",
        ),
        (
            Key::Token,
            "the session token (AWS_SESSION_TOKEN, or -o token=…)",
        ),
    ] {
        if get(key).is_some_and(|v| v.chars().any(|c| !(' '..='~').contains(&c))) {
            return Err(format!(
                "{name} holds a character no HTTP header may carry (a line break, a control character or a non-ASCII one)"
            ));
        }
    }
    let (base, from) = match get(Key::Endpoint) {
        Some(endpoint) => (
            endpoint,
            "the endpoint (AWS_ENDPOINT_URL, or -o endpoint=…)",
        ),
        None => {
            let region = get(Key::Region).unwrap_or_else(|| "us-east-1".into());
            let base = if get(Key::VirtualHostedStyleRequest).as_deref() == Some("true") {
                format!("https://{bucket}.s3.{region}.amazonaws.com")
            } else {
                format!("https://s3.{region}.amazonaws.com/{bucket}")
            };
            (base, "the region (AWS_REGION, or -o region=…)")
        }
    };
    let parsed = url::Url::parse(&base);
    let fine = parsed.as_ref().is_ok_and(|u| {
        matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty())
    });
    if fine {
        return Ok(());
    }
    let why = match parsed {
        Err(e) => e.to_string(),
        Ok(_) => "not http:// or https:// with a host".into(),
    };
    Err(format!(
        "{from} makes the store's address '{base}', which is no URL to send a request to ({why})"
    ))
}
