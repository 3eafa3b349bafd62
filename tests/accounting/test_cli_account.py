"""`shuffledp account` group: JSON keys, table output, errors naming option and value."""

import json

import pytest
from click.testing import CliRunner

from shuffledp.cli.account import account


def run(*args):
    return CliRunner().invoke(account, list(args))


def test_emd_itemwise_inverse_json():
    r = run("emd-itemwise", "--model", "central", "--m", "1000", "--n", "100000",
            "--delta", "1e-12", "--target-alpha", "25", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    for k in ("alpha", "alpha0", "delta_out", "valid", "composition_alpha0"):
        assert k in d
    assert d["alpha0"] == pytest.approx(2.7013, abs=1e-4) and d["alpha"] <= 25
    assert d["composition_alpha0"] == 0.025 and d["valid"] is True


def test_emd_itemwise_forward_table_and_json():
    r = run("emd-itemwise", "--model", "local", "--m", "1000", "--delta", "1e-12",
            "--alpha0", "0.03")
    assert r.exit_code == 0 and "alpha0" in r.stdout and "composition_alpha" in r.stdout
    d = json.loads(run("emd-itemwise", "--model", "local", "--m", "1000", "--delta", "1e-12",
                       "--alpha0", "0.03", "--json").stdout)
    assert d["composition_alpha"] == pytest.approx(30.0) and "delta_out" in d


def test_emd_itemwise_vacuous_warns():
    r = run("emd-itemwise", "--model", "local", "--m", "100", "--delta", "1e-6",
            "--alpha0", "1", "--json")
    assert r.exit_code == 0
    d = json.loads(r.stdout)  # stdout is exactly one JSON object
    assert d["valid"] is False
    assert d["delta_out"] is None or d["delta_out"] >= 1
    assert "WARNING" in r.stderr and "vacuous" in r.stderr


def test_shuffle_ldp_json():
    d = json.loads(run("shuffle-ldp", "--n", "100000", "--eps0", "1", "--delta", "1e-6",
                       "--json").stdout)
    assert d["method"] == "variation-ratio" and d["epsilon"] <= 0.0126  # tightest
    assert d["epsilon_lower"] <= d["epsilon"]
    d = json.loads(run("shuffle-ldp", "--n", "100000", "--eps0", "1", "--delta", "1e-6",
                       "--method", "numerical", "--json").stdout)
    assert d["method"] == "numerical" and 0.015 <= d["epsilon"] <= 0.016
    d = json.loads(run("shuffle-ldp", "--n", "1e5", "--eps0", "1", "--delta", "1e-6",
                       "--method", "closed-form", "--json").stdout)
    assert d["method"] == "closed-form" and d["epsilon"] == pytest.approx(0.07255, abs=1e-4)


def test_summation_json_and_table():
    r = run("summation", "--n", "50", "--epsilon", "5", "--delta", "1e-5", "--B", "1000",
            "--grid", "320x240", "--json")
    d = json.loads(r.stdout)
    for k in ("r", "q", "m", "messages_per_user", "bits_per_user"):
        assert k in d
    assert d["m"] == 102406 and d["messages_per_user"] == d["r"] * d["m"]
    t = run("summation", "--n", "50", "--epsilon", "5", "--delta", "1e-5", "--B", "1000",
            "--grid", "320x240")
    assert t.exit_code == 0 and "bits_per_user" in t.stdout


@pytest.mark.parametrize("args,needle", [
    (["shuffle-ldp", "--n", "1000", "--eps0", "1", "--delta", "1.5"], ["--delta", "1.5"]),
    (["shuffle-ldp", "--n", "1000", "--eps0", "1", "--delta", "0"], ["--delta", "'0'"]),
    (["shuffle-ldp", "--n", "1000", "--eps0", "0", "--delta", "1e-6"], ["--eps0", "'0'"]),
    (["shuffle-ldp", "--n", "1000", "--eps0", "-1", "--delta", "1e-6"], ["--eps0", "-1"]),
    (["shuffle-ldp", "--n", "0", "--eps0", "1", "--delta", "1e-6"], ["--n", "'0'"]),
    (["shuffle-ldp", "--n", "2.5", "--eps0", "1", "--delta", "1e-6"], ["--n", "2.5"]),
    (["shuffle-ldp", "--n", "ten", "--eps0", "1", "--delta", "1e-6"], ["--n", "ten"]),
    (["shuffle-ldp", "--n", "100", "--eps0", "1", "--delta", "1e-6", "--rtol", "0.9"],
     ["--rtol", "0.9"]),
    (["shuffle-ldp", "--n", "100", "--eps0", "1", "--delta", "1e-6", "--method", "x"],
     ["--method", "x"]),
    (["emd-itemwise", "--model", "central", "--m", "10", "--delta", "1e-6", "--alpha0", "1"],
     ["--n", "required"]),
    (["emd-itemwise", "--model", "local", "--m", "10", "--delta", "1e-6"],
     ["--alpha0", "--target-alpha"]),
    (["emd-itemwise", "--model", "local", "--m", "10", "--delta", "1e-6", "--alpha0", "1",
      "--target-alpha", "2"], ["exactly one"]),
    (["emd-itemwise", "--model", "local", "--m", "0", "--delta", "1e-6", "--alpha0", "1"],
     ["--m", "'0'"]),
    (["emd-itemwise", "--model", "local", "--m", "10", "--delta", "1e-6",
      "--target-alpha", "1"], ["target_alpha=1.0 cannot be reached"]),
    (["emd-itemwise", "--model", "local", "--m", "10", "--delta", "1e-6",
      "--alpha0", "0"], ["--alpha0", "'0'"]),
    (["emd-itemwise", "--model", "both", "--m", "10", "--delta", "1e-6",
      "--alpha0", "1"], ["--model", "both"]),
    (["summation", "--n", "1", "--epsilon", "1", "--delta", "1e-6", "--B", "10", "--grid", "8x8"],
     ["--n", "'1'"]),
    (["summation", "--n", "10", "--epsilon", "1", "--delta", "1e-6", "--B", "0", "--grid", "8x8"],
     ["--B", "'0'"]),
    (["summation", "--n", "10", "--epsilon", "1", "--delta", "1e-6", "--B", "10", "--grid", "8y"],
     ["--grid", "8y"]),
    (["summation", "--n", "10", "--epsilon", "0", "--delta", "1e-6", "--B", "10", "--grid", "8x8"],
     ["--epsilon", "'0'"]),
    (["summation", "--n", "10", "--epsilon", "1", "--delta", "1e-6", "--B", "10", "--grid", "8x8",
      "--dropout", "0.95"], ["dropout=0.95", "n_min"]),
    (["summation", "--n", "10", "--epsilon", "1", "--delta", "1e-6", "--B", "10", "--grid", "8x8",
      "--dropout", "1"], ["--dropout", "'1'"]),
], ids=["ldp-delta-above-one", "ldp-delta-zero", "ldp-eps0-zero", "ldp-eps0-negative",
        "ldp-n-zero", "ldp-n-fraction", "ldp-n-text", "ldp-rtol-above-half",
        "ldp-method-unknown", "emd-central-without-n", "emd-neither-alpha", "emd-both-alphas",
        "emd-m-zero", "emd-target-unreachable", "emd-alpha0-zero", "emd-model-unknown",
        "sum-n-one", "sum-B-zero", "sum-grid-text", "sum-epsilon-zero", "sum-dropout-n-min",
        "sum-dropout-one"])
def test_bad_input_names_argument_and_value(args, needle):
    r = run(*args)
    assert r.exit_code != 0
    assert isinstance(r.exception, SystemExit)  # click usage error, not a traceback
    assert "Traceback" not in r.output
    for s in needle:
        assert s in r.output, (s, r.output)


@pytest.mark.parametrize("eps0", ["33", "36", "37", "100", "700"],
                         ids=lambda e: f"eps0-{e}")
def test_shuffle_ldp_large_eps0_reports_no_amplification(eps0):
    # eps0 >= 37 printed epsilon ~ 1e-12 with valid=true
    r = run("shuffle-ldp", "--n", "1000", "--eps0", eps0, "--delta", "1e-6", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["epsilon"] == float(eps0) and d["valid"] is False and d["delta"] == 0.0
    assert d["guarantee"]["epsilon"] == float(eps0)
    assert "WARNING: no amplification" in r.stderr and "vacuous" in r.stderr


def test_shuffle_ldp_refuses_cleanly():
    r = run("shuffle-ldp", "--n", "1e15", "--eps0", "1", "--delta", "1e-6")
    assert r.exit_code == 2 and "too large for the numerical method" in r.output
    assert "Traceback" not in r.output
    r = run("shuffle-ldp", "--n", "1000", "--eps0", "701", "--delta", "1e-6")
    assert r.exit_code == 2 and "eps0 must be <= 700 (e^eps0 overflows), got eps0=701" in r.output


@pytest.mark.parametrize("delta", ["1e-300", "5e-324"], ids=["delta-1e-300", "delta-subnormal"])
@pytest.mark.parametrize("args", [
    ("--model", "local", "--m", "1000", "--alpha0", "0.01"),
    ("--model", "central", "--m", "100", "--n", "1000", "--target-alpha", "5"),
    ("--model", "central", "--m", "100", "--n", "1000", "--alpha0", "0.1"),
    ("--model", "local", "--m", "100", "--target-alpha", "5"),
], ids=["local-forward", "central-inverse", "central-forward", "local-inverse"])
def test_emd_itemwise_tiny_delta_no_traceback(delta, args):
    # thm43_validity_limit raised "math domain error" for tiny delta
    r = run("emd-itemwise", *args, "--delta", delta, "--json")
    assert "domain error" not in r.output and "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    if r.exit_code == 0:
        d = json.loads(r.stdout)
        assert d["validity_limit"] is not None and d["delta"] == float(delta)
        assert d["valid"] == (d["guarantee"] is not None)
    else:  # the Thm 4.3 condition has no room: a one-line reason
        assert r.exit_code == 2 and "cannot be reached: Thm 4.3 needs alpha0" in r.output
    for method in ("closed-form", "numerical"):
        r = run("shuffle-ldp", "--n", "1000", "--eps0", "1", "--delta", delta,
                "--method", method, "--json")
        assert r.exit_code == 0 and json.loads(r.stdout)["epsilon"] == 1.0


def test_emd_itemwise_delta_out_cap():
    # the inverse issued delta' = 0.99999999938 as valid by default
    r = run("emd-itemwise", "--model", "local", "--m", "10000", "--delta", "1e-6",
            "--target-alpha", "200", "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and d["valid"] is True and d["delta_out"] <= 1e-3
    assert d["max_delta_out"] == 1e-3 and d["limited_by"] == "delta_out"
    r = run("emd-itemwise", "--model", "local", "--m", "10000", "--delta", "1e-6",
            "--alpha0", "0.0069", "--json")
    d = json.loads(r.stdout)
    assert d["valid"] is False and d["vacuous"] is True and d["guarantee"] is None
    assert "exceeds max_delta_out=0.001" in r.stderr
    r = run("emd-itemwise", "--model", "local", "--m", "10000", "--delta", "1e-6",
            "--alpha0", "0.0069", "--max-delta-out", "0.9", "--json")
    assert json.loads(r.stdout)["valid"] is True
    r = run("emd-itemwise", "--model", "local", "--m", "10", "--delta", "1e-6",
            "--alpha0", "0.1", "--max-delta-out", "1.5")
    assert r.exit_code == 2 and "must be in (0, 1], got '1.5'" in r.output


@pytest.mark.parametrize("args,reason", [
    (["--n", "100000", "--B", "100000", "--grid", "64x64"], "q must be <= 2^32"),
    (["--n", "2", "--B", "1", "--grid", "8x8", "--epsilon", "1e-9"], "needs headroom"),
    (["--n", "10000000", "--B", "255", "--grid", "65536x65536", "--epsilon", "0.1"],
     "messages need 65 bits > 64"),
], ids=["q-above-2-32", "no-headroom", "message-above-64-bits"])
def test_summation_refuses_what_protocol_params_refuses(args, reason):
    # these printed parameter sets that ProtocolParams rejects (or crashed)
    from shuffledp.grid import Grid
    from shuffledp.protocol.params import derive_params

    kw = {"--epsilon": "1", "--delta": "1e-12"}
    kw.update(dict(zip(args[::2], args[1::2])))
    r = run("summation", *[x for kv in kw.items() for x in kv])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit)
    assert reason in r.output and "Traceback" not in r.output
    with pytest.raises(ValueError, match=reason.replace("^", r"\^")):
        derive_params(Grid.parse(kw["--grid"]), int(kw["--n"]), epsilon=float(kw["--epsilon"]),
                      delta=float(kw["--delta"]), B=int(kw["--B"]))
