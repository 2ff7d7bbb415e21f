"""The S3 servers the benchmarks run against: a moto server and an s3rver, each its own process.

Each server listens on a free loopback port; :func:`start` polls it until it answers (no fixed
sleeps) and :meth:`Server.stop` ends exactly the process it started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
S3RVER_JS = HERE / "node_modules" / "s3rver" / "bin" / "s3rver.js"
REGION = "us-east-1"
STARTUP_TIMEOUT = 60.0

# The credentials each server accepts (moto accepts any; s3rver only its own pair).
CREDENTIALS = {
    "moto": ("testing", "testing"),
    "s3rver": ("S3RVER", "S3RVER"),
}


@dataclass
class Server:
    """A running server process and how to reach it."""

    name: str
    endpoint: str
    proc: subprocess.Popen[bytes]
    workdir: str | None = None
    log: Path | None = None
    pid: int = field(init=False)

    def __post_init__(self) -> None:
        self.pid = self.proc.pid

    @property
    def key_id(self) -> str:
        return CREDENTIALS[self.name][0]

    @property
    def secret(self) -> str:
        return CREDENTIALS[self.name][1]

    def rss_bytes(self) -> int | None:
        """The server's resident memory, for the record (None where /proc is missing)."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def cpu_seconds(self) -> float | None:
        """CPU seconds (user + sys) the server process has used so far."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def stop(self) -> None:
        """Terminate the server process (kill it if it does not exit) and remove its data."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            resp.read()
        return True
    except urllib.error.HTTPError:
        return True  # an HTTP error is an answer: the server is up
    except OSError:
        return False


def _wait_until_up(server: Server, probe: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not _answers(probe):
        if server.proc.poll() is not None:
            tail = server.log.read_text()[-2000:] if server.log and server.log.exists() else ""
            raise RuntimeError(
                f"{server.name} exited at startup with code {server.proc.returncode}\n{tail}"
            )
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"{server.name} did not answer within {STARTUP_TIMEOUT:.0f} s")
        time.sleep(0.05)  # polling interval while waiting for the port to answer


def moto_command(port: int, python: str = sys.executable) -> list[str]:
    """moto's server as a module of ``python`` (the project venv's, which has moto[server])."""
    return [python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]


def start_moto(python: str = sys.executable) -> Server:
    """Start a moto S3 server on a free loopback port and wait until it answers."""
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="astore-bench-moto-")
    log = Path(workdir) / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            moto_command(port, python),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
        )
    server = Server("moto", f"http://127.0.0.1:{port}", proc, workdir=workdir, log=log)
    _wait_until_up(server, f"{server.endpoint}/moto-api/data.json")
    return server


def start_s3rver(node: str = "node") -> Server:
    """Start s3rver (from ``benchmarks/node_modules``) on a free loopback port."""
    if not S3RVER_JS.exists():
        raise RuntimeError(f"{S3RVER_JS} is missing: run 'npm ci' in {HERE}")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="astore-bench-s3rver-")
    data = Path(workdir) / "data"
    data.mkdir()
    log = Path(workdir) / "s3rver.log"
    env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
    cmd = [node, str(S3RVER_JS), "-d", str(data), "-a", "127.0.0.1", "-p", str(port), "--silent"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    server = Server("s3rver", f"http://127.0.0.1:{port}", proc, workdir=workdir, log=log)
    _wait_until_up(server, f"{server.endpoint}/")
    return server


def create_bucket(server: Server, bucket: str) -> None:
    """Create ``bucket`` with a plain path-style PUT (neither server checks the signature)."""
    req = urllib.request.Request(f"{server.endpoint}/{bucket}", method="PUT", data=b"")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # already exists
            raise


@contextlib.contextmanager
def running(kind: str) -> Iterator[Server]:
    """Start the server ``kind`` ("moto" or "s3rver") for the block, stop it afterwards."""
    server = start_moto() if kind == "moto" else start_s3rver()
    try:
        yield server
    finally:
        server.stop()
