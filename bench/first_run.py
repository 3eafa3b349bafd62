"""The first run a new user makes: ``shuffledp heatmap --out DIR``, unchanged.

Runs the README's first command in a fresh process ``--repeats`` times (default 3; each run
draws fresh noise, as a user's would) and prints its wall time and, from ``report.json``, CC
and EMD of ours against the Laplace baseline (metrics between Gaussian-filtered heatmaps,
truth = the non-private aggregate). Targets: wall time well under 30 s on 2 cores, CC of ours
>= 0.5. Times on a shared machine are upper bounds.

    python bench/first_run.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    exe = [sys.executable, "-m", "shuffledp.cli"]
    print(f"{'run':>4s} {'wall s':>8s} {'mech s':>8s} {'CC ours':>8s} {'CC Lapl':>8s} "
          f"{'EMD ours':>9s} {'EMD Lapl':>9s} {'KL ours':>8s} {'KL Lapl':>8s}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            out = Path(tmp) / f"out{i}"
            t0 = time.perf_counter()
            subprocess.run([*exe, "heatmap", "--out", str(out)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = time.perf_counter() - t0
            rep = json.loads((out / "report.json").read_text())
            m = rep["metrics"]
            rows.append((wall, m["ours"]["cc"], m["laplace"]["cc"]))
            print(f"{i:4d} {wall:8.1f} {rep['seconds_mechanism']:8.2f} {m['ours']['cc']:8.3f} "
                  f"{m['laplace']['cc']:8.3f} {m['ours']['emd']:9.4f} {m['laplace']['emd']:9.4f} "
                  f"{m['ours']['kl']:8.3f} {m['laplace']['kl']:8.3f}")
    grid = f"{rep['grid']['width']}x{rep['grid']['height']}"
    print(f"default run: {rep['n_users']} users, grid {grid}, epsilon "
          f"{rep['guarantee']['epsilon']:g} ({rep['guarantee']['model']}); "
          f"max wall {max(r[0] for r in rows):.1f} s, min CC ours {min(r[1] for r in rows):.3f}, "
          f"max CC Laplace {max(r[2] for r in rows):.3f}")


if __name__ == "__main__":
    main()
