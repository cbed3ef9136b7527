//! `ahead stress` as a user runs it: a few seconds of mixed reads through a
//! small cache, every byte checked, with and without injected faults.

mod common;

use common::{ahead, gen, ok_json, s, scratch, stderr};

#[test]
fn stress_verifies_every_byte_with_and_without_faults() {
    let dir = scratch();
    let a = gen(dir.path(), "a", 24 << 20);
    let b = gen(dir.path(), "b", (8 << 20) + 12345);
    let base = [
        "stress",
        "--json",
        "--seconds",
        "1.5",
        "--threads",
        "4",
        "--cache",
        "4m",
    ];
    for faults in [None, Some("eio:0.05"), Some("delay:5:0.2")] {
        let mut args: Vec<&str> = base.to_vec();
        if let Some(f) = faults {
            args.extend(["--faults", f]);
        }
        args.extend([s(&a), s(&b)]);
        let v = ok_json(&ahead(&args));
        assert_eq!(v["passed"], true, "{faults:?}: {v}");
        assert_eq!(v["mismatches"], 0, "{v}");
        assert_eq!(v["errors"], 0, "{v}");
        assert!(v["bytes_verified"].as_u64().unwrap() > 16 << 20, "{v}");
        assert!(
            v["peak_cache_bytes"].as_u64().unwrap() <= v["cache_budget_bytes"].as_u64().unwrap(),
            "{v}"
        );
        if faults == Some("eio:0.05") {
            assert!(v["injected_errors"].as_u64().unwrap() > 0, "{v}");
        }
    }
}

#[test]
fn stress_refuses_bad_input_clearly() {
    let dir = scratch();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let good = gen(dir.path(), "g", 1 << 20);
    for (args, code) in [
        (vec!["stress", "/nonexistent/file"], 1),
        (vec!["stress", s(&empty)], 1),
        (vec!["stress", s(dir.path())], 1),
        (vec!["stress", "--faults", "bogus", s(&good)], 2),
        (vec!["stress", "--seconds", "0", s(&good)], 1),
    ] {
        let o = ahead(&args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
    }
}
