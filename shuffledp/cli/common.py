"""Shared pieces of the command line: error path, option types and names, outputs, limits.

Error path. Every command is a :class:`Command` (every group a :class:`Group`), whose
``invoke`` runs inside :func:`one_line_errors`. Exit codes of every command: 0 success; 2
usage error (a bad option value, a missing or contradictory option, a path that is not a
regular file); 1 refusal (input whose content is invalid, a parameter set that no protocol
supports or whose size is absurd, an existing key, and every :class:`shuffledp.Refused`: a
release the analyzer refuses, a refused secure-aggregation step, an exceeded budget). Every
error is one line on stderr naming the option or file and the value; no traceback reaches the
user. Inside a command, :func:`as_usage_error` and :func:`as_refusal` classify a library
call's ``ValueError`` / ``TypeError`` explicitly.

Option names. The same thing has the same option in every command, declared once here:
``--grid`` (:data:`GRID`, the one grid parser), ``--epsilon``, ``--delta``,
``--n`` (the number of users), ``--B``, ``--w``, and ``--out``: a
directory (:func:`out_dir_option`, alias ``--out-dir``) for a command that writes a set of
files, a file (:func:`out_file_option`) for one that writes one artefact. Aliases are the old
spellings, accepted and hidden from ``--help`` (:class:`AliasOption`).

Outputs. ``report.json`` is written by :func:`write_report` (the common fields come from
:meth:`shuffledp.analyzers.heatmap.release.HeatmapRelease.to_report`), arrays by :func:`write_npy`.

Resource limits. A parameter set that would need more than :data:`MAX_MESSAGES_PER_USER`
messages per user or an estimated :data:`MAX_MEMORY_BYTES` of memory is refused before
anything is allocated, unless ``--allow-large`` is given. The estimates are linear models
fitted to peak resident memory measured with ``bench/cli_memory.py``.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

# the report and array writers are shared with the services (shuffledp.serve): base layer
from shuffledp.accounting.budget import DEFAULT_DROPOUT
from shuffledp.errors import Refused
from shuffledp.safe_io import (  # noqa: F401
    NotRegularFileError,
    json_default,
    write_npy,
    write_report,
)

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

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


# --------------------------------------------------------------------------- error path
@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Turn library errors into one-line click errors (exit status 1, no traceback).

    Input errors (ValueError, TypeError, OSError, ...) and refusals (:class:`shuffledp.Refused`,
    a ``ValueError``) become ``Error: <message>``; a
    MemoryError says so; any other exception becomes ``Error: unexpected <type>: <message>``
    unless the environment variable ``SHUFFLEDP_TRACEBACK`` is set (then it propagates).
    Click's own exceptions (usage errors, exit 2) pass through unchanged.
    """
    try:
        yield
    except MemoryError:
        raise click.ClickException(
            "out of memory; lower the grid, the number of users or the input size"
        ) from None
    except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
        raise
    except NotRegularFileError as exc:  # a path that is not a regular file: a usage error
        raise click.UsageError(str(exc)) from None
    except (ValueError, TypeError, OSError, KeyError, csv.Error, RecursionError) as exc:
        raise click.ClickException(str(exc) or type(exc).__name__) from exc
    except Exception as exc:  # last resort: one line, the traceback only on request
        if os.environ.get("SHUFFLEDP_TRACEBACK"):
            raise
        raise click.ClickException(
            f"unexpected {type(exc).__name__}: {exc} (set SHUFFLEDP_TRACEBACK=1 to see "
            "where)") from exc


class Command(click.Command):
    """A click command that runs inside :func:`one_line_errors`, refuses to overwrite the
    outputs of an earlier run (:class:`OutputOption`, unless ``--force``) and accepts the
    deprecated spellings of its options (:class:`AliasedOption`) with a warning."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _rewrite_aliases(self, args))

    def invoke(self, ctx: click.Context) -> Any:
        with one_line_errors():
            refuse_overwrite(self, ctx)
            try:
                return super().invoke(ctx)
            except OSError as exc:
                named = _output_error(self, ctx, exc)
                if named is None:
                    raise
                raise named from None


class Group(click.Group):
    """A click group whose commands and subgroups are :class:`Command` and :class:`Group`."""

    command_class = Command
    group_class = type  # subgroups of the same class

    def invoke(self, ctx: click.Context) -> Any:
        with one_line_errors():
            return super().invoke(ctx)


_LIBRARY_ERRORS = (ValueError, TypeError, ArithmeticError)


def as_usage_error(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``; its ValueError/TypeError/ArithmeticError is a usage error
    (exit 2): an option value outside the domain the library accepts. A
    :class:`shuffledp.Refused` stays a refusal (exit 1)."""
    try:
        return fn(*args, **kwargs)
    except Refused as exc:
        raise click.ClickException(str(exc)) from None
    except _LIBRARY_ERRORS as exc:
        raise click.UsageError(str(exc)) from None


