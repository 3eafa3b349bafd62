"""Gaussian heatmap of Sec. 2.3 against a brute-force dense computation; PNG rendering."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from shuffledp.analyzers.heatmap.render import (
    COLORMAP,
    _kernel_1d,
    gaussian_heatmap,
    render_png,
    separable_filter,
)


def brute_force_heatmap(p: np.ndarray, sigma: float) -> np.ndarray:
    """H(x, y) = sum_{x', y'} exp(-|(x, y) - (x', y')|^2 / 2 sigma^2) p(x', y') / Z(x', y')."""
    h, w = p.shape
    r, c = np.divmod(np.arange(h * w), w)
    d2 = (r[:, None] - r[None, :]) ** 2 + (c[:, None] - c[None, :]) ** 2  # [target, source]
    k = np.exp(-d2 / (2 * sigma**2))
    z = k.sum(axis=0)  # Z(source): sum over all grid targets
    return (k @ (p.ravel() / z)).reshape(h, w)


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (5, 7), (9, 4)])
@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.5, 40.0])
def test_matches_brute_force(shape, sigma):
    rng = np.random.default_rng(shape[0] * 10 + shape[1])
    p = rng.random(shape) ** 3
    got = gaussian_heatmap(p, sigma)
    assert got.shape == shape
    np.testing.assert_allclose(got, brute_force_heatmap(p, sigma), rtol=1e-12, atol=1e-15)


def test_mass_is_preserved_at_the_border_and_point_mass_is_symmetric():
    p = np.zeros((11, 11))
    p[0, 0] = 1.0  # a corner source: per-source Z keeps all its mass on the grid
    h = gaussian_heatmap(p, 3.0)
    assert h.sum() == pytest.approx(1.0, rel=1e-13)
    assert (h >= 0).all()
    np.testing.assert_allclose(h, h.T, rtol=1e-12)
    centre = np.zeros((11, 11))
    centre[5, 5] = 2.0
    hc = gaussian_heatmap(centre, 1.5)
    assert hc.sum() == pytest.approx(2.0)
    np.testing.assert_allclose(hc, hc[::-1, :], rtol=1e-12)
    np.testing.assert_allclose(hc, hc[:, ::-1], rtol=1e-12)
    assert hc.argmax() == 5 * 11 + 5


def test_sigma_zero_returns_p_and_large_sigma_flattens():
    p = np.arange(12.0).reshape(3, 4)
    out = gaussian_heatmap(p, 0)
    np.testing.assert_array_equal(out, p)
    assert out is not p
    wide = gaussian_heatmap(p, 1e6)
    np.testing.assert_allclose(wide, np.full((3, 4), p.sum() / 12), rtol=1e-9)


def test_linear():
    rng = np.random.default_rng(0)
    a, b = rng.random((6, 8)), rng.random((6, 8))
    np.testing.assert_allclose(
        gaussian_heatmap(2 * a + b, 1.7),
        2 * gaussian_heatmap(a, 1.7) + gaussian_heatmap(b, 1.7),
        rtol=1e-12,
    )


@pytest.mark.parametrize("shape", [(12, 100), (100, 12), (85, 85)])
@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.0])
def test_the_banded_filter_matches_brute_force(shape, sigma):
    # long axes take the banded filter (2 r + 1 taps <= n / 4), short ones the dense kernel
    rng = np.random.default_rng(shape[0] + 7 * shape[1])
    p = rng.random(shape) ** 3
    p[0, 0] = p[-1, -1] = 5.0  # corner sources: mass kept on the grid at the border
    got = gaussian_heatmap(p, sigma)
    np.testing.assert_allclose(got, brute_force_heatmap(p, sigma), rtol=1e-12, atol=1e-15)
    assert got.sum() == pytest.approx(p.sum(), rel=1e-13)


def _banded_calls(monkeypatch) -> list:
    """Count the banded filter's 1-D correlations (two per banded axis)."""
    import shuffledp.analyzers.heatmap.render as render

    calls: list = []
    real = render.correlate1d

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(render, "correlate1d", counted)
    return calls


