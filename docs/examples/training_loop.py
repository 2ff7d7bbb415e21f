"""A plain training loop that logs artifacts every step through ArtifactUploader.

Each step "trains" (pure Python arithmetic standing in for the GIL-heavy work of a real
loop), writes a checkpoint and a metrics file *in place* (same paths every step), and logs
both. ``log_file`` copies them to a staging folder and returns, so the loop may overwrite
them on the next step; uploads run in the background. At the end the script checks that
every artifact arrived byte-identical to what the loop wrote at that step.

Run it: ``python docs/examples/training_loop.py [--steps N] [--store PATH_OR_URL]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import tempfile
import time
from pathlib import Path

import astore
from astore.ml import ArtifactUploader


def train_step(weights: list[float], rng: random.Random) -> float:
    """One fake optimisation step: nudges the weights, returns a loss."""
    grad = [w - rng.gauss(0.0, 1.0) for w in weights]
    for i, g in enumerate(grad):
        weights[i] -= 0.01 * g
    return sum(g * g for g in grad) / len(grad)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--store", help="store URL or folder (default: a temporary folder)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        url = args.store or str(Path(tmp) / "store")
        rng = random.Random(7)
        weights = [rng.random() for _ in range(20_000)]
        expected: dict[str, str] = {}  # artifact name -> sha256 of what the loop wrote

        start = time.perf_counter()
        stall = 0.0
        with ArtifactUploader(url, run_name="example-run", max_concurrent_uploads=4) as uploader:
            for step in range(args.steps):
                loss = train_step(weights, rng)
                ckpt = work / "checkpoint.bin"  # rewritten in place every step
                ckpt.write_bytes(json.dumps(weights).encode())
                metrics = work / "metrics.json"
                metrics.write_text(json.dumps({"step": step, "loss": loss}))
                for name, path in (
                    (f"ckpt/step-{step:04d}.bin", ckpt),
                    (f"metrics/step-{step:04d}.json", metrics),
                ):
                    expected[name] = hashlib.sha256(path.read_bytes()).hexdigest()
                    t0 = time.perf_counter()
                    uploader.log_file(name, path)
                    stall += time.perf_counter() - t0
        # Leaving the block waited for every upload and raised any failure.
        total = time.perf_counter() - start

        with astore.open_sync(url) as store:
            for name, digest in expected.items():
                data = store.get(uploader.object_name_for(name))
                if hashlib.sha256(data).hexdigest() != digest:
                    raise SystemExit(f"artifact {name} differs from what the loop wrote")
        print(
            f"all {len(expected)} artifacts arrived byte-identical; loop stalled "
            f"{stall * 1000:.1f} ms in log_file over {total:.2f} s"
        )


if __name__ == "__main__":
    main()
