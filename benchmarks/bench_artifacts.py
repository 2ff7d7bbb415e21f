"""Training-loop stall of ArtifactUploader.log_file against a plain shutil.copyfile.

For each file size, median of 3 runs of: the time ``log_file`` blocks the caller, the time
``shutil.copyfile`` of the same file takes (the floor: log_file makes exactly one copy), and
the time until the background upload is stored (to show what the loop does *not* wait for).
The store is a local folder with fsync, so the upload does real work.

Run: ``python benchmarks/bench_artifacts.py [--quick]`` (``--quick``: 16 and 64 MiB).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from astore import MiB
from astore.ml import ArtifactUploader

RUNS = 3


def make_file(path: Path, size: int) -> None:
    block = os.urandom(MiB)
    with path.open("wb") as f:
        for _ in range(size // MiB):
            f.write(block)


def measure(tmp: Path, size: int) -> tuple[float, float, float]:
    """Medians of (copyfile s, log_file stall s, upload done s) for one file size."""
    src = tmp / f"src-{size}.bin"
    make_file(src, size)
    copies, stalls, uploads = [], [], []
    for run in range(RUNS):
        dst = tmp / "copy.bin"
        t0 = time.perf_counter()
        shutil.copyfile(src, dst)
        copies.append(time.perf_counter() - t0)
        dst.unlink()
        with ArtifactUploader(
            str(tmp / f"store-{size}-{run}"), run_name="bench", staging_dir=tmp / "staging"
        ) as up:
            t0 = time.perf_counter()
            up.log_file("artifact.bin", src)
            stalls.append(time.perf_counter() - t0)
            up.wait()
            uploads.append(time.perf_counter() - t0)
        shutil.rmtree(tmp / f"store-{size}-{run}")
    src.unlink()
    return statistics.median(copies), statistics.median(stalls), statistics.median(uploads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 and 64 MiB only")
    args = parser.parse_args()
    sizes = [16 * MiB, 64 * MiB] if args.quick else [64 * MiB, 256 * MiB]
    with tempfile.TemporaryDirectory(prefix="astore-bench-") as tmp:
        rows = [(size, *measure(Path(tmp), size)) for size in sizes]
    print(f"ArtifactUploader.log_file stall vs shutil.copyfile (median of {RUNS}, local store)\n")
    print("| file | copyfile | log_file stall | stall / copy | upload done | stall / upload |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size, copy, stall, upload in rows:
        print(
            f"| {size // MiB} MiB | {copy * 1000:.0f} ms | {stall * 1000:.0f} ms "
            f"| {stall / copy:.2f} | {upload * 1000:.0f} ms | {stall / upload:.2f} |"
        )


if __name__ == "__main__":
    main()
