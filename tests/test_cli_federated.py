"""``shuffledp federated`` end to end for Bagdasaryan et al. Sec. 5.7 (multi-location users:
``--locations all``) and the dropout over-provisioning of Sec. 4 at Table 1's 10%-drop column
(``--dropout 0.12 --dropout-rate 0.1``), and under add/remove the publisher's top-up of a
shard left short by dropouts."""

import json

import numpy as np
from click.testing import CliRunner

from shuffledp.cli import main


def _csv(path, users=200, seed=0):
    """Each user: three weighted points around one of four centres (x, y in [0, 1))."""
    g = np.random.default_rng(seed)
    centres = np.array([[0.2, 0.3], [0.7, 0.6], [0.4, 0.8], [0.85, 0.15]])
    lines = ["user_id,x,y,weight"]
    truth = np.zeros((8, 8))
    for u in range(users):
        pts = np.clip(centres[g.integers(0, 4, 3)] + g.normal(0, 0.05, (3, 2)), 0, 0.999)
        w = g.integers(1, 5, 3).astype(float)
        for (x, y), wi in zip(pts, w, strict=True):
            lines.append(f"u{u},{x:.6f},{y:.6f},{wi}")
            truth[int(y * 8), int(x * 8)] += wi / w.sum()
    path.write_text("\n".join(lines) + "\n")
    return truth / truth.sum()


def test_multi_location_command_end_to_end(tmp_path):
    """Weighted normalisation and systematic rounding: l1 bound gamma, the guarantee at eps,
    and the estimate within 0.005 of the users' weighted density in every cell. At eps = 50,
    gamma = 1,000 the noise per cell is 4 shards' DL(e^{-0.05}) (sd 0.056 users, 2.8e-4 of
    the density of 200 users) and the rounding's sd is below 0.01 users: 0.005 is 17 sd, and
    a Laplace tail beyond it over 64 cells has probability < 1e-8."""
    truth = _csv(tmp_path / "pts.csv")
    args = ["federated", "--input", str(tmp_path / "pts.csv"), "--locations", "all",
            "--depth", "3", "--gamma", "1000", "--epsilon", "50", "--neighbour", "zero_out",
            "--shard-size", "50", "--dropout", "0.0", "--dropout-rate", "0.0",
            "--aggregation", "simulate", "--seed", "1"]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    rep = json.loads((tmp_path / "a" / "report.json").read_text())
    assert rep["l1_bound"] == 1000 and rep["gamma"] == 1000 and rep["users"] == 200
    g = rep["guarantee"]
    assert g["epsilon"] == 50 and g["neighbour"].startswith("zero out")
    assert g["model"] == "distributed"
    assert g["parameters"]["sensitivity"] == 1000 and len(rep["shards"]) == 4
    est = np.load(tmp_path / "a" / "estimate.npy")
    assert est.shape == (8, 8) and abs(est.sum() - 1) < 1e-12
    assert np.abs(est - truth).max() < 0.005
    # the paper's independent rounding: bound gamma + d
    res = CliRunner().invoke(main, [*args, "--rounding", "independent", "--out",
                                    str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "b" / "report.json").read_text())["l1_bound"] == 1064


def test_multi_location_command_refusals(tmp_path):
    _csv(tmp_path / "pts.csv", users=60)  # 60 x 4^10 entries > 5e7
    base = ["federated", "--locations", "all", "--depth", "3", "--out", str(tmp_path / "o")]
    res = CliRunner().invoke(main, base)
    assert res.exit_code == 2 and "--locations" in res.output and "--input" in res.output
    res = CliRunner().invoke(main, [*base, "--input", str(tmp_path / "pts.csv"),
                                    "--neighbour", "add_remove"])
    assert res.exit_code == 2 and "--max-users" in res.output  # add/remove: n private
    res = CliRunner().invoke(main, [*base, "--input", str(tmp_path / "pts.csv"),
                                    "--depth", "10", "--neighbour", "zero_out"])
    assert res.exit_code == 2 and "smaller --depth" in res.output


def test_dropout_column_end_to_end(tmp_path):
    """Table 1's third column through the command: noise planned for 12% dropout, 10% of the
    clients dropping in every sub-query; every shard keeps n_min = 880 of 1,000 (a shard
    falls below with probability < 1e-9: 120 or more of 1,000 dropping at rate 0.1 is
    6.3 sd), and the report shows the survivors. Planned for 2% with 10% dropping, the run is
    refused, not released with less noise."""
    args = ["federated", "--n", "3000", "--depth", "5", "--neighbour", "zero_out",
            "--shard-size", "1000", "--aggregation", "simulate", "--seed", "3",
            "--dropout-rate", "0.1"]
    res = CliRunner().invoke(main, [*args, "--dropout", "0.12", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    rep = json.loads((tmp_path / "a" / "report.json").read_text())
    assert rep["guarantee"]["parameters"]["dropout"] == 0.12
    for r in rep["rounds"]:
        assert r["shards"] == 3 and 0.86 * r["users"] < r["survivors"] < 0.94 * r["users"]
    res = CliRunner().invoke(main, [*args, "--dropout", "0.02", "--out", str(tmp_path / "b")])
    assert res.exit_code == 1 and "n_min" in res.output


def test_add_remove_tops_up_instead_of_refusing(tmp_path):
    """Planned for 2% with 10% dropping: under zero_out refused (above); under add_remove a
    refusal would depend on how many users a shard holds, so each short shard (about 900 of
    n_min = 980 survivors) is topped up to n_min noise shares by the publisher and the run is
    released. The report does not say so (the top-up follows n); --report-error (evaluation)
    lists the top-up shares of every sub-query: 3 shards x (980 - about 900), 150 to 330
    (binomial(1000, 0.1) drops per shard: a top-up of 80 +/- 9.5, the 3 shards' sum
    240 +/- 16.4, so the band is 5.5 sd: false failure < 2e-7 over the 4 sub-queries;
    measured 258, 240, 231, 236)."""
    args = ["federated", "--n", "3000", "--depth", "5", "--neighbour", "add_remove",
            "--shard-size", "1000", "--aggregation", "simulate", "--seed", "3",
            "--dropout-rate", "0.1", "--dropout", "0.02"]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "a" / "report.json").read_text()
    rep = json.loads(text)
    assert all(k not in r for r in rep["rounds"] for k in ("top_up_shares", "survivors"))
    assert "top_up_shares" not in text and "users" not in rep
    assert rep["guarantee"]["parameters"]["top_up"] is True
    assert any("topped up by the publisher" in n for n in rep["guarantee"]["notes"])
    res = CliRunner().invoke(main, [*args, "--report-error", "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    tops = json.loads((tmp_path / "b" / "report.json").read_text())["top_up_shares_by_round"]
    assert len(tops) == len(rep["rounds"]) and all(150 <= t <= 330 for t in tops)