def as_refusal(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``; its ValueError/TypeError/ArithmeticError is a refusal (exit
    1) reading ``<what>: <reason>``: valid options for which the library refuses to answer
    (no protocol for these parameters, a release refused)."""
    try:
        return fn(*args, **kwargs)
    except _LIBRARY_ERRORS as exc:
        raise click.ClickException(f"{what}: {exc}" if what else str(exc)) from None


# --------------------------------------------------------------------------- option types
class GridType(click.ParamType):
    """``N`` (an N x N grid) or ``WIDTHxHEIGHT``: the one grid parser of the command line."""

    name = "grid"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        from shuffledp.grid import Grid

        if isinstance(value, Grid):
            return value
        try:
            return Grid.parse(str(value))
        except (ValueError, TypeError) as exc:
            self.fail(str(exc), param, ctx)


class Count(click.ParamType):
    """An integer ``>= low``; accepts 100000, 1e5, 1_000."""

    name = "integer"

    def __init__(self, low: int = 1) -> None:
        self.low = low

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        x: int | None
        if isinstance(value, int) and not isinstance(value, bool):
            x = value
        else:
            x = _integer(str(value))
        if x is None or x < self.low:
            self.fail(f"must be an integer >= {self.low}, got {value!r}", param, ctx)
        return x


def _integer(text: str) -> int | None:
    """int of ``text`` ("1e5" and "1_000" included), None if it is not an integer."""
    text = text.strip().replace("_", "")
    try:
        return int(text)
    except ValueError:
        pass
    try:
        f = float(text)
    except ValueError:
        return None
    return int(f) if math.isfinite(f) and f.is_integer() else None


class Real(click.ParamType):
    """A real number in an interval (NaN refused; infinite ends are open)."""

    name = "number"

    def __init__(self, low: float = -math.inf, high: float = math.inf, *,
                 closed_low: bool = False, closed_high: bool = False) -> None:
        self.low, self.high = low, high
        self.closed_low, self.closed_high = closed_low, closed_high

    def describe(self) -> str:
        if self.high == math.inf:
            return f"a finite number {'>=' if self.closed_low else '>'} {self.low:g}"
        return (f"in {'[' if self.closed_low else '('}{self.low:g}, {self.high:g}"
                f"{']' if self.closed_high else ')'}")

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"must be a number, got {value!r}", param, ctx)
        ok_low = x >= self.low if self.closed_low else x > self.low
        ok_high = x <= self.high if self.closed_high else x < self.high
        if not (ok_low and ok_high and math.isfinite(x)):
            self.fail(f"must be {self.describe()}, got {value!r}", param, ctx)
        return x


GRID = GridType()
COUNT = Count(1)
SEED = Count(0)
POSITIVE = Real(0.0)
NONNEGATIVE = Real(0.0, closed_low=True)
UNIT = Real(0.0, 1.0)
UNIT_CLOSED_HIGH = Real(0.0, 1.0, closed_high=True)
UNIT_CLOSED_LOW = Real(0.0, 1.0, closed_low=True)
PERCENT = Real(0.0, 100.0, closed_high=True)


# --------------------------------------------------------------------------- option names
def option(name: str, dest: str, **kwargs: Any) -> Callable[[F], F]:
    """``click.option(name, dest, ...)``: one spelling per option, named by its destination."""
    return click.option(name, dest, **kwargs)


def grid_option(**kwargs: Any) -> Callable[[F], F]:
    """``--grid``: N (an N x N grid) or WIDTHxHEIGHT, parsed by :data:`GRID`."""
    kwargs.setdefault("help", "N (an N x N grid) or WIDTHxHEIGHT, e.g. 320x240.")
    return option("--grid", "grid", type=GRID, show_default=True, **kwargs)


def epsilon_option(**kwargs: Any) -> Callable[[F], F]:
    """``--epsilon``: the privacy budget, a finite number > 0."""
    kwargs.setdefault("help", "Privacy budget epsilon of the (epsilon, delta) guarantee.")
    return option("--epsilon", "epsilon", type=POSITIVE,
                  show_default=True, **kwargs)


def delta_option(**kwargs: Any) -> Callable[[F], F]:
    """``--delta``: delta of the (epsilon, delta) guarantee, in (0, 1)."""
    kwargs.setdefault("help", "delta of the (epsilon, delta) guarantee, in (0, 1).")
    return option("--delta", "delta", type=UNIT, show_default=True, **kwargs)


def n_option(low: int = 1, **kwargs: Any) -> Callable[[F], F]:
    """``--n``: the number of users, an integer >= ``low``."""
    return option("--n", "n", type=Count(low), show_default=True,
                  **kwargs)


def B_option(**kwargs: Any) -> Callable[[F], F]:
    """``--B``: the scaling factor of the shuffle protocol, an integer >= 1."""
    kwargs.setdefault("help", "Scaling factor B of the shuffle protocol.")
    return option("--B", "B", type=COUNT, show_default=True, **kwargs)


def w_option(**kwargs: Any) -> Callable[[F], F]:
    """``--w``: children kept per level by Reconstruct, an integer >= 1."""
    kwargs.setdefault("help", "Children kept per level by Reconstruct (fixes the start level).")
    return option("--w", "w", type=COUNT, default=20, show_default=True, **kwargs)


def dropout_option(**kwargs: Any) -> Callable[[F], F]:
    """``--dropout``: the declared dropout fraction of the shuffle summation protocol,
    default :data:`shuffledp.accounting.budget.DEFAULT_DROPOUT`."""
    kwargs.setdefault(
        "help", "Declared dropout fraction, in [0, 1): the noise is planned for "
        "n_min = ceil((1 - dropout) n) users and the analyzer releases with any n_min of them "
        "(0 refuses the round if one user is lost or removed; the default costs about 2.6% "
        "more noise standard deviation when all n are present, and leaves no headroom below "
        "n = 20).")
    return option("--dropout", "dropout", type=UNIT_CLOSED_LOW, default=DEFAULT_DROPOUT,
                  show_default=True, **kwargs)


def smoothing_option(**kwargs: Any) -> Callable[[F], F]:
    """``--smoothing auto|density|none``: the release's post-processing
    (:meth:`~shuffledp.analyzers.heatmap.release.HeatmapRelease.smoothed`: ``auto`` is
    ``method="posterior"``, ``density`` is ``method="density"``)."""
    kwargs.setdefault(
        "help", "auto: every pixel's count estimated by its posterior mean from the "
        "release's own noisy level counts, checked level by level against the coarser counts "
        "(post-processing, no privacy cost); density: the smooth density read off those "
        "counts top down (the previous default); none: Reconstruct's output as is (Ghazi et "
        "al. Alg. 2). The dense algorithm's output (--algorithm dense) is a dense map already "
        "and is left as is.")
    return option("--smoothing", "smoothing", type=click.Choice(["auto", "density", "none"]),
                  default="auto", show_default=True, **kwargs)


def smoothing_method(smoothing: str) -> str:
    """The :meth:`~shuffledp.analyzers.heatmap.release.HeatmapRelease.smoothed` method of a
    ``--smoothing`` choice other than ``none``."""
    return "density" if smoothing == "density" else "posterior"


def out_dir_option(writes: tuple[str, ...] = (), **kwargs: Any) -> Callable[[F], F]:
    """``--out`` for a command that writes a set of files.

    ``writes`` names the files the command writes there: the command then refuses (exit 1)
    to run when one of them exists, unless ``--force`` (:func:`refuse_overwrite`; the
    command needs a :func:`force_option`).
    """
    kwargs.setdefault("help", "Output directory (created if missing).")
    return click.option("--out", "out_dir", cls=OutputOption, writes=tuple(writes),
                        type=click.Path(file_okay=False), show_default=True, **kwargs)


def out_file_option(checked: bool = True, **kwargs: Any) -> Callable[[F], F]:
    """``--out`` for a command that writes one artefact: the file to write (refused when it
    exists, unless ``--force``, if ``checked``)."""
    kwargs.setdefault("help", "Output file (its directory is created if missing).")
    return click.option("--out", "out_path", cls=OutputOption, writes=("",) if checked else (),
                        type=click.Path(dir_okay=False), **kwargs)


def force_option(**kwargs: Any) -> Callable[[F], F]:
    """``--force``: replace the outputs of an earlier run (:func:`refuse_overwrite`)."""
    kwargs.setdefault("help", "Replace the files an earlier run wrote to --out (without it "
                              "the command refuses to overwrite them).")
    return click.option("--force", is_flag=True, **kwargs)


class OutputOption(click.Option):
    """An ``--out`` option that knows the files its command writes (``writes``: names inside
    the directory, or ``("",)`` for the file itself)."""

    def __init__(self, *args: Any, writes: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes = writes


def refuse_overwrite(command: click.Command, ctx: click.Context) -> None:
    """Before the command runs: every ``--out`` can be created (a usage error, exit 2,
    naming the option otherwise), and none holds files an earlier run wrote (refused, exit
    1, unless ``--force``): no output is silently replaced."""
    for param in command.params:
        if not isinstance(param, OutputOption):
            continue
        value = ctx.params.get(param.name or "")
        if value is None:
            continue
        kind = param.type  # a click.Path
        _check_creatable(param.opts[0], os.fspath(value),
                         bool(getattr(kind, "file_okay", True)),
                         bool(getattr(kind, "dir_okay", True)))
        if not param.writes or ctx.params.get("force"):
            continue
        found = [name for name in param.writes
                 if os.path.lexists(os.path.join(os.fspath(value), name) if name
                                    else os.fspath(value))
                 and not (not name and os.path.isdir(value) and not os.listdir(value))]
        if not found:
            continue
        opt = param.opts[0]
        if found == [""]:
            raise click.ClickException(
                f"{opt} {value} exists; refusing to overwrite it (pass --force to replace "
                f"it, or choose another {opt})")
        raise click.ClickException(
            f"{opt} {value} holds {', '.join(os.path.join(value, f) for f in found)} of an "
            f"earlier run; refusing to overwrite (pass --force to replace them, or choose "
            f"another {opt})")


def _output_error(command: click.Command, ctx: click.Context,
                  exc: OSError) -> click.ClickException | None:
    """An OSError on a path inside one of the command's ``--out`` as a one-line error
    naming the option (None for any other path)."""
    if not exc.filename:
        return None
    failed = os.path.abspath(os.fspath(exc.filename))
    for param in command.params:
        value = ctx.params.get(param.name or "") if isinstance(param, OutputOption) else None
        if value is None:
            continue
        root = os.path.abspath(os.fspath(value))
        if failed == root or failed.startswith(root + os.sep) or root.startswith(failed + os.sep):
            return click.ClickException(f"{param.opts[0]} {value}: cannot write "
                                        f"{exc.filename}: {exc.strerror or exc}")
    return None


def _check_creatable(option: str, path: str, file_okay: bool, dir_okay: bool) -> None:
    """``path`` exists as a kind the option accepts (a file if ``file_okay``, a directory
    if ``dir_okay``) or can be created: its nearest existing ancestor is a writable
    directory."""
    p = os.path.abspath(path)
    if os.path.lexists(p):
        if os.path.isdir(p) and not dir_okay:
            raise click.BadParameter(f"{path} is a directory, expected a file",
                                     param_hint=option)
        if not os.path.isdir(p) and not file_okay:
            raise click.BadParameter(f"{path} is not a directory", param_hint=option)
        return
    parent = os.path.dirname(p)
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise click.BadParameter(f"cannot create {path}: {parent} is not a directory",
                                 param_hint=option)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise click.BadParameter(f"cannot create {path}: {parent} is not writable",
                                 param_hint=option)


class AliasedOption(click.Option):
    """An option with deprecated spellings (``aliases``): accepted, hidden from ``--help``,
    and each use warns on stderr naming the new spelling."""

    def __init__(self, *args: Any, aliases: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aliases = tuple(aliases)


def _rewrite_aliases(command: click.Command, args: list[str]) -> list[str]:
    """``args`` with every deprecated spelling replaced by its option's name (a warning
    each); arguments after ``--`` are left alone."""
    table = {a: p.opts[0] for p in command.params if isinstance(p, AliasedOption)
             for a in p.aliases}
    if not table:
        return args
    out: list[str] = []
    for k, arg in enumerate(args):
        if arg == "--":
            return out + list(args[k:])
        name, eq, rest = arg.partition("=")
        if name in table:
            warn(f"{name} is deprecated; use {table[name]} (same meaning)")
            arg = table[name] + eq + rest
        out.append(arg)
    return out


def input_option(dest: str = "input_path", aliases: tuple[str, ...] = (),
                 **kwargs: Any) -> Callable[[F], F]:
    """``--input``: the one name of a command's input file (or, for a command that reads a
    set of files, their directory); ``aliases`` are the deprecated spellings."""
    return click.option("--input", dest, cls=AliasedOption, aliases=aliases, **kwargs)


# --------------------------------------------------------------------------- outputs
# --------------------------------------------------------------------------- resource limits
def allow_large_option(fn: F) -> F:
    """The ``--allow-large`` flag (overrides :func:`refuse_if_large`)."""
    return click.option(
        "--allow-large", is_flag=True,
        help=f"Run even above {MAX_MESSAGES_PER_USER:.0e} messages per user or an estimated "
             f"{MAX_MEMORY_BYTES >> 30} GiB of memory.",
    )(fn)


class SafeStream:
    """A text stream for progress output that never raises: once a write or flush fails
    (stderr closed, a broken pipe after the reader went away) it drops everything after.

    tqdm takes its lock around each redraw without a ``finally``: a redraw that raises leaves
    the lock held, and every other thread updating a bar (the metric threads, tqdm's monitor)
    then waits forever. Progress is a courtesy; the job must not hang or fail for it.
    """

    def __init__(self, stream: Any = None) -> None:
        self._stream = stream
        self.broken = False

    def _target(self) -> Any:
        return self._stream if self._stream is not None else sys.stderr

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self._target().write(text)
            except (OSError, ValueError):
                self.broken = True
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._target().flush()
            except (OSError, ValueError):
                self.broken = True

    def isatty(self) -> bool:
        try:
            return bool(self._target().isatty())
        except (OSError, ValueError, AttributeError):
            return False

    def fileno(self) -> int:
        return int(self._target().fileno())


def progress_bar(total: int, desc: str, unit: str, quiet: bool, delay: float = 1.0,
                 file: Any = None) -> Any:
    """A tqdm bar on stderr with rate and ETA, shown only once a step has run ``delay``
    seconds (short steps stay silent); a bar that draws nothing with ``quiet``.

    Used as a context manager; ``bar.update(k)`` after k units of work. Output goes through
    a :class:`SafeStream` (``file``, default stderr): a closed or broken stream silences the
    bar instead of failing or deadlocking the job.
    """
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=quiet, delay=delay,
                dynamic_ncols=True, leave=False, file=SafeStream(file))


class EstimatedProgress:
    """A progress bar on stderr for a step that reports no progress of its own: it advances
    with the time elapsed against an estimate of the step's duration (measured on a sample of
    the work by the caller), so it shows an ETA; it stops at 99% until the step ends. Nothing
    is drawn with ``quiet`` or for a step shorter than ``delay`` seconds.

    Used as a context manager around the step.
    """

    def __init__(self, desc: str, seconds: float | None, quiet: bool,
                 delay: float = 1.0) -> None:
        self.desc, self.seconds, self.quiet, self.delay = desc, seconds, quiet, delay
        self._done: Any = None
        self._thread: Any = None

    def __enter__(self) -> EstimatedProgress:
        import threading
        import time

        if self.quiet:
            return self
        self._done = threading.Event()
        start = time.perf_counter()
        total = None if self.seconds is None else max(1, round(self.seconds))

        def run() -> None:
            from tqdm import tqdm

            assert self._done is not None
            if self._done.wait(self.delay):
                return
            desc = self.desc + (" (estimated)" if total is not None else "")
            with tqdm(total=total, desc=desc, unit="s", dynamic_ncols=True, leave=False,
                      file=SafeStream(), bar_format=None if total is not None else
                      "{desc}: {elapsed} elapsed") as bar:
                while not self._done.wait(0.5):
                    now = time.perf_counter() - start
                    target = now if total is None else min(now, 0.99 * total)
                    bar.update(max(0.0, target - bar.n))
                if total is not None:
                    bar.update(total - bar.n)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._done is not None:
            self._done.set()
        if self._thread is not None:
            self._thread.join()


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
    --memory-limit`` (:class:`shuffledp.protocol.shuffler.Shuffler`).
    """
    from shuffledp.protocol.crypto import encrypted_record_bytes

    per_message = 4 + 8 + 2 * encrypted_record_bytes(params)
    encoder = params.messages_per_user * per_message + 32 * params.m
    analyzer = 64 * params.m + params.grid.n_pixels * (PIXEL_BYTES + PIXEL_BYTES_PER_BASELINE)
    return int(BASE_BYTES + max(encoder, analyzer))


def parse_bbox(value: str | None) -> tuple[float, float, float, float] | None:
    """--bbox LAT_MIN,LAT_MAX,LON_MIN,LON_MAX as four finite floats (None if not given)."""
    if value is None:
        return None
    try:
        parts = tuple(float(v) for v in value.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 4 or not all(map(math.isfinite, parts)):
        raise click.BadParameter(
            f"must be LAT_MIN,LAT_MAX,LON_MIN,LON_MAX, got {value!r}", param_hint="--bbox"
        )
    return parts
