"""Profile astore's own hot paths with py-spy: the large upload, the downloads, small objects.

Usage (py-spy is not a project dependency; install it into the venv for your own use)::

    .venv/bin/uv pip install --python .venv/bin/python py-spy
    .venv/bin/python benchmarks/profile.py [--size-mib 1024] [--objects 2000] [--gil]

Each workload runs once in the astore client runner under ``py-spy record`` (uploads and
small objects on moto, downloads on s3rver, where ranged reads are cheap for the server).
Collapsed stacks go to ``build/bench/profile-*.txt``; the top frames by own time and by
inclusive time are printed. ``--gil`` samples only the thread holding the GIL: the Python
work that competes with the event loop.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import servers  # noqa: E402
from run import BUCKET, FULL, PROJECT_PY, _client_env, make_data  # noqa: E402

MiB = 1024 * 1024


def _frame_name(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (file.py)``: lines merged per function."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = Path(path).parts
    short = "/".join(parts[-2:]) if parts else path
    return f"{name} ({short})"


SETUP_FRAMES = (
    "_find_and_load (",
    "AstoreClient.__init__ (",
    "AstoreClient.__aenter__ (",
    "AstoreClient.__aexit__ (",
    "AioSession.warm_up_loader_caches (",
    "new_session (",
    "make_data (",
)
IDLE_LEAVES = (
    "Condition.wait (",
    "EpollSelector.select (",
    "_worker (futures/thread.py)",
    "Event.wait (",
    "Thread.join (",
)


def _package(frame: str) -> str:
    where = frame.rpartition("(")[2].rstrip(")")
    top = where.split("/")[0] if "/" in where else where
    return top.replace(".py", "")


def summarize(raw: Path, top: int) -> str:
    """Top frames of the measured transfer, by own and inclusive samples (percentages).

    Start-up and tear-down (imports, opening and closing the client) are left out, and so
    are waits (an idle worker thread, the selector): the percentages are shares of the CPU
    the client burned while it transferred.
    """
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    packages: collections.Counter[str] = collections.Counter()
    total = idle = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";")]
        if any(f.startswith(SETUP_FRAMES) for f in frames):
            continue  # start-up and tear-down: imports, opening and closing the client
        if frames[-1].startswith(IDLE_LEAVES):
            idle += count
            continue
        total += count
        own[frames[-1]] += count
        packages[_package(frames[-1])] += count
        for name in set(frames):
            incl[name] += count
    if not total:
        return "(no samples)"
    lines = [f"{total} busy samples during the transfer ({idle} idle-wait samples dropped)"]
    lines += ["", "own time by package:"]
    lines += [f"  {n / total:6.1%}  {name}" for name, n in packages.most_common(8)]
    lines += ["", "own time:"]
    lines += [f"  {n / total:6.1%}  {name}" for name, n in own.most_common(top)]
    lines += ["", "inclusive time:"]
    lines += [f"  {n / total:6.1%}  {name}" for name, n in incl.most_common(top)]
    return "\n".join(lines)


def profile(
    label: str,
    server: servers.Server,
    args: list[str],
    data: dict[str, Path],
    *,
    gil: bool,
    out_dir: Path,
) -> Path:
    py_spy = shutil.which("py-spy", path=str(PROJECT_PY.parent)) or shutil.which("py-spy")
    if py_spy is None:
        raise SystemExit("py-spy is not installed (see this module's docstring)")
    out = out_dir / f"profile-{label}{'-gil' if gil else ''}.txt"
    cmd = [
        py_spy,
        "record",
        "--rate",
        "250",
        "--format",
        "raw",
        "--output",
        str(out),
        *(["--gil"] if gil else []),
        "--",
        str(PROJECT_PY),
        "-m",
        "clients.astore_client",
        f"--endpoint={server.endpoint}",
        f"--bucket={BUCKET}",
        f"--key-id={server.key_id}",
        f"--secret={server.secret}",
        "--reps=1",
        *args,
    ]
    subprocess.run(cmd, env=_client_env(data["big"].parent), check=True, capture_output=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mib", type=int, default=FULL.big // MiB)
    p.add_argument("--objects", type=int, default=FULL.objects)
    p.add_argument("--gil", action="store_true", help="sample only the GIL-holding thread")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--summarize", nargs="*", help="only summarize these existing raw files")
    args = p.parse_args()
    if args.summarize:
        for raw in args.summarize:
            print(f"\n## {raw}\n")
            print(summarize(Path(raw), args.top))
        return
    out_dir = ROOT / "build" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    sizes = FULL.__class__(**{**FULL.__dict__, "big": args.size_mib * MiB, "tree_files": 0})
    workdir = Path(tempfile.mkdtemp(prefix="astore-profile-"))
    try:
        data = make_data(workdir, sizes)
        common = [f"--file={data['big']}", f"--dest={data['download']}", "--key=bench/seed"]
        results: list[tuple[str, Path]] = []
        with servers.running("moto") as moto:
            servers.create_bucket(moto, BUCKET)
            for label, extra in (
                ("upload", ["--workload=upload"]),
                ("small", ["--workload=small", f"--objects={args.objects}"]),
            ):
                print(f"profiling {label} on moto ...", file=sys.stderr)
                results.append(
                    (
                        label,
                        profile(label, moto, common + extra, data, gil=args.gil, out_dir=out_dir),
                    )
                )
        with servers.running("s3rver") as s3rver:
            servers.create_bucket(s3rver, BUCKET)
            env = _client_env(workdir)
            seed = [str(PROJECT_PY), "-m", "clients.astore_client", "--workload=upload"]
            seed += [f"--endpoint={s3rver.endpoint}", f"--bucket={BUCKET}", "--reps=1"]
            seed += [f"--key-id={s3rver.key_id}", f"--secret={s3rver.secret}", *common]
            subprocess.run(seed, env=env, check=True, capture_output=True)
            for label, extra in (
                ("download", ["--workload=download"]),
                ("download-single-stream", ["--workload=download", "--variant=single-stream"]),
            ):
                print(f"profiling {label} on s3rver ...", file=sys.stderr)
                results.append(
                    (
                        label,
                        profile(label, s3rver, common + extra, data, gil=args.gil, out_dir=out_dir),
                    )
                )
        for label, raw in results:
            print(f"\n## {label} ({os.path.relpath(raw, ROOT)})\n")
            print(summarize(raw, args.top))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
