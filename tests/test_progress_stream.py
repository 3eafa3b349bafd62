"""Progress output must never hang or fail a job: tqdm holds its lock around each redraw
without a ``finally``, so a redraw that raised (stderr gone, a broken pipe after the reader
died) used to leave the lock held and every other thread updating a bar waiting forever.
That hung an orphaned ``shuffledp heatmap`` in its metric threads. The bars now write
through :class:`shuffledp.cli.common.SafeStream`."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from shuffledp.cli.common import SafeStream, progress_bar


class BrokenPipe:
    """A stream whose reader went away."""

    writes = 0

    def write(self, text: str) -> int:
        BrokenPipe.writes += 1
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def isatty(self) -> bool:
        return False


def test_safe_stream_swallows_a_broken_pipe_once_and_goes_quiet():
    BrokenPipe.writes = 0
    s = SafeStream(BrokenPipe())
    assert s.write("abc") == 3 and s.broken
    s.write("more")
    s.flush()
    assert BrokenPipe.writes == 1  # nothing is attempted after the first failure


def test_threads_updating_a_bar_on_a_broken_stream_finish():
    """Two threads update one bar drawn at every step on a broken stream; both finish (with
    the old unguarded stream the first redraw raised in a thread and leaked tqdm's lock)."""
    done = threading.Event()

    def run() -> None:
        with progress_bar(200, "metrics", "step", quiet=False, delay=0.0,
                          file=BrokenPipe()) as bar:
            bar.miniters, bar.mininterval = 1, 0.0

            def work(k: int) -> int:
                for _ in range(100):
                    bar.update(1)
                return k

            with ThreadPoolExecutor(2) as pool:
                assert sorted(pool.map(work, range(2))) == [0, 1]
        done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    assert done.is_set(), "progress on a broken stream hung the job"
