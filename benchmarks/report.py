"""Turn a run's raw results into the markdown tables, the goals and docs/benchmarks.md."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
GiB = 1024 * MiB
PEERS = ("aiobotocore", "aioboto3", "boto3", "obstore", "s3fs")
LARGE = ("upload", "download", "stream", "local-file", "local-tree")
WORKLOAD_NAMES = {
    "upload": "upload 1 file",
    "download": "download to file",
    "stream": "upload async iterator",
    "local-file": "copy 1 file",
    "local-tree": "copy folder",
    "small-put": "PUT small",
    "small-get": "GET small",
}


@dataclass
class Row:
    """The summary of one client's runs of one operation."""

    server: str
    op: str
    label: str
    client: str
    variant: str
    version: str = ""
    reps: int = 0
    nbytes: int = 0
    requests: int = 0
    wall: float = 0.0
    wall_min: float = 0.0
    wall_max: float = 0.0
    cpu: float = 0.0  # median CPU seconds per run
    peak_rss: int = 0
    rss_over_idle: int = 0
    lag_p99: float | None = None
    lag_max: float | None = None
    server_cpu: float | None = None
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.reps > 0

    @property
    def mib_s(self) -> float:
        return self.nbytes / MiB / self.wall if self.wall else 0.0

    @property
    def cpu_per_gib(self) -> float:
        return self.cpu / (self.nbytes / GiB) if self.nbytes else 0.0

    @property
    def objects_s(self) -> float:
        return self.requests / self.wall if self.wall else 0.0

    @property
    def cpu_ms_per_request(self) -> float:
        return self.cpu / self.requests * 1e3 if self.requests else 0.0


def rows(raw: dict[str, Any]) -> list[Row]:
    """One row per (job, operation), in the order the jobs ran."""
    out: list[Row] = []
    for entry in raw["jobs"]:
        job = entry["job"]
        if job.get("hidden"):
            continue
        label = (
            job["client"]
            if job["variant"] == "default"
            else (f"{job['client']} ({job['variant']})")
        )
        base = {
            "server": job["server"],
            "label": label,
            "client": job["client"],
            "variant": job["variant"],
        }
        if job.get("skip") or entry.get("error"):
            op = job["workload"]
            note = job.get("skip") or f"failed: {entry['error']}"
            ops = ("small-put", "small-get") if op == "small" else (op,)
            out.extend(Row(op=o, note=note, **base) for o in ops)
            continue
        result = entry["result"]
        reps = len(result["results"])
        for res in result["results"]:
            samples = res["samples"]
            walls = [s["wall_s"] for s in samples]
            lags99 = [s["lag_p99_ms"] for s in samples if s.get("lag_p99_ms") is not None]
            lagsmax = [s["lag_max_ms"] for s in samples if s.get("lag_max_ms") is not None]
            server_cpu = entry.get("server_cpu_s")
            out.append(
                Row(
                    op=res["op"],
                    version=str(result.get("version", "")),
                    reps=len(samples),
                    nbytes=res["bytes"],
                    requests=res["requests"],
                    wall=statistics.median(walls),
                    wall_min=min(walls),
                    wall_max=max(walls),
                    cpu=statistics.median(s["cpu_s"] for s in samples),
                    peak_rss=max(s["peak_rss"] or 0 for s in samples),
                    rss_over_idle=max((s["peak_rss"] or 0) - (s["idle_rss"] or 0) for s in samples),
                    lag_p99=statistics.median(lags99) if lags99 else None,
                    lag_max=max(lagsmax) if lagsmax else None,
                    server_cpu=(
                        server_cpu / len(samples) / reps if server_cpu is not None else None
                    ),
                    **base,
                )
            )
    return out


def _lag(row: Row) -> str:
    if row.lag_p99 is None or row.lag_max is None:
        return "\u2013"
    return f"{row.lag_p99:.1f} / {row.lag_max:.0f}"


