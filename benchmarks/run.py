"""Run astore's benchmarks against its peers, print the table and rewrite docs/benchmarks.md.

Usage (from the repository root; ``make bench`` / ``make bench-quick`` do exactly this)::

    .venv/bin/python benchmarks/run.py            # full: 1 GiB, 2,000 objects, 3 repetitions
    .venv/bin/python benchmarks/run.py --quick    # 256 MiB, 500 objects, 1 repetition

It creates the peers' venv (``benchmarks/.peers``, from ``requirements-peers.txt``) and
installs s3rver (``npm ci`` in ``benchmarks/``) when they are missing, starts its own moto and
s3rver processes on free loopback ports, runs every client in its own subprocess (one JSON
line each, see ``clients/_common.py``), and stops the servers. The full run rewrites
``docs/benchmarks.md``; a quick run writes ``build/bench/benchmarks-quick.md``. Raw results
go to ``build/bench/results-{full,quick}.json``. Nothing here is a test: no number fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import report  # noqa: E402 - benchmarks/ is not a package; its modules sit beside this one
import servers  # noqa: E402

MiB = 1024 * 1024
GiB = 1024 * MiB
PEERS = HERE / ".peers"
PEERS_PY = PEERS / "bin" / "python"
REQUIREMENTS = HERE / "requirements-peers.txt"
PROJECT_PY = Path(sys.executable)
BUCKET = "astore-bench"
JOB_TIMEOUT = 900.0

# client -> (module, venv)
CLIENTS: dict[str, tuple[str, str]] = {
    "astore": ("clients.astore_client", "project"),
    "aiobotocore": ("clients.aiobotocore_client", "project"),
    "aioboto3": ("clients.aioboto3_client", "peers"),
    "boto3": ("clients.boto3_client", "peers"),
    "obstore": ("clients.obstore_client", "peers"),
    "s3fs": ("clients.s3fs_client", "peers"),
}
PEER_NAMES = ("aiobotocore", "aioboto3", "boto3", "obstore", "s3fs")


@dataclass(frozen=True)
class Sizes:
    """How big one run is."""

    big: int
    part_size: int
    concurrency: int
    objects: int
    object_size: int
    small_concurrency: int
    reps: int
    tree_files: int
    tree_file_size: int


FULL = Sizes(
    big=1 * GiB,
    part_size=8 * MiB,
    concurrency=8,
    objects=2000,
    object_size=4096,
    small_concurrency=32,
    reps=3,
    tree_files=1000,
    tree_file_size=64 * 1024,
)
QUICK = replace(FULL, big=256 * MiB, objects=500, reps=1, tree_files=250)


@dataclass
class Job:
    """One client (or command) running one workload on one server."""

    server: str  # "moto", "s3rver" or "local"
    workload: str  # upload, download, small, stream, local-file, local-tree
    client: str
    variant: str = "default"
    key: str = "bench/upload"
    reps: int | None = None
    seed: bool = False  # writes the object later jobs on this server read: always run
    hidden: bool = False  # setup only: run, but not in the table
    skip: str = ""  # why this job is not run (shown in the table)
    overrides: dict[str, int] = field(default_factory=dict)  # e.g. {"size": ...}

    @property
    def label(self) -> str:
        return self.client if self.variant == "default" else f"{self.client} ({self.variant})"


@dataclass
class Outcome:
    job: Job
    result: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    server_cpu_s: float | None = None
    elapsed_s: float = 0.0


MOTO_RANGED_SKIP = (
    "not run on moto: moto reads the whole object for every ranged GET "
    "(object size / part size full-object reads); see s3rver"
)


def plan() -> list[Job]:
    """Every job of a run, in order (servers are started once each)."""
    jobs: list[Job] = [
        # moto answers its first multipart and first small requests slowly (lazy imports):
        # warm it up so that no measured client pays for that.
        Job(
            "moto",
            "stream",
            "astore",
            key="warm/up",
            reps=1,
            seed=True,
            hidden=True,
            overrides={"size": 3 * FULL.part_size},
        ),
        # moto: uploads first; astore's upload is also the object the downloads read.
        Job("moto", "upload", "astore", key="bench/seed", seed=True),
        Job("moto", "upload", "astore", "no-checksum"),
        *(Job("moto", "upload", c) for c in PEER_NAMES),
        Job("moto", "download", "astore", "single-stream", key="bench/seed"),
        Job("moto", "download", "astore", key="bench/seed", skip=MOTO_RANGED_SKIP),
        Job("moto", "download", "aiobotocore", key="bench/seed"),
        Job("moto", "download", "obstore", key="bench/seed"),
        *(
            Job("moto", "download", c, key="bench/seed", skip=MOTO_RANGED_SKIP)
            for c in ("aioboto3", "boto3", "s3fs")
        ),
        Job("moto", "download", "obstore", "ranged", key="bench/seed", skip=MOTO_RANGED_SKIP),
        # The memory goal is astore's; the peers' streamed uploads are one run each, for
        # context (three would not fit the run's time budget on moto).
        Job("moto", "stream", "astore", key="bench/stream"),
        Job("moto", "stream", "obstore", key="bench/stream", reps=1),
        Job("moto", "stream", "aiobotocore", key="bench/stream", reps=1),
        # s3rver: throughput of downloads (it has no conditional writes, no multipart abort).
        # Small objects on s3rver: moto closes the connection after every response and
        # serves ~120 requests/s, which would make this workload alone outlast the run budget.
        *(Job("s3rver", "small", c) for c in CLIENTS),
        Job("s3rver", "upload", "astore", key="bench/seed", reps=1, seed=True, hidden=True),
        Job("s3rver", "download", "astore", key="bench/seed"),
        Job("s3rver", "download", "astore", "single-stream", key="bench/seed"),
        *(Job("s3rver", "download", c, key="bench/seed") for c in PEER_NAMES),
        Job("s3rver", "download", "obstore", "ranged", key="bench/seed"),
        # the local store: astore cp against cp
        Job("local", "local-file", "cp"),
        Job("local", "local-file", "astore cp"),
        Job("local", "local-tree", "cp -r"),
        Job("local", "local-tree", "astore cp -r"),
    ]
    return jobs


# -- setup ---------------------------------------------------------------------------------


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ensure_peers() -> None:
    """Create ``benchmarks/.peers`` from requirements-peers.txt unless it is up to date."""
    stamp = PEERS / ".installed"
    if stamp.exists() and stamp.stat().st_mtime >= REQUIREMENTS.stat().st_mtime:
        return
    _log(f"creating the peers' venv in {PEERS} ...")
    uv = PROJECT_PY.parent / "uv"
    base = getattr(sys, "_base_executable", sys.executable)
    if uv.exists():
        subprocess.run(
            [str(uv), "venv", "--quiet", "--allow-existing", "--python", base, str(PEERS)],
            check=True,
        )
        install = [str(uv), "pip", "install", "--quiet", "--python", str(PEERS_PY)]
    else:
        subprocess.run([base, "-m", "venv", str(PEERS)], check=True)
        install = [str(PEERS_PY), "-m", "pip", "install", "--quiet"]
    subprocess.run([*install, "-r", str(REQUIREMENTS)], check=True)
    stamp.touch()


def ensure_s3rver() -> None:
    """Install s3rver 3.7.1 into ``benchmarks/node_modules`` unless it is there."""
    if servers.S3RVER_JS.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm is needed to install s3rver (Node 20)")
    _log("installing s3rver with npm ...")
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True)


def make_data(workdir: Path, sizes: Sizes) -> dict[str, Path]:
    """The source file of ``sizes.big`` random bytes and a folder of small files."""
    big = workdir / "big.bin"
    block = os.urandom(8 * MiB)
    with big.open("wb") as f:
        written = 0
        while written < sizes.big:
            n = min(len(block), sizes.big - written)
            # Vary each block so no layer can deduplicate or compress the stream.
            f.write(os.urandom(16) + block[16:n] if n > 16 else block[:n])
            written += n
    tree = workdir / "tree"
    for i in range(sizes.tree_files):
        sub = tree / f"d{i % 10}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i:05d}.bin").write_bytes(os.urandom(sizes.tree_file_size))
    return {"big": big, "tree": tree, "download": workdir / "download.bin"}


# -- running one job -----------------------------------------------------------------------


def _client_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        PYTHONPATH=str(HERE),
        # No AWS configuration of this machine may change what a client does.
        AWS_CONFIG_FILE=str(workdir / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(workdir / "no-aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def _wait4(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, Any]:
    """Wait for ``proc`` and return ``(status, rusage)`` of exactly that child."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage
        if time.monotonic() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(0.01)  # polling a child for exit; not synchronising anything


