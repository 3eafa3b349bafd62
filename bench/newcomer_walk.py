"""A newcomer's walk: run every ``shuffledp`` command line of the README on the installed
package, in a fresh folder holding the small input files the lines name, and fail on any
traceback, hang (a line past ``--timeout`` seconds) or undocumented exit status.

The README documents exit status 0 (success), 2 (usage error) and 1 (refusal), each error
being one line ``Error: ...`` on stderr. A line ending with ``&`` starts a service in the
background; it is stopped once the lines after it in the same block have run. Placeholders
that name machine paths (``/var/lib/...``) are moved into the walk's folder; nothing else in
a line is changed.

Usage::

    python bench/newcomer_walk.py                 # every line (15-30 min on 2 busy cores)
    python bench/newcomer_walk.py --skip-slow     # the lines that take seconds
    python bench/newcomer_walk.py --list          # the lines, numbered

Prints one row per line (status, seconds, verdict) and the slowest lines; exits 1 if a line
failed.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"

#: lines known to take more than about a minute (substring of the line -> why)
SLOW = {
    "shuffledp heatmap --out out": "the default run: two exact EMD solves",
    "--grid 320x240 --epsilon 1 --out central": "320x240 central run with metrics",
    "--model shuffle --B 256 --delta 1e-5 --out shuffle": "2,000 users through the protocol",
    "--randomizer krr --k 10": "k-RR blanket at n = 1e5",
    "sweep --figure 12": "11 values of B on 320x240",
    "sweep --figure 1 ": "central vs baselines, 6 values",
    "sweep --param B --values 1,16,256": "9 shuffle runs",
    "sweep --param dropout": "shuffle runs",
    "sweep --input users.csv": "runs on the file's users",
    "sweep --figure 13": "60 shuffle runs",
    "encode --params run/params.json --analyzer-pub run/analyzer.pub --input me.csv":
        "1.9 million encrypted messages",
    "secagg server --dir": "waits for 100 clients (round timeout)",
    "secagg client --dir": "waits for the server",
    "secagg client --server": "waits for the server",
    "serve secagg": "service",
    "--backend dask": "Dask cluster",
    "heatmap --out day2 --budget-ledger": "default data set, 2,000 users",
    "--rounding floor --out floor": "2,000 users through the protocol",
    "federated --out DIR": "10,000 users",
}
DOCUMENTED = (0, 1, 2)


@dataclass
class Line:
    """One command line of the README: its text (continuations joined, comment cut), the
    block it belongs to and whether it runs in the background."""

    number: int
    text: str
    block: int
    background: bool

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)[1:]


def readme_lines(text: str | None = None) -> list[Line]:
    """Every ``shuffledp ...`` command line of the README's plain code blocks (the first
    block's two set-up commands included, from ``shuffledp`` on)."""
    text = README.read_text() if text is None else text
    out: list[Line] = []
    for b, block in enumerate(_plain_blocks(text)):
        joined = block.replace("\\\n", " ")
        for raw in joined.splitlines():
            line = raw.strip()
            if "&& shuffledp " in line:
                line = line[line.index("shuffledp "):]
            if not line.startswith("shuffledp "):
                continue
            line = re.sub(r"\s+#.*$", "", line).strip()
            background = line.endswith("&")
            line = line.rstrip("&").strip()
            out.append(Line(len(out) + 1, " ".join(line.split()), b, background))
    return out


def _plain_blocks(text: str) -> list[str]:
    """The contents of the fenced code blocks without a language tag."""
    blocks, current, fence = [], [], None
    for raw in text.splitlines():
        if raw.startswith("```"):
            if fence is None:
                fence = raw[3:].strip()
                current = []
            else:
                if fence == "":
                    blocks.append("\n".join(current) + "\n")
                fence = None
            continue
        if fence is not None:
            current.append(raw)
    return blocks


def make_inputs(d: Path) -> None:
    """The small input files the README's lines name, in ``d``."""
    import numpy as np

    g = np.random.default_rng(0)
    rows = ["user_id,x,y"] + [f"u{i},{x:.4f},{y:.4f}" for i in range(1000)
                              for x, y in g.random((2, 2))]
    (d / "users.csv").write_text("\n".join(rows) + "\n")
    snap = [f"{u}\t2010-10-19T23:55:27Z\t{30 + g.random():.5f}\t{-98 + g.random():.5f}\t{k}"
            for k, u in enumerate(g.integers(0, 300, 2000))]
    (d / "checkins.txt").write_text("\n".join(snap) + "\n")
    (d / "counts.txt").write_text("\n".join(str(c) for c in g.zipf(2.0, 500)) + "\n")
    items = ["user_id,item"] + [f"u{i},{int(t)}" for i in range(300)
                                for t in g.integers(0, 128, 3)]
    (d / "items.csv").write_text("\n".join(items) + "\n")
    pts = ["user_id,x,y"] + [f"u{i},{x:.4f},{y:.4f}" for i in range(300)
                             for x, y in g.random((4, 2))]
    (d / "points.csv").write_text("\n".join(pts) + "\n")
    (d / "me.csv").write_text("x,y\n0.31,0.62\n0.35,0.60\n")
    (d / "u7.csv").write_text("0.5,0.5\n")
    np.save(d / "x0.npy", g.integers(0, 1000, 1000))
    for p in ("BOX", "DIR"):
        (d / p).mkdir(exist_ok=True)


