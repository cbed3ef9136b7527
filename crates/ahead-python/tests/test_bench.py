"""`python -m ahead.bench` runs end to end: a short run of a remote and a
local pattern, its table and JSON, every byte it read checked."""

import json
import os
import subprocess
import sys

import pytest

from ahead._serve import ahead_binary


def test_a_short_benchmark_runs_and_checks_its_bytes(tmp_path):
    pytest.importorskip("numpy", reason="numpy is not installed: the benchmark needs it")
    if ahead_binary() is None:
        pytest.skip("no `ahead` binary: the benchmark's server is `ahead bench serve`")
    out = tmp_path / "rows.json"
    r = subprocess.run(
        [sys.executable, "-m", "ahead.bench", "--quick", "--seconds", "0.5", "--object-size", "8",
         "--patterns", "backward,local-random-16k", "--engines", "ahead,open",
         "--json", str(out), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env={**os.environ},
    )
    assert r.returncode == 0, r.stderr
    assert "MB/s" in r.stdout and "fetched" in r.stdout
    rows = json.loads(out.read_text())
    got = {(x["pattern"], x["engine"]) for x in rows}
    assert got == {("backward", "ahead"), ("local-random-16k", "open"), ("local-random-16k", "ahead")}
    for x in rows:
        assert "error" not in x and x["bad"] == 0 and x["mbps"] > 0
    back = next(x for x in rows if x["pattern"] == "backward")
    assert 0.9 <= back["fetched_ratio"] <= 2.0


def test_the_tier_benchmark_runs_and_its_second_epoch_fetches_nothing(tmp_path):
    pytest.importorskip("numpy", reason="numpy is not installed: the benchmark needs it")
    if ahead_binary() is None:
        pytest.skip("no `ahead` binary: the benchmark's server is `ahead bench serve`")
    out = tmp_path / "rows.json"
    r = subprocess.run(
        [sys.executable, "-m", "ahead.bench_tier", "--quick", "--rows", "tier,local,scan",
         "--profile", "lan", "--json", str(out), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env={**os.environ},
    )
    assert r.returncode == 0, r.stderr
    rows = {x["row"]: x for x in json.loads(out.read_text())}
    assert rows["tier epoch 1"]["fetched"] >= 1.0
    # What the server sent: the HEADs' answers, no data.
    assert rows["tier epoch 2"]["fetched"] < 0.001 and rows["tier epoch 3"]["fetched"] < 0.001
    assert rows["local files"]["mb_s"] > 0
    scan = rows["scan: working set's hit ratio"]
    assert scan["hit_ratio"] >= 0.9 and scan["dir_bytes"] <= scan["tier_size"]
