"""Datasets: synthetic mixture (App. E.3), CSV and SNAP loaders with their error messages."""

from __future__ import annotations

import os

import numpy as np
import pytest

from shuffledp.datasets import PointTable, load_csv, load_snap, synthetic_mixture
from shuffledp.grid import Grid

# --------------------------------------------------------------------------- synthetic


def test_synthetic_default_is_200_users_and_reproducible():
    t = synthetic_mixture()
    assert t.n_users == 200 and t.n_points == 200 * 5
    assert ((t.x >= 0) & (t.x < 1) & (t.y >= 0) & (t.y < 1)).all()
    assert (t.weight == 1).all()
    t2 = synthetic_mixture()
    np.testing.assert_array_equal(t.x, t2.x)
    np.testing.assert_array_equal(t.y, t2.y)
    t3 = synthetic_mixture(rng=1)
    assert not np.array_equal(t.x, t3.x)
    assert t.info["n_clusters"] == 20 and len(t.info["means"]) == 20
    users = t.to_users(Grid(64, 64))
    assert users.n_users == 200
    assert users.aggregate().sum() == pytest.approx(200.0)


def test_synthetic_clusters_are_concentrated():
    t = synthetic_mixture(n_users=50, n_clusters=1, points_per_user=20, std_range=(0.01, 0.01),
                          rng=np.random.default_rng(5))
    mean = np.array(t.info["means"][0])
    d = np.hypot(t.x - mean[0], t.y - mean[1])
    assert np.median(d) < 0.02
    cov = np.array(t.info["covariances"][0])
    np.testing.assert_allclose(np.linalg.eigvalsh(cov), [1e-4, 1e-4], rtol=1e-9)
    emp = np.cov(np.vstack([t.x, t.y]))
    np.testing.assert_allclose(emp, cov, atol=2e-5)


def test_synthetic_resamples_points_outside_the_square():
    # huge clusters: many draws fall outside and must be redrawn
    t = synthetic_mixture(n_users=100, n_clusters=3, std_range=(0.5, 0.8), rng=2)
    assert ((t.x >= 0) & (t.x < 1) & (t.y >= 0) & (t.y < 1)).all()
    assert t.n_points == 500


def test_synthetic_validation():
    with pytest.raises(ValueError, match="n_users must be an integer >= 1, got n_users=0"):
        synthetic_mixture(n_users=0)
    with pytest.raises(TypeError, match="n_clusters must be an integer"):
        synthetic_mixture(n_clusters=2.5)
    with pytest.raises(TypeError, match="points_per_user must be an integer"):
        synthetic_mixture(points_per_user=True)
    with pytest.raises(ValueError, match="std_range must satisfy"):
        synthetic_mixture(std_range=(0.1, 0.01))
    with pytest.raises(ValueError, match="mean_margin must be in"):
        synthetic_mixture(mean_margin=0.5)


def test_point_table_validation():
    with pytest.raises(ValueError, match=r"x must be in \[0, 1\).*point 1 has x=1.0"):
        PointTable(user=[0, 0], x=[0.1, 1.0], y=[0.1, 0.2], weight=[1, 1])
    with pytest.raises(ValueError, match=r"y must be in \[0, 1\).*point 0 has y=nan"):
        PointTable(user=[0], x=[0.1], y=[np.nan], weight=[1])
    with pytest.raises(ValueError, match=r"weight must be finite and >= 0; point 0"):
        PointTable(user=[0], x=[0.1], y=[0.1], weight=[-1])
    with pytest.raises(ValueError, match=r"user 'b' has zero total weight"):
        PointTable(user=["a", "b"], x=[0.1, 0.2], y=[0.1, 0.2], weight=[1, 0])
    with pytest.raises(ValueError, match="same length"):
        PointTable(user=[0, 1], x=[0.1], y=[0.1, 0.2], weight=[1, 1])
    with pytest.raises(ValueError, match="at least one point"):
        PointTable(user=[], x=[], y=[], weight=[])
    t = PointTable(user=[0], x=[0.5], y=[0.5], weight=[2.0])
    with pytest.raises(ValueError):
        t.x[0] = 0.1  # read-only
    with pytest.raises(TypeError, match="grid must be a Grid"):
        t.to_users((4, 4))