def prepare(exe: str, d: Path) -> None:
    """A small earlier release, ``day1/report.json``, for the README's compose lines."""
    subprocess.run([exe, "heatmap", "--grid", "16", "--n", "50", "--release", "--quiet",
                    "--out", "day1"], cwd=d, check=True, capture_output=True, timeout=600)


def localise(text: str, d: Path) -> str:
    """Machine paths of the README moved into the walk's folder."""
    return text.replace("/var/lib/", f"{d}/var/lib/")


@dataclass
class Result:
    line: Line
    status: int | str
    seconds: float
    verdict: str


def judge(status: int | str, out: str, err: str) -> str:
    """'ok' or why the line failed: a traceback, a hang, an exit status the README does not
    document, or an error that is not one line."""
    if status == "hang":
        return "FAIL: hang"
    if "Traceback (most recent call last)" in out + err:
        return "FAIL: traceback"
    if status not in DOCUMENTED:
        return f"FAIL: exit status {status} is not documented"
    if status != 0:
        errors = [ln for ln in err.splitlines() if ln.startswith("Error:")]
        if len(errors) != 1:
            return f"FAIL: exit {status} without exactly one 'Error:' line"
        return f"ok (exit {status}: {errors[0][:90]})"
    return "ok"


def shell_words(text: str, d: Path) -> list[str]:
    """The words of a line as a shell would pass them: split, and each word holding ``*``
    expanded against the files of ``d`` (left as is when nothing matches)."""
    import glob

    words = []
    for w in shlex.split(text):
        matches = sorted(glob.glob(w, root_dir=d)) if "*" in w else []
        words.extend(matches or [w])
    return words


def run_line(line: Line, exe: str, d: Path, timeout: float) -> Result:
    argv = [exe, *shell_words(localise(line.text, d), d)[1:]]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, cwd=d, capture_output=True, text=True, timeout=timeout,
                           start_new_session=True)
        status: int | str = p.returncode
        out, err = p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        status, out, err = "hang", str(e.stdout or ""), str(e.stderr or "")
    return Result(line, status, time.perf_counter() - t0, judge(status, out, err))


def walk(lines: list[Line], exe: str, d: Path, timeout: float,
         echo: bool = True) -> list[Result]:
    """Run ``lines`` in order in ``d``; background lines run until their block ends."""
    results: list[Result] = []
    background: list[tuple[Line, subprocess.Popen, float]] = []

    def stop_background() -> None:
        for line, proc, t0 in background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                status: int | str = 0  # stopped by us: a running service is fine
            else:
                status = proc.returncode
            out, err = proc.communicate()
            results.append(Result(line, status, time.perf_counter() - t0,
                                  judge(status, out or "", err or "")))
        background.clear()

    block = None
    for line in lines:
        if line.block != block:
            stop_background()
            block = line.block
        if line.background:
            argv = [exe, *shell_words(localise(line.text, d), d)[1:]]
            proc = subprocess.Popen(argv, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)
            background.append((line, proc, time.perf_counter()))
            time.sleep(1.0)
            continue
        r = run_line(line, exe, d, timeout)
        results.append(r)
        if echo:
            print(f"{line.number:3d} {r.status!s:>5} {r.seconds:7.1f}s  {r.verdict}  | "
                  f"{line.text[:90]}", flush=True)
    stop_background()
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds before a hang")
    ap.add_argument("--skip-slow", action="store_true", help="skip the lines listed in SLOW")
    ap.add_argument("--list", action="store_true", help="print the lines and exit")
    ap.add_argument("--keep", action="store_true", help="keep the walk's folder")
    args = ap.parse_args()
    lines = readme_lines()
    if args.list:
        for ln in lines:
            print(f"{ln.number:3d} {'&' if ln.background else ' '} {ln.text}")
        return 0
    if args.skip_slow:
        lines = [ln for ln in lines if not any(k in ln.text for k in SLOW)]
    exe = shutil.which("shuffledp", path=str(Path(sys.executable).parent)) or "shuffledp"
    d = Path(tempfile.mkdtemp(prefix="newcomer-walk-"))
    make_inputs(d)
    prepare(exe, d)
    t0 = time.perf_counter()
    try:
        results = walk(lines, exe, d, args.timeout)
    finally:
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
    failed = [r for r in results if r.verdict.startswith("FAIL")]
    print(f"\n{len(results)} lines in {time.perf_counter() - t0:.0f} s; "
          f"{len(failed)} failed")
    for r in sorted(results, key=lambda r: -r.seconds)[:5]:
        print(f"  slowest: {r.seconds:7.1f}s  {r.line.text[:80]}")
    for r in failed:
        print(f"  FAILED: line {r.line.number}: {r.verdict}: {r.line.text}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