def run_client(job: Job, server: servers.Server, sizes: Sizes, data: dict[str, Path]) -> Outcome:
    """Run one client subprocess; its JSON line is the result."""
    module, venv = CLIENTS[job.client]
    python = PROJECT_PY if venv == "project" else PEERS_PY
    cmd = [
        str(python),
        "-m",
        module,
        f"--endpoint={server.endpoint}",
        f"--bucket={BUCKET}",
        f"--region={servers.REGION}",
        f"--key-id={server.key_id}",
        f"--secret={server.secret}",
        f"--workload={job.workload}",
        f"--variant={job.variant}",
        f"--key={job.key}",
        f"--file={data['big']}",
        f"--dest={data['download']}",
        f"--size={job.overrides.get('size', sizes.big)}",
        f"--part-size={sizes.part_size}",
        f"--concurrency={sizes.concurrency}",
        f"--objects={job.overrides.get('objects', sizes.objects)}",
        f"--object-size={sizes.object_size}",
        f"--small-concurrency={sizes.small_concurrency}",
        f"--prefix=small-{server.name}",
        f"--reps={job.reps or sizes.reps}",
    ]
    outcome = Outcome(job)
    cpu0 = server.cpu_seconds()
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            env=_client_env(data["big"].parent),
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT,
            cwd=data["big"].parent,
        )
    except subprocess.TimeoutExpired:
        outcome.error = f"timed out after {JOB_TIMEOUT:.0f} s"
        return outcome
    finally:
        outcome.elapsed_s = time.perf_counter() - t0
        cpu1 = server.cpu_seconds()
        if cpu0 is not None and cpu1 is not None:
            outcome.server_cpu_s = cpu1 - cpu0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        outcome.error = f"exit {proc.returncode}: {tail[:300]}"
        return outcome
    outcome.result = json.loads(lines[-1])
    return outcome


