"""Shared pieces of the command line: error handling, size limits, resource estimates.

Exit codes of every command: 0 success; 2 usage error (a bad option value, a missing or
contradictory option, a path that is not a regular file); 1 refusal (input whose content is
invalid, a parameter set whose size is absurd, a release the analyzer refuses, an existing
key). Every error is one line on stderr naming the option or file and the value; no
traceback reaches the user.

Resource limits. A parameter set that would need more than :data:`MAX_MESSAGES_PER_USER`
messages per user or an estimated :data:`MAX_MEMORY_BYTES` of memory is refused before
anything is allocated, unless ``--allow-large`` is given. The estimates are linear models
fitted to peak resident memory measured with ``bench/cli_memory.py``.
"""

from __future__ import annotations

import csv
import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

MAX_MESSAGES_PER_USER = 10**7
MAX_MEMORY_BYTES = 4 * 2**30
PARAMS_FILE_LIMIT = 1 << 20
REPORT_FILE_LIMIT = 1 << 20
POINTS_FILE_LIMIT = 16 << 20
KEY_BYTES = 32

# Linear memory model of `shuffledp heatmap` (bytes), fitted to peak RSS: interpreter and
# libraries; per grid pixel (float64 heatmaps, pyramid, one baseline each); per input point
# (CSV lists, PointTable, per-user grouping); the shuffle simulation's chunk buffers.
BASE_BYTES = 200 << 20
PIXEL_BYTES = 100
PIXEL_BYTES_PER_BASELINE = 24
POINT_BYTES = 260
SIMULATION_BYTES = 600 << 20


def friendly(fn: F) -> F:
    """Turn library input errors into one-line click errors (exit status 1, no traceback).

    Input errors (ValueError, TypeError, OSError, ...) become ``Error: <message>``; a
    MemoryError says so; any other exception becomes ``Error: unexpected <type>: <message>``
    unless the environment variable ``SHUFFLEDP_TRACEBACK`` is set (then it propagates).
    Click's own exceptions pass through unchanged.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MemoryError:
            raise click.ClickException(
                "out of memory; lower the grid, the number of users or the input size"
            ) from None
        except (ValueError, TypeError, OSError, KeyError, csv.Error, RecursionError) as exc:
            raise click.ClickException(str(exc) or type(exc).__name__) from exc
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:  # last resort: one line, the traceback only on request
            if os.environ.get("SHUFFLEDP_TRACEBACK"):
                raise
            raise click.ClickException(
                f"unexpected {type(exc).__name__}: {exc} (set SHUFFLEDP_TRACEBACK=1 to see "
                "where)") from exc

    return wrapper  # type: ignore[return-value]


def allow_large_option(fn: F) -> F:
    """The ``--allow-large`` flag (overrides :func:`refuse_if_large`)."""
    return click.option(
        "--allow-large", is_flag=True,
        help=f"Run even above {MAX_MESSAGES_PER_USER:.0e} messages per user or an estimated "
             f"{MAX_MEMORY_BYTES >> 30} GiB of memory.",
    )(fn)


def warn(message: str) -> None:
    """A loud one-line warning on stderr."""
    click.echo(f"WARNING: {message}", err=True)


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.3g} GiB"


def refuse_if_large(
    what: str,
    *,
    memory_bytes: float,
    messages_per_user: int | None = None,
    allow_large: bool = False,
) -> None:
    """Refuse (exit 1) a run whose per-user message count or memory estimate is absurd.

    Parameters
    ----------
    what : str
        The options responsible, with their values (e.g. ``"--grid 100000x100000"``).
    memory_bytes : float
        Estimated peak memory.
    messages_per_user : int, optional
        Messages every user would send.
    allow_large : bool
        The user's ``--allow-large``: skip the refusal.
    """
    problems = []
    if messages_per_user is not None and messages_per_user > MAX_MESSAGES_PER_USER:
        problems.append(
            f"{messages_per_user:,} messages per user (limit {MAX_MESSAGES_PER_USER:,})"
        )
    if memory_bytes > MAX_MEMORY_BYTES:
        problems.append(
            f"an estimated {gib(memory_bytes)} of memory (limit {gib(MAX_MEMORY_BYTES)})"
        )
    if problems and not allow_large:
        raise click.ClickException(
            f"refusing {what}: {' and '.join(problems)}; pass --allow-large to run anyway"
        )


def heatmap_memory(
    n_pixels: int, n_points: int, n_baselines: int, messages_per_user: int = 0, m: int = 0
) -> int:
    """Estimated peak memory (bytes) of ``shuffledp heatmap``.

    ``messages_per_user`` and ``m`` are those of the shuffle model (0 for the central one).
    """
    mem = BASE_BYTES + n_pixels * (PIXEL_BYTES + PIXEL_BYTES_PER_BASELINE * n_baselines)
    mem += n_points * POINT_BYTES
    if messages_per_user:
        mem += SIMULATION_BYTES + 16 * messages_per_user + 24 * m
    return int(mem)


def protocol_memory(params: Any) -> int:
    """Estimated peak memory (bytes) of one role on a user's batch or the analyzer's sums.

    Encoder: shares (4 bytes), packed messages (8), encrypted records built and joined
    (2 x record size) per message; analyzer: a few int64 arrays per coordinate and the
    Reconstruct arrays per pixel. The shuffler is not part of this per-user estimate: it
    streams the mixed batch through bucket files, its data bounded by ``shuffle
    --memory-limit`` (:class:`shuffledp.shuffler.Shuffler`).
    """
    from shuffledp.crypto import encrypted_record_bytes

    per_message = 4 + 8 + 2 * encrypted_record_bytes(params)
    encoder = params.messages_per_user * per_message + 32 * params.m
    analyzer = 64 * params.m + params.grid.n_pixels * (PIXEL_BYTES + PIXEL_BYTES_PER_BASELINE)
    return int(BASE_BYTES + max(encoder, analyzer))
