//! The store a URL names, refused before any request where object_store
//! could not send one.

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey as Key};

use super::*;

/// object_store 0.14 panicked on the first request to an address it
/// could not parse (`ahead cat` and `ahead mount` died with a backtrace
/// for `AWS_ENDPOINT_URL=localhost:9000`); now the setting that made it
/// is named, and addresses that work still pass.
#[test]
fn an_address_no_request_can_go_to_is_refused_and_its_setting_named() {
    let builder = |settings: &[(Key, &str)]| {
        settings
            .iter()
            .fold(AmazonS3Builder::new(), |b, (k, v)| b.with_config(*k, *v))
    };
    for (settings, names) in [
        (&[(Key::Endpoint, "localhost:9000")][..], "endpoint"),
        (&[(Key::Endpoint, "127.0.0.1:9000")], "endpoint"),
        (&[(Key::Endpoint, "ftp://host")], "endpoint"),
        (&[(Key::Region, "us east")], "region"),
        (&[(Key::Region, "x:y")], "region"),
        (&[(Key::AccessKeyId, "key\n")], "AWS_ACCESS_KEY_ID"),
        (&[(Key::Token, "to\u{7}ken")], "AWS_SESSION_TOKEN"),
        (
            &[
                (Key::Region, "eu-west-1"),
                (Key::VirtualHostedStyleRequest, "true"),
            ],
            "region",
        ),
    ] {
        // Virtual-hosted: a bucket no host name can hold.
        let virtual_hosted = settings
            .iter()
            .any(|(k, _)| *k == Key::VirtualHostedStyleRequest);
        let bucket = if virtual_hosted { "a b" } else { "bkt" };
        let why = check::s3_base(&builder(settings), bucket).expect_err(&format!("{settings:?}"));
        assert!(why.contains(names), "{settings:?}: {why}");
    }
    for settings in [
        &[(Key::Endpoint, "http://127.0.0.1:9000")][..],
        &[(Key::Endpoint, "https://s3.example.com/prefix")],
        &[(Key::Region, "eu-west-1")],
        &[],
        &[
            (Key::Region, "eu-west-1"),
            (Key::VirtualHostedStyleRequest, "true"),
        ],
    ] {
        assert_eq!(
            check::s3_base(&builder(settings), "bkt"),
            Ok(()),
            "{settings:?}"
        );
    }
    // Through the front door: an option over the environment, refused as
    // bad input.
    let options = [("endpoint".to_string(), "localhost:9000".to_string())];
    let e = store_for_url_with("s3://bkt/key", &options).expect_err("refused");
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("AWS_ENDPOINT_URL"), "{e}");
    let options = [("endpoint".to_string(), "http://127.0.0.1:9".to_string())];
    assert!(store_for_url_with("s3://bkt/key", &options).is_ok());
}