def _measured_command(cmd: list[str]) -> dict[str, Any]:
    """Run a command; wall time, CPU and peak RSS of it (its children included)."""
    os.sync()  # earlier writes are flushed before the clock starts, not during the run
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    code, usage = _wait4(proc, JOB_TIMEOUT)
    wall = time.perf_counter() - t0
    if code != 0:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise RuntimeError(f"{' '.join(cmd)} exited {code}: {err.strip()[-300:]}")
    if proc.stderr:
        proc.stderr.close()
    return {
        "wall_s": wall,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        # ru_maxrss of a child counts the pages of the forked orchestrator before exec:
        # not the command's own peak, so none is reported.
        "peak_rss": None,
        "idle_rss": None,
        "lag_max_ms": None,
        "lag_p99_ms": None,
    }


def _tree_stats(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file() and ".astore" not in p.parts]
    return len(files), sum(p.stat().st_size for p in files)


def run_local(job: Job, sizes: Sizes, data: dict[str, Path]) -> Outcome:
    """``astore cp`` into a local store (``file://``) against ``cp``, on the same files."""
    outcome = Outcome(job)
    astore_cli = str(PROJECT_PY.parent / "astore")
    work = data["big"].parent
    dst = work / "local-dst"
    samples = []
    t0 = time.perf_counter()
    try:
        if job.workload == "local-file":
            src, nbytes, nfiles = data["big"], data["big"].stat().st_size, 1
        else:
            src = data["tree"]
            nfiles, nbytes = _tree_stats(src)
        for _ in range(job.reps or sizes.reps):
            shutil.rmtree(dst, ignore_errors=True)
            dst.mkdir()
            target = dst / src.name
            if job.client.startswith("astore"):
                cmd = [astore_cli, "cp", "-q"]
                if job.workload == "local-tree":
                    cmd.append("-r")
                cmd += [str(src), f"file://{target}"]
            else:
                cmd = ["cp", "-r", str(src), str(target)]
            samples.append(_measured_command(cmd))
            got_files, got_bytes = (
                (1, target.stat().st_size) if job.workload == "local-file" else _tree_stats(target)
            )
            if (got_files, got_bytes) != (nfiles, nbytes):
                raise RuntimeError(
                    f"{job.label} copied {got_files} files / {got_bytes} bytes, "
                    f"expected {nfiles} / {nbytes}"
                )
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        outcome.error = str(exc)[:300]
    finally:
        shutil.rmtree(dst, ignore_errors=True)
        outcome.elapsed_s = time.perf_counter() - t0
    if not outcome.error:
        outcome.result = {
            "client": job.client,
            "version": _astore_version() if job.client.startswith("astore") else _cp_version(),
            "workload": job.workload,
            "variant": job.variant,
            "results": [
                {"op": job.workload, "bytes": nbytes, "requests": nfiles, "samples": samples}
            ],
        }
    return outcome


