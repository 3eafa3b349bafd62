"""``shuffledp privhist``: a pure-DP anonymized histogram from a frequency list ([Suresh19]_).

Reads ``--input`` (``count`` or ``count,prevalence`` per line), runs PrivHist at ``--epsilon``
and writes ``DIR/histogram.txt`` (the private histogram, ``count,prevalence`` lines) and
``DIR/report.json`` (N, the guarantee, the parameters and the plug-in symmetric property
estimates of [Suresh19]_ Sec. 3.2 computed from the release, post-processing: entropy,
support coverage, and with ``--support-bound K`` the normalised support size and distance to
uniformity). ``--report-error`` adds the sorted-l1 distance to the input and the same
properties of the input: those depend on the data without noise, so they are for
evaluation only (the report says so). ``--seed`` makes a reproducible evaluation run, not a
private release. Errors follow :mod:`shuffledp.cli.common` (usage errors exit 2, a bad input
file exits 1 with the line number, never a traceback). ``--input`` is read through
:mod:`shuffledp.safe_io`: a regular file of at most :data:`INPUT_LIMIT` bytes (``--allow-large``
lifts the cap); a FIFO, a device such as ``/dev/zero`` or a directory is refused at once
(exit 2) instead of hanging or filling memory.

References
----------
.. [Suresh19] Suresh (2019), "Differentially private anonymized histograms"
   -- full entry in docs/references.md
"""

from __future__ import annotations

from pathlib import Path

import click

from shuffledp.cli.common import (
    COUNT,
    SEED,
    Command,
    allow_large_option,
    epsilon_option,
    force_option,
    out_dir_option,
    write_report,
)

# scipy loads inside the command (PrivHist's isotonic step), not at `shuffledp --help`.
SPLITS = ("lean", "paper", "practical")  # = ...privhist.mechanism.SPLITS (tested)
REGIMES = ("auto", "paper", "low", "high")  # = ...privhist.mechanism.REGIMES (tested)
#: bytes of --input read at most (about 8 million lines); --allow-large lifts it
INPUT_LIMIT = 64 << 20
ERROR_NOTE = ("sorted_l1_error and properties_non_private are computed from the input "
              "without noise: evaluation only, do not publish them with the release")


@click.command("privhist", cls=Command)
@click.option("--input", "input_path", type=click.Path(exists=True),
              required=True, help="Frequency list: 'count' or 'count,prevalence' per line.")
@epsilon_option(required=True, help="Total privacy budget epsilon (> 0).")
@out_dir_option(writes=("histogram.txt", "report.json"), required=True)
@force_option()
@click.option("--split", type=click.Choice(SPLITS), default="lean", show_default=True,
              help="Budget split: lean (eps/20 to the count N, the most accurate measured), "
                   "paper (eps/3 each, as the PrivHist box prints it: at eps > 1 LowPrivacy "
                   "does not use eps3, so the release spends and states 2 eps/3), or App. "
                   "C.1.3's practical choice (eps/10 to N).")
@click.option("--regime", type=click.Choice(REGIMES), default="auto", show_default=True,
              help="Post-processing: auto = HighPrivacy only while eps sqrt(N) < 20 (N the "
                   "released count), paper = the PrivHist box's switch (HighPrivacy when "
                   "eps <= 1), or forced low / high. The paper's algorithm: --split paper "
                   "--regime paper.")
@click.option("--seed", type=SEED, default=None,
              help="Reproducible evaluation (not a private release).")
@click.option("--report-error", "report_error", is_flag=True,
              help="Add the sorted-l1 error to the input (evaluation only).")
@click.option("--support-bound", "support_bound", type=COUNT, default=None,
              help="Public bound k on the support size: adds the normalised support size "
                   "and the distance to uniformity to the property estimates.")
@click.option("--coverage-samples", "coverage_samples", type=COUNT, default=None,
              help="m of the support coverage estimate  [default: the released N]")
@allow_large_option
def privhist_cmd(input_path, epsilon, out_dir, force, split, regime, seed, report_error,
                 support_bound, coverage_samples, allow_large):
    """Release an anonymized histogram under pure epsilon-DP (PrivHist)."""
    from shuffledp.analyzers.privhist import (
        estimate_properties,
        privhist,
        sorted_l1,
    )
    from shuffledp.analyzers.privhist.histogram import parse_frequency_list, write_frequency_list

    text = _read_input(input_path, allow_large)
    try:
        h = parse_frequency_list(text.splitlines(), source=input_path)
    except ValueError as e:  # a line's text is quoted: keep the message one short line
        raise click.ClickException(_short(str(e))) from None
    release = privhist(h, epsilon, split=split, regime=regime, rng=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_frequency_list(release.histogram, out / "histogram.txt")
    report = {
        "mechanism": "PrivHist",
        "release": "reproducible evaluation" if seed is not None else "private",
        "N": release.total,
        "labels": release.histogram.support,
        "guarantee": release.guarantee.to_dict(),
        "variant": {"split": split, "regime": release.parameters["regime"],
                    "rule": release.parameters["regime_rule"]},
        # the released histogram's own total (post-processing), not the noisy N: the plug-in
        # probabilities then sum to 1 (bench/privhist_entropy_bias.py)
        "properties": estimate_properties(release.histogram,
                                          release.histogram.n or release.total,
                                          k=support_bound, m=coverage_samples).to_dict(),
    }
    if report_error:
        report["sorted_l1_error"] = sorted_l1(h, release.histogram)
        report["properties_non_private"] = estimate_properties(
            h, h.n, k=support_bound, m=coverage_samples).to_dict()
        report["notes"] = [ERROR_NOTE]
    write_report(out, report)
    click.echo(f"N = {release.total}, {release.histogram.support} labels, "
               f"epsilon = {release.guarantee.epsilon:g}; wrote {out}/histogram.txt and "
               "report.json")


def _read_input(path: str, allow_large: bool) -> str:
    """``--input`` through the safe reader: exit 2 if it is not a regular file (a FIFO, a
    device, a directory), 1 if it is larger than :data:`INPUT_LIMIT` or not UTF-8."""
    from shuffledp.safe_io import NotRegularFileError, UnsafeFileError, read_regular_text

    try:
        return read_regular_text(path, (1 << 62) if allow_large else INPUT_LIMIT,
                                 what="--input")
    except NotRegularFileError as e:
        raise click.BadParameter(str(e), param_hint="--input") from None
    except UnsafeFileError as e:
        hint = "; pass --allow-large to read it" if "more than the" in str(e) else ""
        raise click.ClickException(f"{e}{hint}") from None


def _short(text: str, most: int = 300) -> str:
    return text if len(text) <= most else text[:most] + "... (shortened)"
