"""The first run a new user makes: ``shuffledp heatmap --out DIR``, unchanged, cold and warm.

Runs the README's first command in fresh processes and prints, for each run, its wall time,
its CPU time (user + system of the child), the wall time as a ratio to a reference measured
in the same run, and, from ``report.json``, CC and EMD of ours against the Laplace baseline
(metrics between Gaussian-filtered heatmaps, truth = the non-private aggregate):

* ``cold``: the first run with an empty numba cache (``NUMBA_CACHE_DIR`` set to a fresh
  directory): every compiled kernel of the run (the noise sampler, the network simplex of the
  exact EMD) is compiled, as on the first run after installing the package;
* ``warm`` (``--repeats``, default 3): the same cache again, the compiled code loaded from
  disk, as on every later run.

The reference, measured before each run (median printed): a fresh ``python -c`` process that
imports numpy and sorts 10^7 random doubles (one core, fixed work); the ratio run / reference
is what to compare across machines and loads. The reference's CPU time is its wall time on
an idle core, so ``wall/ref x ref CPU`` estimates the run's wall time on this machine idle
(on a loaded machine both wall times stretch alike). Each run draws fresh noise, as a user's would.
Targets: warm <= 10 s on 2 cores, CC of ours >= 0.5. The machine's core count and load
average are printed with the figures (on a shared machine the absolute times are upper
bounds).

    python bench/first_run.py [--repeats 3] [--cold 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REFERENCE = ("import numpy as np; "
             "np.sort(np.random.default_rng(0).random(10_000_000))")


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="warm runs")
    ap.add_argument("--cold", type=int, default=1,
                    help="cold runs (each with its own empty numba cache)")
    args = ap.parse_args()
    exe = [sys.executable, "-m", "shuffledp.cli"]
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start; "
          f"reference: python -c '{REFERENCE}'")
    print(f"{'run':>6s} {'wall s':>7s} {'cpu s':>6s} {'ref s':>6s} {'wall/ref':>8s} "
          f"{'cpu/ref':>7s} {'CC ours':>8s} {'CC Lapl':>8s} {'EMD ours':>9s} {'EMD Lapl':>9s}")
    rows: dict[str, list[float]] = {"cold": [], "warm": []}
    refs: list[float] = []
    ref_cpus: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        warm_cache = Path(tmp) / "numba-warm"
        kinds = ["cold"] * args.cold + ["warm"] * args.repeats
        if args.repeats and not args.cold:   # fill the warm cache first (not reported)
            kinds.insert(0, "fill")
        for i, kind in enumerate(kinds):
            ref, ref_cpu = _timed([sys.executable, "-c", REFERENCE])
            refs.append(ref)
            ref_cpus.append(ref_cpu)
            cache = Path(tmp) / f"numba-cold{i}" if kind == "cold" else warm_cache
            env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
            out = Path(tmp) / f"out{i}"
            wall, cpu = _timed([*exe, "heatmap", "--out", str(out)], env)
            if kind == "cold" and not warm_cache.exists():   # the warm runs reuse its cache
                cache.rename(warm_cache)
            if kind == "fill":
                continue
            rows[kind].append(wall / ref)
            rep = json.loads((out / "report.json").read_text())
            m = rep["metrics"]
            print(f"{kind:>6s} {wall:7.2f} {cpu:6.2f} {ref:6.2f} {wall / ref:8.2f} "
                  f"{cpu / ref_cpu:7.2f} "
                  f"{m['ours']['cc']:8.3f} {m['laplace']['cc']:8.3f} "
                  f"{m['ours']['emd']:9.4f} {m['laplace']['emd']:9.4f}", flush=True)
    ref = sorted(refs)[len(refs) // 2]
    ref_cpu = sorted(ref_cpus)[len(ref_cpus) // 2]
    grid = f"{rep['grid']['width']}x{rep['grid']['height']}"
    print(f"default run: {rep['n_users']} users, grid {grid}, epsilon "
          f"{rep['guarantee']['epsilon']:g} ({rep['guarantee']['model']}); "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"reference: median wall {ref:.2f} s, CPU {ref_cpu:.2f} s (on an idle core the two "
          f"agree; wall/CPU = {ref / ref_cpu:.1f} measures the load)")
    for kind, ratios in rows.items():
        if ratios:
            med = sorted(ratios)[len(ratios) // 2]
            print(f"{kind}: median {med:.2f} x the reference wall time = {med * ref:.1f} s "
                  f"here; {med * ref_cpu:.1f} s at the reference's CPU time (the time on an "
                  f"idle machine of this speed; target for warm: <= 10 s on 2 cores)")


if __name__ == "__main__":
    main()