def _mib(n: int) -> str:
    return f"{n / MiB:.0f}"


def _rss(row: Row) -> str:
    if not row.peak_rss:
        return "\u2013"
    return f"{_mib(row.peak_rss)} ({_mib(row.rss_over_idle)})"


def _table(header: list[str], body: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def large_table(all_rows: list[Row]) -> str:
    header = [
        "server",
        "workload",
        "client",
        "runs",
        "wall s, median (min\u2013max)",
        "MiB/s",
        "client CPU s/GiB",
        "peak RSS MiB (over idle)",
        "loop lag ms p99 / max",
        "server CPU s/run",
    ]
    body = []
    for r in all_rows:
        if r.op not in LARGE:
            continue
        name = WORKLOAD_NAMES.get(r.op, r.op)
        if not r.ok:
            body.append([r.server, name, r.label, "0", f"*{r.note}*", "", "", "", "", ""])
            continue
        body.append(
            [
                r.server,
                name,
                f"**{r.label}**" if r.client.startswith("astore") else r.label,
                str(r.reps),
                f"{r.wall:.2f} ({r.wall_min:.2f}\u2013{r.wall_max:.2f})",
                f"{r.mib_s:.0f}",
                f"{r.cpu_per_gib:.2f}",
                _rss(r),
                _lag(r),
                f"{r.server_cpu:.1f}" if r.server_cpu is not None else "\u2013",
            ]
        )
    return _table(header, body)


def small_table(all_rows: list[Row]) -> str:
    header = [
        "server",
        "operation",
        "client",
        "runs",
        "wall s, median (min\u2013max)",
        "objects/s",
        "client CPU ms/request",
        "peak RSS MiB (over idle)",
        "loop lag ms p99 / max",
    ]
    body = []
    for r in all_rows:
        if not r.op.startswith("small"):
            continue
        name = WORKLOAD_NAMES[r.op]
        if not r.ok:
            body.append([r.server, name, r.label, "0", f"*{r.note}*", "", "", "", ""])
            continue
        body.append(
            [
                r.server,
                name,
                f"**{r.label}**" if r.client == "astore" else r.label,
                str(r.reps),
                f"{r.wall:.2f} ({r.wall_min:.2f}\u2013{r.wall_max:.2f})",
                f"{r.objects_s:.0f}",
                f"{r.cpu_ms_per_request:.2f}",
                _rss(r),
                _lag(r),
            ]
        )
    return _table(header, body)


def render_tables(raw: dict[str, Any]) -> str:
    all_rows = rows(raw)
    return (
        "### Large transfers\n\n"
        + large_table(all_rows)
        + "\n\n### Small objects\n\n"
        + small_table(all_rows)
        + "\n"
    )


# -- goals ---------------------------------------------------------------------------------


def _find(all_rows: list[Row], server: str, op: str, label: str) -> Row | None:
    for r in all_rows:
        if (r.server, r.op, r.label) == (server, op, label) and r.ok:
            return r
    return None


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def goals(raw: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(goal, measured, verdict)`` rows, every ratio from this run."""
    all_rows = rows(raw)
    sizes = raw["machine"]["sizes"]
    out: list[tuple[str, str, str]] = []
    groups = sorted(
        {(r.server, r.op) for r in all_rows if r.ok and r.op not in ("local-file", "local-tree")},
        key=lambda so: (so[0], list(WORKLOAD_NAMES).index(so[1])),
    )
    astore_rows = [r for r in all_rows if r.client == "astore" and r.ok]

    # 1. wall time against the fastest peer, each astore setting on its own
    for server, op in groups:
        peers = [r for r in all_rows if (r.server, r.op) == (server, op) and r.ok]
        peers = [r for r in peers if r.client in PEERS]
        mine = [r for r in astore_rows if (r.server, r.op) == (server, op)]
        if not peers:
            continue
        best = min(peers, key=lambda r: r.wall)
        for r in mine:
            if op == "upload" and r.variant == "no-checksum":
                continue  # the checksum-cost comparison, not a configuration to rank
            ratio = r.wall / best.wall
            out.append(
                (
                    f"{server} {WORKLOAD_NAMES[op]}: {r.label} wall ≤ fastest peer's",
                    f"{r.wall:.2f} s vs {best.label} {best.wall:.2f} s (\u00d7{ratio:.2f})",
                    _verdict(ratio <= 1.0),
                )
            )

    # 2. CPU per GiB against aioboto3, aiobotocore (half) and obstore (equal)
    for server, op in groups:
        if op not in LARGE:
            continue
        for r in [r for r in astore_rows if (r.server, r.op) == (server, op)]:
            if r.variant == "no-checksum":
                continue
            for peer, factor in (("aioboto3", 0.5), ("aiobotocore", 0.5), ("obstore", 1.0)):
                other = _find(all_rows, server, op, peer)
                if other is None or not other.cpu_per_gib:
                    continue
                ratio = r.cpu_per_gib / other.cpu_per_gib
                bound = "½ \u00d7" if factor == 0.5 else "≤"
                out.append(
                    (
                        f"{server} {WORKLOAD_NAMES[op]}: {r.label} CPU/GiB {bound} {peer}'s",
                        f"{r.cpu_per_gib:.2f} vs {other.cpu_per_gib:.2f} s/GiB (\u00d7{ratio:.2f})",
                        _verdict(ratio <= factor),
                    )
                )

    # 3. small objects: CPU per request vs aiobotocore, objects/s vs aioboto3
    for server, op in groups:
        if not op.startswith("small"):
            continue
        r = _find(all_rows, server, op, "astore")
        if r is None:
            continue
        floor = _find(all_rows, server, op, "aiobotocore")
        if floor is not None:
            ratio = r.cpu_ms_per_request / floor.cpu_ms_per_request
            out.append(
                (
                    f"{server} {WORKLOAD_NAMES[op]}: CPU/request ≤ 1.10 \u00d7 aiobotocore's",
                    f"{r.cpu_ms_per_request:.2f} vs {floor.cpu_ms_per_request:.2f} ms "
                    f"(\u00d7{ratio:.2f})",
                    _verdict(ratio <= 1.10),
                )
            )
        other = _find(all_rows, server, op, "aioboto3")
        if other is not None:
            ratio = r.objects_s / other.objects_s
            out.append(
                (
                    f"{server} {WORKLOAD_NAMES[op]}: objects/s ≥ aioboto3's",
                    f"{r.objects_s:.0f} vs {other.objects_s:.0f} /s (\u00d7{ratio:.2f})",
                    _verdict(ratio >= 1.0),
                )
            )

    # 4. loop lag during the checksummed upload
    up = _find(all_rows, "moto", "upload", "astore")
    if up is not None and up.lag_p99 is not None:
        out.append(
            (
                "loop-lag p99 < 5 ms during the checksummed (CRC32C) upload",
                f"p99 {up.lag_p99:.1f} ms, worst {up.lag_max:.0f} ms",
                _verdict(up.lag_p99 < 5.0),
            )
        )

    # 5. memory: peak RSS over idle against part_size * max_concurrency
    bound = sizes["part_size"] * sizes["concurrency"]
    for r in astore_rows:
        if r.op not in ("upload", "download", "stream") or r.variant == "no-checksum":
            continue
        ratio = r.rss_over_idle / bound
        out.append(
            (
                f"{r.server} {WORKLOAD_NAMES[r.op]}: {r.label} peak RSS over idle "
                f"≤ 1.25 \u00d7 part_size \u00d7 max_concurrency ({bound // MiB} MiB)",
                f"{r.rss_over_idle / MiB:.0f} MiB (\u00d7{ratio:.2f})",
                _verdict(ratio <= 1.25),
            )
        )

    # 6. local copies against cp
    for op, mine, theirs in (
        ("local-file", "astore cp", "cp"),
        ("local-tree", "astore cp -r", "cp -r"),
    ):
        a, c = _find(all_rows, "local", op, mine), _find(all_rows, "local", op, theirs)
        if a is None or c is None:
            continue
        ratio = c.wall / a.wall
        out.append(
            (
                f"{WORKLOAD_NAMES[op]}: {mine} throughput ≥ 0.8 \u00d7 {theirs}'s",
                f"{a.mib_s:.0f} vs {c.mib_s:.0f} MiB/s (\u00d7{ratio:.2f})",
                _verdict(ratio >= 0.8),
            )
        )
    return out


def checksum_cost(raw: dict[str, Any]) -> str:
    """CRC32C against checksum=None on the same upload, as ratios."""
    all_rows = rows(raw)
    on = _find(all_rows, "moto", "upload", "astore")
    off = _find(all_rows, "moto", "upload", "astore (no-checksum)")
    if on is None or off is None:
        return "not measured in this run"
    return (
        f"CRC32C on / off: wall \u00d7{on.wall / off.wall:.2f} "
        f"({on.wall:.2f} s / {off.wall:.2f} s), "
        f"client CPU \u00d7{on.cpu_per_gib / off.cpu_per_gib:.2f} "
        f"({on.cpu_per_gib:.2f} / {off.cpu_per_gib:.2f} s/GiB), "
        f"loop lag p99 {on.lag_p99:.1f} ms with CRC32C vs {off.lag_p99:.1f} ms without"
    )


def render_goals(raw: dict[str, Any]) -> str:
    rows_ = goals(raw)
    met = sum(1 for *_, v in rows_ if v == "**met**")
    table = _table(["goal", "measured (ratio)", "verdict"], ([g, m, v] for g, m, v in rows_))
    return f"{met} of {len(rows_)} goals met.\n\n{table}\n\nChecksum cost: {checksum_cost(raw)}\n"


# -- the document --------------------------------------------------------------------------

METHOD = """\
## How it is measured

Every client runs in its own process (`benchmarks/clients/*.py`), one workload at a time,
on the same server, and prints one JSON line; the orchestrator (`benchmarks/run.py`) starts
and stops the servers and writes this page. astore and plain aiobotocore run in the
project's venv (aiobotocore {aiobotocore_project}); aioboto3, boto3 + s3transfer, obstore and
s3fs run in their own venv `benchmarks/.peers` (aioboto3 15.5.0 pins aiobotocore 2.25.1).

- **wall**: `time.perf_counter` around the transfer only (clients and sessions are opened
  before). Median of the repetitions, with min\u2013max. MiB/s is size / median wall.
- **client CPU**: user + sys of the client process only (`getrusage(RUSAGE_SELF)` deltas
  around the transfer, so server CPU is excluded), per GiB moved or per request.
- **peak RSS**: the client process's high-water mark (`VmHWM`, reset through
  `/proc/self/clear_refs` before each run); "over idle" subtracts the RSS just before it.
- **loop lag** (asyncio clients): a task sleeps 1 ms in a loop during the transfer; p99 (median
  over repetitions) and worst delay past the 1 ms. boto3 has no event loop.
- **server CPU**: CPU seconds the server process used during one run (shows which side is
  the bottleneck).
- Every run is checked: the uploaded object's size, the downloaded file's size, every small
  object's length, every copied file. A run that fails shows as failed, never as a number.
- **Workloads**: (1) one file of {big} to the store and back, {part} MiB parts, concurrency
  {conc}; (2) {objects} objects of {osize} KiB, PUT then GET, {sconc} at a time; (3) {big}
  from an async iterator (1 MiB chunks from one reused buffer, so the client's own buffering
  is what shows); (4) `astore cp` into a local store (`file://`) against `cp`, for the
  file and for a folder of {tree} files of {tsize} KiB; (5) astore's upload with
  CRC32C against `checksum=None`.

**Servers.** moto (Python, one core at most) bounds every client's upload wall time; expect
±30% from run to run. moto reads the *whole object* for each ranged GET, so a ranged
download of {big} costs {ranges} full-object reads on its side: ranged downloads (boto3,
aioboto3, s3fs, astore's default, obstore's ranged variant) are measured on **s3rver**
(Node, objects on disk) only; on moto the single-stream clients are measured. s3rver has no
native checksums, conditional writes or multipart abort: throughput only (astore's downloads
there are not verified, as no checksum is recorded). The botocore-based peers run
with `payload_signing_enabled=False`, as astore does: over plain-HTTP loopback botocore
would otherwise hash every request body with SHA-256, which it skips over HTTPS when a
checksum header is sent; no production deployment pays it. obstore runs with its defaults.
**astore's download strategy** (`TransferConfig.parallel_download`) is reported for both
settings: ranged parallel (default) and single stream.

**Local copies.** `astore cp` writes into a local store (`file://`), which is durable: each
file goes to a temporary file that is fsynced, checksummed (CRC32C recorded beside it) and
renamed, and the folder is fsynced. `cp` does none of that and finishes in the page cache,
so the ratio is the price of astore's durability and verification as much as of its speed.
The time of `astore cp` includes starting its Python process.
"""


def _machine(raw: dict[str, Any]) -> str:
    m = raw["machine"]
    lb = ", ".join(f"{x:.2f}" for x in m["load_before"])
    la = ", ".join(f"{x:.2f}" for x in m["load_after"])
    return (
        "## Machine\n\n"
        f"- {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB RAM, Linux {m['kernel']}\n"
        f"- project venv: Python {m['python_project']}\n"
        f"- peers venv: Python {m['python_peers']}\n"
        f"- s3rver {m['s3rver']} on Node {m['node']}\n"
        f"- load average before the run: {lb}; after: {la} (other work on the machine "
        "shows here, and in the spread of the wall times)\n"
        f"- the run took {m['elapsed_s'] / 60:.1f} min\n"
    )


def render(raw: dict[str, Any], *, profile: Path) -> str:
    """The whole of docs/benchmarks.md."""
    m = raw["machine"]
    s = m["sizes"]
    big = f"{s['big'] // GiB} GiB" if s["big"] >= GiB else f"{s['big'] // MiB} MiB"
    project = m["python_project"]
    aiobotocore_project = (
        project.split("'aiobotocore': '")[1].split("'")[0]
        if ("'aiobotocore': '" in project)
        else "?"
    )
    method = METHOD.format(
        aiobotocore_project=aiobotocore_project,
        big=big,
        part=s["part_size"] // MiB,
        conc=s["concurrency"],
        objects=f"{s['objects']:,}",
        osize=s["object_size"] // 1024,
        sconc=s["small_concurrency"],
        tree=f"{s['tree_files']:,}",
        tsize=s["tree_file_size"] // 1024,
        ranges=s["big"] // s["part_size"],
    )
    profile_text = profile.read_text() if profile.exists() else ""
    return (
        "# Benchmarks\n\n"
        "astore against what you would use instead — aioboto3, boto3 + s3transfer, obstore, "
        "s3fs and plain aiobotocore (the floor astore is built on) — in one run, on the same "
        "servers, on one machine. Benchmarks are not tests: nothing fails on a number, but "
        "every number below was measured by the command that wrote this page "
        f"({raw['mode']} run, {s['reps']} repetition(s)):\n\n"
        f"```\n{raw['command']}\n```\n\n"
        "## Results\n\n" + render_tables(raw) + "\n## Goals\n\n"
        "Each ratio compares numbers from this same run.\n\n"
        + render_goals(raw)
        + "\n"
        + method
        + "\n"
        + _machine(raw)
        + ("\n" + profile_text if profile_text else "")
    )