# --------------------------------------------------------------------------- CSV


def write(tmp_path, text, name="pts.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_load_csv_good(tmp_path):
    p = write(tmp_path, "user_id,x,y,weight\nalice,0.1,0.2,2\nalice,0.5,0.5,1\n\nbob,0.9,0.0,1\n")
    t = load_csv(p)
    assert t.n_points == 3 and t.n_users == 2
    assert list(t.user) == ["alice", "alice", "bob"]
    np.testing.assert_allclose(t.weight, [2, 1, 1])
    users = t.to_users(Grid(10, 10))
    pix, w = users.user(0)
    np.testing.assert_allclose(sorted(w), [1 / 3, 2 / 3])
    # reordered columns, no weight column, upper-case header
    q = write(tmp_path, "Y,User_ID,X\n0.25,u1,0.75\n", "b.csv")
    t2 = load_csv(q)
    assert t2.x[0] == 0.75 and t2.y[0] == 0.25 and t2.weight[0] == 1.0


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("user_id,x,y,colour\nu,0.1,0.1,red\n", r"unknown column\(s\) 'colour'"),
        ("user_id,x,y,lat,lon\n", r"unknown column\(s\) 'lat', 'lon'"),
        ("user_id,x\nu,0.1\n", r"missing column\(s\) 'y'"),
        ("user_id,x,x,y\n", r"duplicate column\(s\) 'x'"),
        ("", r"empty file"),
        ("user_id,x,y\n", r"no records"),
        ("user_id,x,y\nu,0.1,0.2\nu,nan,0.3\n", r"line 3: x must be in \[0, 1\).*x='nan'"),
        ("user_id,x,y\nu,0.1,1.0\n", r"line 2: y must be in \[0, 1\).*y='1.0'"),
        ("user_id,x,y\nu,0.1,-0.2\n", r"line 2: y must be in \[0, 1\).*y='-0.2'"),
        ("user_id,x,y,weight\nu,0.1,0.2,-3\n", r"line 2: weight must be finite and >= 0.*'-3'"),
        ("user_id,x,y,weight\nu,0.1,0.2,inf\n", r"line 2: weight must be finite"),
        ("user_id,x,y\nu,0.1,abc\n", r"line 2: y is not a number: 'abc'"),
        ("user_id,x,y\nu,0.1,0.2,0.3\n", r"line 2: expected 3 fields"),
        ("user_id,x,y\n\n\n,0.1,0.2\n", r"line 4: empty user_id"),
        ("user_id,x,y,weight\nu,0.1,0.2,0\n", r"user 'u' has zero total weight"),
    ],
)
def test_load_csv_errors(tmp_path, text, pattern):
    with pytest.raises(ValueError, match=pattern):
        load_csv(write(tmp_path, text))


# --------------------------------------------------------------------------- SNAP


SNAP = (
    "0\t2010-10-19T23:55:27Z\t30.2359091167\t-97.7951395833\t22847\n"
    "0\t2010-10-18T22:17:43Z\t30.2691029532\t-97.7493953705\t420315\n"
    "1\t2010-10-17T23:42:03Z\t40.0\t-100.0\t316637\n"  # outside the box
    "\n"
    "2\t2010-01-02T10:00:00Z\t30.0\t-98.0\t1\n"  # the south-west corner: x = y = 0
)
BOX = (30.0, 31.0, -98.0, -97.0)


