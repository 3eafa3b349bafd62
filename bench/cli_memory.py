"""Peak memory of `shuffledp heatmap` against the estimate that its size refusal uses.

Runs each configuration in a fresh process and prints the measured peak resident set size
next to :func:`shuffledp.cli.common.heatmap_memory`; the estimate should stay above the
measurement (it is what `--allow-large` guards). Takes about a minute.

    python bench/cli_memory.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np

from shuffledp.cli.common import heatmap_memory
from shuffledp.grid import Grid
from shuffledp.protocol.params import derive_params

WRAPPER = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
    "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def peak_rss_mib(args: list[str]) -> float:
    """Peak RSS (MiB) of `shuffledp <args>` run in a fresh child process (Linux: KiB units)."""
    cmd = [sys.executable, "-c", WRAPPER, sys.executable, "-m", "shuffledp.cli", *args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return int(out.strip()) / 1024


def write_csv(path: str, n: int) -> None:
    rng = np.random.default_rng(0)
    digits = rng.integers(0, 10, size=(n, 2))
    with open(path, "w") as f:
        f.write("user_id,x,y\n")
        f.write("".join(f"{i % 100},0.{a},0.{b}\n" for i, (a, b) in enumerate(digits)))


def main() -> None:
    tmp = tempfile.mkdtemp()
    csv = os.path.join(tmp, "points.csv")
    write_csv(csv, 2_000_000)
    rows = [
        ("central --grid 256", ["--grid", "256"], 256, 1000, None),
        ("central --grid 1024", ["--grid", "1024"], 1024, 1000, None),
        ("central --grid 2048", ["--grid", "2048"], 2048, 1000, None),
        ("central --grid 64 --n 400000", ["--grid", "64", "--n", "400000"], 64,
         2_000_000, None),
        ("central --input 2M-line CSV --grid 64", ["--grid", "64", "--input", csv], 64,
         2_000_001, None),
        ("shuffle --grid 256 --n 200", ["--grid", "256", "--model", "shuffle"], 256, 1000,
         200),
    ]
    print(f"{'configuration':42s}{'measured MiB':>14s}{'estimate MiB':>14s}")
    for name, args, side, points, n_users in rows:
        mpu = m = 0
        if n_users:
            p = derive_params(Grid(side, side), n_users, epsilon=1.0, delta=1e-5, B=256)
            mpu, m = p.messages_per_user, p.m
        est = heatmap_memory(side * side, points, 3, mpu, m) / 2**20
        got = peak_rss_mib(["heatmap", *args, "--no-metrics", "--quiet", "--out",
                            os.path.join(tmp, "o")])
        print(f"{name:42s}{got:14.0f}{est:14.0f}")


if __name__ == "__main__":
    main()