def _astore_version() -> str:
    out = subprocess.run(
        [str(PROJECT_PY), "-c", "import astore; print(astore.__version__)"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() or "?"


def _cp_version() -> str:
    out = subprocess.run(["cp", "--version"], capture_output=True, text=True)
    return (out.stdout.splitlines() or ["cp"])[0]


# -- the run -------------------------------------------------------------------------------


def _servers_in(jobs: list[Job]) -> Iterator[str]:
    seen: list[str] = []
    for job in jobs:
        if job.server not in seen:
            seen.append(job.server)
            yield job.server


def run(jobs: list[Job], sizes: Sizes, workdir: Path) -> list[Outcome]:
    """Run ``jobs`` server by server; returns their outcomes in order."""
    _log(f"writing test data to {workdir} ...")
    data = make_data(workdir, sizes)
    outcomes: list[Outcome] = []
    for kind in _servers_in(jobs):
        mine = [j for j in jobs if j.server == kind]
        if kind == "local":
            for job in mine:
                _log(f"[local] {job.workload:10} {job.label} ...")
                outcomes.append(_logged(run_local(job, sizes, data)))
            continue
        _log(f"[{kind}] starting ...")
        with servers.running(kind) as server:
            servers.create_bucket(server, BUCKET)
            for job in mine:
                if job.skip:
                    outcomes.append(Outcome(job))
                    continue
                _log(f"[{kind}] {job.workload:10} {job.label} ...")
                outcome = _logged(run_client(job, server, sizes, data))
                outcome.result.setdefault("server_rss", server.rss_bytes())
                outcomes.append(outcome)
    return outcomes


def _logged(outcome: Outcome) -> Outcome:
    status = f"FAILED: {outcome.error}" if outcome.error else "ok"
    _log(f"    {outcome.elapsed_s:6.1f} s  {status}")
    return outcome


def machine(sizes: Sizes, started: float, load_before: tuple[float, ...]) -> dict[str, Any]:
    """What the numbers were measured on."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def version(cmd: list[str]) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except OSError:
            return "?"
        return (out.stdout.strip() or out.stderr.strip() or "?").splitlines()[-1]

    snippet = "import importlib.metadata as m, sys; print(sys.version.split()[0], {})"
    pkgs = {
        "project": ["astore", "aiobotocore", "botocore", "moto", "crc32c", "anyio"],
        "peers": ["aioboto3", "aiobotocore", "botocore", "boto3", "s3transfer", "obstore", "s3fs"],
    }
    envs = {}
    for name, py in (("project", PROJECT_PY), ("peers", PEERS_PY)):
        code = snippet.format("{p: m.version(p) for p in %r}" % (pkgs[name],))  # noqa: UP031
        envs[name] = version([str(py), "-c", code])
    s3rver_pkg = HERE / "node_modules" / "s3rver" / "package.json"
    return {
        "cores": os.cpu_count(),
        "cpu": model or platform.processor(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB, 1),
        "kernel": platform.release(),
        "python_project": envs["project"],
        "python_peers": envs["peers"],
        "node": version(["node", "--version"]),
        "s3rver": json.loads(s3rver_pkg.read_text())["version"] if s3rver_pkg.exists() else "?",
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "elapsed_s": time.monotonic() - started,
        "sizes": sizes.__dict__,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Benchmark astore against its peers.")
    p.add_argument("--quick", action="store_true", help="256 MiB, 500 objects, 1 repetition")
    p.add_argument(
        "--only",
        default="",
        help="comma-separated filters on 'server/workload/client' (e.g. 'moto/upload')",
    )
    p.add_argument("--no-docs", action="store_true", help="do not write the markdown report")
    p.add_argument("--workdir", default=None, help="where test data goes (default: a temp dir)")
    p.add_argument(
        "--render",
        metavar="RESULTS_JSON",
        help="run nothing: rewrite docs/benchmarks.md from a saved results file "
        "(e.g. build/bench/results-full.json, after editing PROFILE.md)",
    )
    args = p.parse_args(argv)
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        target = ROOT / "docs" / "benchmarks.md"
        if saved["mode"] != "full" or not saved["command"].startswith("make bench"):
            target = ROOT / "build" / "bench" / "benchmarks-quick.md"
        target.write_text(report.render(saved, profile=HERE / "PROFILE.md"))
        _log(f"wrote {target.relative_to(ROOT)} from {args.render}")
        return

    started = time.monotonic()
    load_before = os.getloadavg()
    sizes = QUICK if args.quick else FULL
    mode = "quick" if args.quick else "full"
    jobs = plan()
    if args.only:
        keep: Callable[[Job], bool] = lambda j: any(  # noqa: E731
            f.strip() in f"{j.server}/{j.workload}/{j.label}" for f in args.only.split(",")
        )
        used = {j.server for j in jobs if keep(j)}
        jobs = [j for j in jobs if keep(j) or (j.seed and j.server in used)]
    ensure_peers()
    ensure_s3rver()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="astore-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        outcomes = run(jobs, sizes, workdir)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    info = machine(sizes, started, load_before)
    command = "make bench-quick" if args.quick else "make bench"
    if args.only or args.no_docs:
        command = " ".join([".venv/bin/python", "benchmarks/run.py", *(argv or sys.argv[1:])])
    out_dir = ROOT / "build" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = {
        "mode": mode,
        "command": command,
        "machine": info,
        "jobs": [
            {
                "job": o.job.__dict__,
                "result": o.result,
                "error": o.error,
                "server_cpu_s": o.server_cpu_s,
                "elapsed_s": o.elapsed_s,
            }
            for o in outcomes
        ],
    }
    (out_dir / f"results-{mode}.json").write_text(json.dumps(raw, indent=1))
    text = report.render(raw, profile=(HERE / "PROFILE.md"))
    print(report.render_tables(raw))
    print(report.render_goals(raw))
    if args.no_docs:
        return
    target = out_dir / "benchmarks-quick.md" if args.quick or args.only else None
    target = target or ROOT / "docs" / "benchmarks.md"
    target.write_text(text)
    _log(f"wrote {target.relative_to(ROOT)} in {info['elapsed_s']:.0f} s")


if __name__ == "__main__":
    main()
