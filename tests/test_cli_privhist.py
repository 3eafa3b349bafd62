"""``shuffledp privhist``: files written, one-line errors with the line number."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from shuffledp.analyzers.privhist import estimate_properties, load_frequency_list
from shuffledp.cli import main


def test_privhist_writes_histogram_and_report(tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("5\n3,2\n1,10\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["privhist", "--input", str(src), "--epsilon", "2", "--out",
                                    str(out), "--seed", "3", "--report-error"])
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["guarantee"]["notion"] == "pure" and rep["release"] == "reproducible evaluation"
    assert "sorted-l1" in rep["guarantee"]["neighbour"] or "sorted l1" in rep["guarantee"][
        "neighbour"]
    assert rep["labels"] == load_frequency_list(out / "histogram.txt").support
    assert isinstance(rep["sorted_l1_error"], int) and rep["notes"]


def test_privhist_bad_file_names_the_line(tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("5\n-3\n")
    res = CliRunner().invoke(main, ["privhist", "--input", str(src), "--epsilon", "1", "--out",
                                    str(tmp_path / "o")])
    assert res.exit_code == 1 and "line 2" in res.output and "Traceback" not in res.output


def test_privhist_bad_epsilon_is_usage_error(tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("5\n")
    res = CliRunner().invoke(main, ["privhist", "--input", str(src), "--epsilon", "-1", "--out",
                                    str(tmp_path / "o")])
    assert res.exit_code == 2 and "--epsilon" in res.output


def test_privhist_report_has_property_estimates(tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("5,4\n")  # 4 labels x 5 items
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["privhist", "--input", str(src), "--epsilon", "50", "--out",
                                    str(out), "--seed", "1", "--report-error",
                                    "--support-bound", "8", "--coverage-samples", "2"])
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "report.json").read_text())
    truth = rep["properties_non_private"]
    assert truth["entropy"] == pytest.approx(math.log(4))
    assert truth["support_size"] == 0.5 and truth["m"] == 2 and truth["k"] == 8
    assert truth["distance_to_uniformity"] == pytest.approx(1.0)
    private = rep["properties"]
    released = load_frequency_list(out / "histogram.txt")
    expected = estimate_properties(released, rep["N"], k=8, m=2).to_dict()
    assert private == pytest.approx(expected)


def test_privhist_properties_without_support_bound(tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("3,2\n1,5\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["privhist", "--input", str(src), "--epsilon", "1", "--out",
                                    str(out), "--seed", "2"])
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["properties"]["support_size"] is None
    assert rep["properties"]["m"] == max(rep["N"], 1)
    assert "properties_non_private" not in rep


def test_privhist_bad_support_bound_is_usage_error(tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("5\n")
    res = CliRunner().invoke(main, ["privhist", "--input", str(src), "--epsilon", "1", "--out",
                                    str(tmp_path / "o"), "--support-bound", "0"])
    assert res.exit_code == 2 and "--support-bound" in res.output


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "oversize"])
def test_privhist_input_goes_through_the_safe_reader(tmp_path, kind):
    """Regression: --input accepted a FIFO (hung) and /dev/zero (memory grew until the
    process was killed). Now both are refused at once (exit 2), a file above the size cap
    is refused (exit 1) without being read; one line, no traceback."""
    import os
    import subprocess
    import sys

    if kind == "fifo":
        path = tmp_path / "counts.fifo"
        os.mkfifo(path)
    elif kind == "dev-zero":
        path = "/dev/zero"
    else:
        path = tmp_path / "big.txt"
        with open(path, "wb") as fh:
            fh.truncate((64 << 20) + 1)
    res = subprocess.run([sys.executable, "-c", "from shuffledp.cli import main; main()",
                          "privhist", "--input", str(path), "--epsilon", "1", "--out",
                          str(tmp_path / "o")], capture_output=True, text=True, timeout=60)
    assert res.returncode == (1 if kind == "oversize" else 2), res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("Error:") and "--input" in last and "Traceback" not in res.stderr
    assert ("more than the 67108864 allowed" in last) == (kind == "oversize")
    assert not (tmp_path / "o").exists()