def test_large_grid_banded_equals_the_dense_kernel(monkeypatch):
    # sigma = 2: 2 r + 1 = 41 taps, a quarter of both axes at most: both take the band
    calls = _banded_calls(monkeypatch)
    p = np.zeros((256, 300))
    p[100, 30] = 1.0
    p[0, 299] = 2.0
    h = gaussian_heatmap(p, 2.0)
    assert len(calls) == 4
    dense = _kernel_1d(256, 2.0) @ p @ _kernel_1d(300, 2.0).T
    np.testing.assert_allclose(h, dense, rtol=1e-12, atol=1e-18)
    assert h.sum() == pytest.approx(3.0, rel=1e-13)


@pytest.mark.parametrize("sigma", [1e-170, 5e-324])
def test_a_vanishing_sigma_is_the_identity(sigma):
    # sigma^2 underflows to 0: the taps are still exp(-(x / sigma)^2 / 2), 1 at 0, else 0
    p = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(gaussian_heatmap(p, sigma), p)
    np.testing.assert_array_equal(separable_filter(p - 5.0, sigma), p - 5.0)


def test_separable_filter_takes_signed_values_and_refuses_bad_sigma():
    rng = np.random.default_rng(3)
    a, b = rng.random((40, 90)), rng.random((40, 90))
    np.testing.assert_allclose(separable_filter(a - b, 1.0),
                               gaussian_heatmap(a, 1.0) - gaussian_heatmap(b, 1.0), atol=1e-14)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"sigma must be a finite number > 0, got sigma="):
            separable_filter(a, bad)
    for bad in (None, "1", [1.0], 1j, True):
        with pytest.raises(TypeError, match=r"sigma must be a real number, got sigma="):
            separable_filter(a, bad)
    with pytest.raises(ValueError, match=r"2-D array"):
        separable_filter(np.ones(3), 1.0)


def test_heatmap_errors():
    with pytest.raises(ValueError, match=r"sigma must be finite and >= 0, got sigma=-1"):
        gaussian_heatmap(np.ones((2, 2)), -1)
    with pytest.raises(ValueError, match=r"sigma must be a number, got sigma=nan"):
        gaussian_heatmap(np.ones((2, 2)), float("nan"))
    with pytest.raises(ValueError, match=r"sigma must be finite and >= 0, got sigma=inf"):
        gaussian_heatmap(np.ones((2, 2)), float("inf"))
    with pytest.raises(TypeError, match=r"sigma must be a real number"):
        gaussian_heatmap(np.ones((2, 2)), "wide")
    with pytest.raises(ValueError, match=r"p must be a non-empty 2-D"):
        gaussian_heatmap(np.ones(4), 1.0)
    with pytest.raises(ValueError, match=r"p must be non-negative; p\[0, 1\]=-1.0"):
        gaussian_heatmap(np.array([[0.0, -1.0]]), 1.0)
    with pytest.raises(ValueError, match=r"p must be finite"):
        gaussian_heatmap(np.array([[np.inf, 1.0]]), 1.0)


# --------------------------------------------------------------------------- PNG


def test_render_png_side_by_side(tmp_path):
    a = np.zeros((8, 16))
    a[2, 3] = 1.0
    panels = [("true", a), ("baseline", np.ones((8, 16))), ("ours", gaussian_heatmap(a, 1))]
    out = render_png(tmp_path / "h.png", panels, min_size=64)
    img = Image.open(out)
    assert img.format == "PNG" and img.mode == "RGB"
    # three 64 x 32 panels with 8 px padding, an 18 px title strip, the orientation line
    assert img.size == (8 + 3 * (64 + 8), 8 + 18 + 32 + 2 * 16 + 8)
    px = np.asarray(img)
    # the hot pixel of the first panel (row 2, col 3 scaled by 4) is the brightest colour
    assert tuple(px[8 + 18 + 2 * 4 + 1, 8 + 3 * 4 + 1]) == tuple(COLORMAP[255])
    assert tuple(px[8 + 18 + 1, 8 + 1]) == tuple(COLORMAP[0])