def test_load_snap_maps_and_counts(tmp_path):
    t = load_snap(write(tmp_path, SNAP, "c.txt"), BOX)
    assert t.n_points == 3 and t.n_users == 2
    assert t.info["dropped_outside_bbox"] == 1 and t.info["kept"] == 3 and t.info["lines"] == 4
    np.testing.assert_allclose(t.x, [1 - 0.7951395833, 1 - 0.7493953705, 0.0], atol=1e-9)
    np.testing.assert_allclose(t.y, [0.2359091167, 0.2691029532, 0.0], atol=1e-9)
    # row 0 is the southern edge: the south-west check-in lands in pixel (row 0, col 0)
    users = t.to_users(Grid(4, 4))
    # user 0: one point at (row 0, col 0), one at (row 1, col 1); user 2 at (row 0, col 0)
    agg = users.aggregate()
    assert agg[0, 0] == pytest.approx(1.5) and agg[1, 1] == pytest.approx(0.5)
    assert agg.sum() == pytest.approx(2.0)


def test_load_snap_time_window_and_half_open_box(tmp_path):
    p = write(tmp_path, SNAP, "c.txt")
    t = load_snap(p, BOX, since="2010-10-01T00:00:00Z")
    assert t.n_points == 2 and t.info["dropped_outside_time"] == 1
    assert t.info["dropped_outside_bbox"] == 1
    # lat_max and lon_max are exclusive
    edge = write(
        tmp_path, "9\tT\t31.0\t-97.5\t1\n9\tT\t30.5\t-97.0\t1\n9\tT\t30.5\t-97.5\t1\n", "e"
    )
    te = load_snap(edge, BOX)
    assert te.n_points == 1 and te.info["dropped_outside_bbox"] == 2


@pytest.mark.parametrize(
    "line, pattern",
    [
        ("0\t2010\t30.5\t-97.5\n", r"line 3: expected 5 tab-separated fields.*got 4"),
        ("0 2010 30.5 -97.5 1\n", r"line 3: expected 5 tab-separated fields.*got 1"),
        ("0\t2010\tnorth\t-97.5\t1\n", r"line 3: latitude/longitude must be numbers.*'north'"),
        ("0\t2010\tnan\t-97.5\t1\n", r"line 3: latitude/longitude must be finite"),
        ("\t2010\t30.5\t-97.5\t1\n", r"line 3: empty user"),
    ],
)
def test_load_snap_malformed_line_reports_line_number(tmp_path, line, pattern):
    good = "0\tT\t30.5\t-97.5\t1\n"
    p = write(tmp_path, good + "\n" + line + good, "m.txt")
    with pytest.raises(ValueError, match=pattern):
        load_snap(p, BOX)


def test_load_snap_bbox_validation(tmp_path):
    p = write(tmp_path, SNAP, "c.txt")
    with pytest.raises(ValueError, match="lat_min < lat_max"):
        load_snap(p, (31.0, 30.0, -98.0, -97.0))
    with pytest.raises(ValueError, match="lon_min < lon_max"):
        load_snap(p, (30.0, 31.0, -97.0, -98.0))
    with pytest.raises(ValueError, match="four finite numbers"):
        load_snap(p, (30.0, 31.0, -98.0))
    with pytest.raises(ValueError, match="no check-in inside bbox"):
        load_snap(p, (-10.0, -5.0, 0.0, 1.0))
    with pytest.raises(TypeError, match="since must be an ISO-8601 string"):
        load_snap(p, BOX, since=2010)


@pytest.mark.skipif(os.name != "posix", reason="FIFOs are POSIX")
@pytest.mark.parametrize("loader", ["csv", "snap"])
def test_loaders_refuse_a_fifo_without_blocking(tmp_path, loader):
    """The library loaders (not only the CLI) check and read through one descriptor: a FIFO
    is refused at once, never opened for a blocking read."""
    fifo = tmp_path / "points.csv"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        if loader == "csv":
            load_csv(fifo)
        else:
            load_snap(fifo, (0.0, 1.0, 0.0, 1.0))
