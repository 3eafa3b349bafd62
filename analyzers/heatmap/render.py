"""Heatmaps with a Gaussian filter ([Ghazi23]_ Sec. 2.3) and PNG rendering.

The heatmap of a non-negative p over the grid G with filter variance sigma^2 is

.. math::

    H_p^\\sigma(x, y) = \\sum_{(x', y') \\in G} \\frac{1}{Z(x', y')}
        e^{-\\frac{(x - x')^2 + (y - y')^2}{2 \\sigma^2}} p(x', y'),
    \\qquad
    Z(x', y') = \\sum_{(x, y) \\in G} e^{-\\frac{(x - x')^2 + (y - y')^2}{2 \\sigma^2}},

so every *source* pixel (x', y') spreads its mass with a kernel normalised over the (finite)
grid: no mass leaks out at the border and sum H = sum p. Coordinates are pixel indices, so
``sigma`` is in pixels.

The kernel and Z factor over rows and columns,
``exp(-(dr^2 + dc^2) / 2 sigma^2) = exp(-dr^2 / 2 sigma^2) exp(-dc^2 / 2 sigma^2)`` and
``Z(r', c') = z_row(r') z_col(c')``, so the filter is a 1-D filter along each axis with
column-normalised kernels, ``H = K_row @ p @ K_col^T``, never a dense (HW x HW) kernel. Along
an axis of n pixels the kernel is cut at :data:`TRUNCATE` sds (the weights left out are below
exp(-TRUNCATE^2 / 2) = 2e-22 of the peak) and run as a banded filter
(``scipy.ndimage.correlate1d``, O(n sigma) per line) where its 2 r + 1 taps are at most n / 4;
otherwise the exact n x n kernel is a matrix product (O(n^2) per line, BLAS on every core).
1024 x 1024 at sigma = 1: 0.33 s dense, 0.04-0.06 s banded; 2048 x 2048: 1.8 s and 0.16-0.28 s
(2 cores; splitting the banded filter over threads measured no faster).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.ndimage import correlate1d

from shuffledp import _validation as v

__all__ = ["COLORMAP", "TRUNCATE", "gaussian_heatmap", "render_png", "separable_filter"]


def _iv_map(name: str, a: Any) -> np.ndarray:
    return v.nonnegative_array(name, a, ndim=2)


#: Sds at which the banded filter cuts the Gaussian kernel (module docstring).
TRUNCATE = 10.0


def _kernel_1d(n: int, sigma: float) -> np.ndarray:
    """K[i, j] = exp(-(i - j)^2 / (2 sigma^2)) / sum_i exp(-(i - j)^2 / (2 sigma^2))."""
    d = np.arange(n, dtype=np.float64)
    # (x / sigma)^2, not x^2 / sigma^2: sigma^2 underflows to 0 below about 1e-162 (and a
    # tiny sigma overflows the square to inf, whose exp is the exact 0)
    with np.errstate(over="ignore"):
        k = np.exp(-0.5 * ((d[:, None] - d[None, :]) / sigma) ** 2)
    return k / k.sum(axis=0, keepdims=True)


def _filter_axis(a: np.ndarray, sigma: float, axis: int) -> np.ndarray:
    """``a`` filtered along ``axis`` by the column-normalised kernel of :func:`_kernel_1d`:
    banded (cut at :data:`TRUNCATE` sds) where that is at most a quarter of the axis, else
    the exact kernel as a matrix product."""
    n = a.shape[axis]
    r = int(np.ceil(TRUNCATE * sigma))
    if 4 * (2 * r + 1) > n:
        k = _kernel_1d(n, sigma)
        return k @ a if axis == 0 else a @ k.T
    x = np.arange(-r, r + 1, dtype=np.float64)
    with np.errstate(over="ignore"):
        taps = np.exp(-0.5 * (x / sigma) ** 2)
    z = correlate1d(np.ones(n), taps, mode="constant")
    shape = [1, 1]
    shape[axis] = n
    return correlate1d(a / z.reshape(shape), taps, axis=axis, mode="constant")


def separable_filter(a: np.ndarray, sigma: float) -> np.ndarray:
    """The filter of :func:`gaussian_heatmap` on a real array of any sign, without checks.

    For the library's own smoothing (signed inputs such as gradient products): the 1-D
    column-normalised filter along rows, then along columns (module docstring).

    Parameters
    ----------
    a : ndarray, shape (height, width)
        Finite real values.
    sigma : float
        Standard deviation of the filter in pixels, > 0.

    Returns
    -------
    ndarray, shape (height, width)
        ``sum_{r', c'} K(r - r', c - c') a[r', c'] / Z(r', c')`` (float64).

    Raises
    ------
    TypeError
        If ``sigma`` is not a real number.
    ValueError
        If ``a`` is not 2-D or ``sigma`` is not a finite number > 0 (the values of ``a`` are
        not checked).

    References
    ----------
    [Ghazi23]_ Sec. 2.3 (the filter and its normalisation Z).
    """
    s = v.positive("sigma", sigma)
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"separable_filter needs a 2-D array, got shape {arr.shape}")
    return _filter_axis(_filter_axis(arr, s, 0), s, 1)


def gaussian_heatmap(p: Any, sigma: float) -> np.ndarray:
    """The heatmap H_p^sigma of [Ghazi23]_ Sec. 2.3, with per-source normalisation Z.

    Parameters
    ----------
    p : array_like, shape (height, width)
        Non-negative, finite (a distribution or unnormalised counts).
    sigma : float
        Standard deviation of the Gaussian filter in pixels, >= 0. ``sigma = 0`` returns a
        float64 copy of ``p`` (the limit of the definition).

    Returns
    -------
    ndarray, shape (height, width)
        ``H[r, c] = sum_{r', c'} K(r - r', c - c') p[r', c'] / Z(r', c')``; non-negative with
        ``H.sum() == p.sum()`` up to rounding.

    Raises
    ------
    TypeError
        If ``p`` is not a numeric array or ``sigma`` not a real number.
    ValueError
        If ``p`` is not 2-D, non-negative and finite, or ``sigma`` is negative or not finite.

    References
    ----------
    [Ghazi23]_ Sec. 2.3 (the heatmap H_p^sigma and its normalisation Z).
    """
    arr = _iv_map("p", p)
    s = v.real("sigma", sigma)
    if not (np.isfinite(s) and s >= 0):
        raise ValueError(f"sigma must be finite and >= 0, got sigma={sigma!r}")
    if s == 0:
        return arr
    out = separable_filter(arr, s)
    np.maximum(out, 0.0, out=out)  # exact zeros stay >= 0 despite rounding
    return out


# --------------------------------------------------------------------------- rendering

_ANCHORS = np.array(
    [  # position, r, g, b: a perceptually ordered dark-to-bright map (inferno-like)
        (0.00, 0, 0, 4),
        (0.15, 31, 12, 72),
        (0.35, 120, 28, 109),
        (0.55, 190, 56, 80),
        (0.75, 245, 125, 21),
        (0.90, 250, 200, 50),
        (1.00, 252, 255, 164),
    ],
    dtype=np.float64,
)

#: 256-entry RGB lookup table (uint8, shape (256, 3)) used by :func:`render_png`.
COLORMAP: np.ndarray = np.stack(
    [np.interp(np.linspace(0, 1, 256), _ANCHORS[:, 0], _ANCHORS[:, i]) for i in (1, 2, 3)],
    axis=1,
).round().astype(np.uint8)


def render_png(
    path: str | os.PathLike[str],
    panels: Sequence[tuple[str, Any]],
    *,
    min_size: int = 256,
    shared_scale: bool = False,
    origin: str = "upper",
    caption: str | Sequence[str] | None = None,
    colorbar: bool = False,
    extent: tuple[float, float, float, float] | None = None,
    axis_labels: tuple[str, str] = ("x", "y"),
) -> Path:
    """Write heatmaps side by side, each with its title, to a PNG file (Pillow only).

    Each panel is scaled to [0, 1] by its own maximum (or by the maximum over all panels
    with ``shared_scale=True``), mapped through :data:`COLORMAP` and enlarged by an integer
    factor (nearest neighbour) so its longer side is at least ``min_size`` pixels.

    Parameters
    ----------
    path : path-like
        Output file; parent directories must exist.
    panels : sequence of (str, array_like)
        ``(title, heatmap)`` pairs, e.g. ``[("true", h), ("baseline", hb), ("ours", ho)]``.
        Heatmaps are non-negative finite 2-D arrays; shapes may differ. A title may hold
        several lines (``"\\n"``), e.g. the panel's name and its own guarantee.
    min_size : int
        Minimum displayed size (pixels) of a panel's longer side, >= 1.
    shared_scale : bool
        Use one colour scale for all panels instead of one per panel.
    origin : {"upper", "lower"}
        ``"upper"`` draws row 0 at the top (matrix convention, as for the synthetic data);
        ``"lower"`` draws row 0 at the bottom (use it for maps from
        :func:`shuffledp.datasets.load_snap`, whose row 0 is the southern edge).
    caption : str or sequence of str, optional
        Lines of text drawn above the panels (e.g. the release's guarantee and the data).
    colorbar : bool
        Draw a colour bar right of the panels, labelled with what the colours mean (share of
        each panel's own maximum, or of the common maximum with ``shared_scale``).
    extent : (x_min, x_max, y_min, y_max), optional
        What the panels' columns and rows span, in the units of ``axis_labels`` (e.g.
        longitude and latitude of a SNAP bounding box): tick labels are drawn at the edges
        and middle of every panel's bottom and of the first panel's left side. Without it
        no ticks are drawn. Either way a line under the panels states the orientation (which
        way y grows, hence where north is on a map drawn with ``origin="lower"``).
    axis_labels : (str, str)
        Names of the horizontal and vertical axes (default ``("x", "y")``).

    Returns
    -------
    pathlib.Path
        The path written.

    Raises
    ------
    ValueError
        If ``panels`` is empty or not a sequence of (title, 2-D non-negative finite array)
        pairs, ``min_size`` is not an integer >= 1, ``origin`` is unknown or ``extent`` is
        not four finite numbers with x_min < x_max and y_min < y_max.
    TypeError
        If a panel's array is not numeric.
    OSError
        If the file cannot be written.

    References
    ----------
    [Ghazi23]_ Fig. 1-2 (true, baseline and private heatmaps side by side).
    """
    from PIL import Image, ImageDraw

    if isinstance(panels, (str, bytes)) or not isinstance(panels, Sequence) or not panels:
        raise ValueError(
            f"panels must be a non-empty list of (title, array), got panels={panels!r:.80}"
        )
    if isinstance(min_size, bool) or not isinstance(min_size, (int, np.integer)) or min_size < 1:
        raise ValueError(f"min_size must be an integer >= 1, got min_size={min_size!r}")
    if origin not in ("upper", "lower"):
        raise ValueError(f"origin must be 'upper' or 'lower', got origin={origin!r}")
    items = _iv_panels(panels)
    global_max = max(float(a.max()) for _, a in items)
    if extent is not None:
        ext = tuple(float(e) for e in extent)
        if len(ext) != 4 or not all(np.isfinite(ext)) or not (ext[0] < ext[1] and
                                                             ext[2] < ext[3]):
            raise ValueError("extent must be (x_min, x_max, y_min, y_max), finite, with "
                             f"x_min < x_max and y_min < y_max, got extent={extent!r}")

    if caption is None:
        lines: list[str] = []
    elif isinstance(caption, str):
        lines = caption.splitlines()
    else:
        lines = [str(x) for x in caption]
    font, small = _font(12), _font(10)
    pad, line_h = 8, 16
    n_title = max(len(title.split("\n")) for title, _ in items)
    title_h = 4 + 14 * n_title
    images = [(title, _panel_image(arr, global_max if shared_scale else float(arr.max()),
                                   origin, int(min_size)))
              for title, arr in items]
    panel_h = max(img.height for _, img in images)
    bar_w, bar_label_w = 14, 110
    left = 8 + (60 if extent is not None else 0)  # room for the y tick labels
    width = left + sum(img.width + pad for _, img in images)
    if colorbar:
        width += bar_w + bar_label_w + pad
    head = pad + line_h * len(lines)
    foot = (16 if extent is not None else 0) + 2 * line_h
    height = head + title_h + panel_h + foot + pad
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    for i, line in enumerate(lines):
        draw.text((pad, pad + i * line_h), line, fill=(0, 0, 0), font=font)
    x = left
    top_y = head + title_h
    for k, (title, img) in enumerate(images):
        for j, tl in enumerate(title.split("\n")):
            draw.text((x, head + 2 + 14 * j), tl, fill=(0, 0, 0), font=font if j == 0 else small)
        canvas.paste(img, (x, top_y))
        if extent is not None:
            _draw_ticks(draw, (x, top_y), img.size, ext, origin, axis_labels, k == 0, small)
        x += img.width + pad
    if colorbar:
        _draw_colorbar(canvas, draw, (x, top_y), bar_w, panel_h, shared_scale, font)
    note_y = top_y + panel_h + (18 if extent is not None else 4)
    draw.text((left, note_y), _orientation_note(origin, axis_labels), fill=(0, 0, 0),
              font=small)
    out = Path(path)
    canvas.save(out, format="PNG")
    return out


def _iv_panels(panels: Sequence[Any]) -> list[tuple[str, np.ndarray]]:
    """(title, checked 2-D array) of every panel; a clear error naming the bad one."""
    items: list[tuple[str, np.ndarray]] = []
    for i, panel in enumerate(panels):
        if not (isinstance(panel, (tuple, list)) and len(panel) == 2):
            raise ValueError(f"panels[{i}] must be a (title, array) pair, got {panel!r:.80}")
        title, arr = panel
        items.append((str(title), _iv_map(f"panels[{i}]", arr)))
    return items


def _panel_image(arr: np.ndarray, top: float, origin: str, min_size: int) -> Any:
    """One panel: arr / top through :data:`COLORMAP` (row 0 at the bottom with
    ``origin="lower"``), enlarged by the smallest integer factor reaching ``min_size``."""
    from PIL import Image

    v = arr / top if top > 0 else np.zeros_like(arr)
    if origin == "lower":
        v = v[::-1]
    rgb = COLORMAP[np.clip((v * 255).round(), 0, 255).astype(np.intp)]
    img = Image.fromarray(np.ascontiguousarray(rgb))
    factor = max(1, -(-min_size // max(arr.shape)))
    return img.resize((arr.shape[1] * factor, arr.shape[0] * factor), Image.Resampling.NEAREST)


def _orientation_note(origin: str, axis_labels: tuple[str, str]) -> str:
    """Which way the axes grow on the picture (north up when y is the latitude and
    ``origin="lower"``)."""
    xl, yl = axis_labels
    if origin == "lower":
        way = f"{yl} grows upward (north up when {yl} is the latitude)"
    else:
        way = f"{yl} grows downward (row 0 at the top, image convention)"
    return f"orientation: {xl} grows to the right, {way}"


def _fmt_tick(v: float) -> str:
    return f"{v:.4g}"


def _draw_ticks(draw: Any, at: tuple[int, int], size: tuple[int, int],
                ext: tuple[float, ...], origin: str, axis_labels: tuple[str, str],
                with_y: bool, font: Any) -> None:
    """Tick marks and values at the edges and middle of a panel's bottom (x) and, for the
    first panel, of its left side (y), with the axis names."""
    x0, y0 = at
    w, h = size
    black = (0, 0, 0)
    for frac in (0.0, 0.5, 1.0):
        px = x0 + round(frac * (w - 1))
        draw.line([(px, y0 + h), (px, y0 + h + 4)], fill=black)
        label = _fmt_tick(ext[0] + frac * (ext[1] - ext[0]))
        draw.text((px - 3 * len(label) * (frac > 0) // (2 if frac < 1 else 1), y0 + h + 4),
                  label, fill=black, font=font)
    draw.text((x0 + w // 2 + 30, y0 + h + 4), f"{axis_labels[0]} ->", fill=black, font=font)
    if not with_y:
        return
    for frac in (0.0, 0.5, 1.0):  # frac of the height from the top
        py = y0 + round(frac * (h - 1))
        share = 1.0 - frac if origin == "lower" else frac
        draw.line([(x0 - 4, py), (x0, py)], fill=black)
        draw.text((x0 - 58, py - 6), _fmt_tick(ext[2] + share * (ext[3] - ext[2])),
                  fill=black, font=font)
    draw.text((x0 - 58, y0 + h // 4), axis_labels[1] + (" ^" if origin == "lower" else " v"),
              fill=black, font=font)


def _draw_colorbar(canvas: Any, draw: Any, at: tuple[int, int], bar_w: int, panel_h: int,
                   shared_scale: bool, font: Any) -> None:
    """The colour ramp at ``at`` (top left), labelled 1.0 / 0.5 / 0 with what they are a
    share of."""
    from PIL import Image

    x, top_y = at
    ramp = COLORMAP[np.linspace(255, 0, panel_h).round().astype(np.intp)]
    strip = np.repeat(ramp[:, None, :], bar_w, axis=1)
    canvas.paste(Image.fromarray(np.ascontiguousarray(strip)), (x, top_y))
    lx = x + bar_w + 4
    what = "of the common max" if shared_scale else "of each panel's max"
    draw.text((lx, top_y), "1.0", fill=(0, 0, 0), font=font)
    draw.text((lx, top_y + panel_h // 2 - 6), "0.5", fill=(0, 0, 0), font=font)
    draw.text((lx, top_y + panel_h - 14), "0", fill=(0, 0, 0), font=font)
    draw.text((lx, top_y + panel_h // 4), "share", fill=(0, 0, 0), font=font)
    draw.text((lx, top_y + panel_h // 4 + 14), what, fill=(0, 0, 0), font=font)


def _font(size: int) -> Any:
    """Pillow's default font at ``size`` (a scalable one with FreeType, else the bitmap)."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: bitmap font only
        return ImageFont.load_default()