def test_render_png_origin_lower_flips_rows(tmp_path):
    a = np.zeros((4, 4))
    a[0, 0] = 1.0
    up = np.asarray(Image.open(render_png(tmp_path / "u.png", [("a", a)], min_size=4)))
    lo = np.asarray(
        Image.open(render_png(tmp_path / "l.png", [("a", a)], min_size=4, origin="lower"))
    )
    y0, x0 = 8 + 18, 8
    assert tuple(up[y0, x0]) == tuple(COLORMAP[255])
    assert tuple(lo[y0 + 3, x0]) == tuple(COLORMAP[255])


def test_render_png_errors(tmp_path):
    with pytest.raises(ValueError, match="panels must be a non-empty list"):
        render_png(tmp_path / "x.png", [])
    with pytest.raises(ValueError, match=r"panels\[0\] must be a \(title, array\) pair"):
        render_png(tmp_path / "x.png", [np.ones((2, 2))])
    with pytest.raises(ValueError, match=r"panels\[1\] must be non-negative"):
        render_png(tmp_path / "x.png", [("a", np.ones((2, 2))), ("b", -np.ones((2, 2)))])
    with pytest.raises(ValueError, match="origin must be"):
        render_png(tmp_path / "x.png", [("a", np.ones((2, 2)))], origin="left")
    with pytest.raises(ValueError, match="min_size must be"):
        render_png(tmp_path / "x.png", [("a", np.ones((2, 2)))], min_size=0)


def test_pyramid_density_follows_strong_counts_and_spreads_weak_ones():
    from shuffledp.analyzers.heatmap.smoothing import level_sums, pyramid_density
    from shuffledp.grid import Grid

    grid = Grid(8, 8)
    a = np.zeros((8, 8))
    a[1, 2] = 100.0  # a spike far above the noise scale 1
    d = pyramid_density(level_sums(a, grid, 1), grid, 1, [1.0, 1.0, 1.0])
    assert d.sum() == pytest.approx(1.0) and (d > 0).all()
    assert d[1, 2] > 0.97  # the background gets < 1.4%: 0.5 sqrt(8) / 100 bounds its weight
    # counts far below the noise scale: the even split everywhere
    weak = pyramid_density(level_sums(a / 1e4, grid, 1), grid, 1, [1.0, 1.0, 1.0])
    np.testing.assert_allclose(weak, np.full((8, 8), 1 / 64), rtol=1e-2)
    # a non-square grid with odd level shapes keeps every pixel and the total
    g2 = Grid(5, 3)
    b = np.arange(15.0).reshape(3, 5)
    d2 = pyramid_density(level_sums(b, g2, 0), g2, 0, [1.0] * (g2.depth + 1))
    assert d2.shape == (3, 5) and d2.sum() == pytest.approx(1.0) and (d2 > 0).all()
    with pytest.raises(ValueError, match="noise_scales"):
        pyramid_density(level_sums(a, grid, 1), grid, 1, [1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="counts must hold 3 levels"):
        pyramid_density(level_sums(a, grid, 2), grid, 1, [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="threshold"):
        pyramid_density(level_sums(a, grid, 1), grid, 1, [1.0] * 3, threshold=-1)
    with pytest.raises(ValueError, match="level budgets"):
        from shuffledp.analyzers.heatmap.baselines import laplace_baseline
        laplace_baseline(a, 1.0, rng=0).smoothed()


def test_smoothed_release_records_the_post_processing():
    from shuffledp import datasets
    from shuffledp.analyzers.heatmap.central import central_heatmap
    from shuffledp.grid import Grid

    users = datasets.synthetic_mixture(n_users=50, rng=0).to_users(Grid(16, 16))
    rel = central_heatmap(users, 1.0, rng=1)
    sm = rel.smoothed()
    assert sm.guarantee == rel.guarantee and sm.raw is rel.raw
    assert "smoothing" in sm.parameters and "smoothing" not in rel.parameters
    assert (sm.estimate > 0).all() and sm.estimate.sum() == pytest.approx(1.0)
