"""``shuffledp encode --bulk`` against one ``shuffledp encode`` process per user (the way a
deployment test had to be run before): wall time of both on the same users, in the same run,
printed as a ratio.

Usage::

    python bench/encode_bulk.py [--users 8] [--grid 32] [--workers N]

Both write encrypted batches of identical size (checked). The bulk path saves one
interpreter start and parameter load per user and runs the users on every core.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--grid", default="32")
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    exe = shutil.which("shuffledp", path=str(Path(sys.executable).parent)) or "shuffledp"
    d = Path(tempfile.mkdtemp(prefix="encode-bulk-"))
    try:
        subprocess.run([exe, "setup", "--grid", args.grid, "--n", str(args.users),
                        "--epsilon", "1", "--out", str(d / "run")], check=True,
                       capture_output=True)
        g = np.random.default_rng(0)
        rows = ["user_id,x,y"]
        for u in range(args.users):
            pts = g.random((3, 2))
            rows += [f"u{u},{x:.4f},{y:.4f}" for x, y in pts]
            (d / f"u{u}.csv").write_text("".join(f"{x:.4f},{y:.4f}\n" for x, y in pts))
        (d / "users.csv").write_text("\n".join(rows) + "\n")
        common = ["--params", str(d / "run" / "params.json"), "--analyzer-pub",
                  str(d / "run" / "analyzer.pub"), "--quiet"]
        t0 = time.perf_counter()
        for u in range(args.users):
            subprocess.run([exe, "encode", *common, "--input", str(d / f"u{u}.csv"),
                            "--out", str(d / "one" / f"u{u}.bin")], check=True)
        t_one = time.perf_counter() - t0
        workers = ["--workers", str(args.workers)] if args.workers else []
        t0 = time.perf_counter()
        subprocess.run([exe, "encode", *common, "--bulk", *workers, "--input",
                        str(d / "users.csv"), "--out", str(d / "bulk")], check=True,
                       capture_output=True)
        t_bulk = time.perf_counter() - t0
        sizes = {p.stat().st_size for p in (d / "one").iterdir()} | {
            p.stat().st_size for p in (d / "bulk").iterdir()}
        assert len(sizes) == 1, sizes
        print(f"{args.users} users, grid {args.grid}, {sizes.pop():,} bytes per batch, "
              f"{os.cpu_count()} cores")
        print(f"one process per user: {t_one:.1f} s; encode --bulk: {t_bulk:.1f} s; "
              f"ratio (per-user / bulk): {t_one / t_bulk:.2f}x")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
