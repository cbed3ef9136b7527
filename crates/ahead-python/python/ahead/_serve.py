"""`ahead bench serve` in a child process, for the package's tests and
``python -m ahead.bench``: the embedded S3 server of ahead's Rust tests,
optionally behind a network of known latency and bandwidth. Not part of
the package's API."""

import json
import os
import pathlib
import shutil
import subprocess

# The checkout this package was built from, when it was (maturin develop).
_CHECKOUT = pathlib.Path(__file__).resolve().parents[4]


def ahead_binary():
    """The `ahead` CLI: $AHEAD_BIN, else the newest one built in this
    checkout, else one on PATH; None if there is none."""
    env = os.environ.get("AHEAD_BIN")
    if env:
        return env
    built = [_CHECKOUT / "target" / k / "ahead" for k in ("release", "debug")]
    built = [p for p in built if p.is_file()]
    if built:
        return str(max(built, key=lambda p: p.stat().st_mtime))
    return shutil.which("ahead")


class S3Server:
    """`ahead bench serve` in a child process: an S3 server with one
    bucket, and optionally a shaped network in front of it."""

    def __init__(self, binary, root, profile="none"):
        self.proc = subprocess.Popen(
            [binary, "bench", "serve", "--dir", str(root), "--profile", profile],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{binary} bench serve exited with {self.proc.wait()}")
        self.hello = json.loads(line)
        self.root = pathlib.Path(root)
        self.bucket = self.hello["bucket"]
        self.endpoint = self.hello["endpoint"]

    def _ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def put(self, key, data):
        """Stores ``data`` (bytes) as ``key``; its URL."""
        src = self.root.parent / "put.tmp"
        src.write_bytes(data)
        self.put_file(key, src)
        src.unlink()
        return self.url(key)

    def put_file(self, key, path):
        self._ask(f"put {key} {path}")
        return self.url(key)

    def bytes_down(self):
        return self._ask("bytes")["bytes_down"]

    def fail(self, share):
        self._ask(f"fail {share}")

    def url(self, key):
        return f"s3://{self.bucket}/{key}"

    def options(self):
        """object_store's options for ahead.open."""
        return {
            "endpoint": self.endpoint,
            "access_key_id": self.hello["access_key"],
            "secret_access_key": self.hello["secret_key"],
            "region": self.hello["region"],
            "allow_http": "true",
        }

    def s3fs_options(self):
        """The same server as s3fs (and fsspec's ``s3={...}``) is told it."""
        return {
            "endpoint_url": self.endpoint,
            "key": self.hello["access_key"],
            "secret": self.hello["secret_key"],
            "client_kwargs": {"region_name": self.hello["region"]},
        }

    def env(self):
        """The AWS_* environment that points any S3 client here."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.hello["access_key"],
            "AWS_SECRET_ACCESS_KEY": self.hello["secret_key"],
            "AWS_REGION": self.hello["region"],
            "AWS_ALLOW_HTTP": "true",
        }

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
