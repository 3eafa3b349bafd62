"""PrivEMDLinear ([Imola]_ Alg. 1, Lemma 4.2) vs user-level DP Laplace: average distance to a city.

Domain: k points on the Earth (random US-like box of lat/lon, plus the city), distances
normalised by pi x 3958.8 miles (half a great circle, :func:`sphere_space`). Query
f(x) = d_X(x, city), 1-Lipschitz; a user's answer is the mean of f over her m points.

* metric: :func:`shuffledp.analyzers.priv_emd_linear` with l = 1, alpha (exact discrete
  Laplace on a grid; local scale l/alpha per user, central l/(n alpha)), and its Gaussian
  variant at delta = 1e-6 (exact discrete Gaussian, zCDP calibration).
* baseline (user-level DP, replacement of one user's whole dataset): f takes values in
  [0, 1], so a user's mean moves by at most l * 1 = 1; Laplace of scale 1/eps per user
  (local) or 1/(n eps) on the mean of the n users (central). Float Laplace: a measurement,
  not a release. Calibration of eps, two rows each:
  - eps = 0.2, the paper's epsilon in the location example ([Imola]_ Sec. 3: alpha = 25 is
    chosen so that moving a whole month of a user's points by 100 miles, or one day by 1000
    miles, is protected at level 0.2; user-level DP at 0.2 protects those pairs equally and
    every other pair too);
  - eps = alpha (same numeric parameter, a far weaker user-level guarantee: the baseline's
    best case).

Error: |estimate - true mean over all users' points|, in miles, averaged over seeded reps;
``theory`` is the Laplace l1 error of the mean of n (local) or one (central) Laplace draw:
scale * sqrt(2/(pi n)) (local, normal approximation) or scale (central).

Usage::

    python bench/metric_linear_error.py --quick
    python bench/metric_linear_error.py          # adds n = 1e5 (the paper's example)

References
----------
.. [Imola] J. Imola, A. Roy Chowdhury, K. Chaudhuri, "Metric Differential Privacy at the
   User-Level" (preprint). Alg. 1, Thm 4.1, Lemma 4.2, Sec. 3 location example.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from shuffledp.analyzers.metric.linear import priv_emd_linear, query_value
from shuffledp.encoders.metric.spaces import sphere_space

MILES = math.pi * 3958.8


def setup(k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    lat = np.concatenate([[40.7], rng.uniform(25, 49, k - 1)])
    lon = np.concatenate([[-74.0], rng.uniform(-124, -67, k - 1)])
    space = sphere_space(lat, lon, radius=3958.8)
    return space, space.distances[:, 0].copy()


def draw(n: int, m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Each user moves around a home point: 80% of her points are home, the rest uniform."""
    home = rng.integers(0, k, size=n)
    items = np.repeat(home[:, None], m, axis=1)
    away = rng.random((n, m)) < 0.2
    items[away] = rng.integers(0, k, size=int(away.sum()))
    return items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=None)
    args = ap.parse_args()
    reps = args.reps or (5 if args.quick else 10)
    k, m, alpha = 200, 100, 25.0
    ns = (1000, 10000) if args.quick else (1000, 10000, 100000)
    space, f = setup(k)
    t0 = time.perf_counter()
    print(f"average distance to a city (k={k} points, m={m}, alpha={alpha:g}, l=1), "
          f"|error| in miles, mean of {reps} seeded reps")
    print(f"{'model':>7} {'n':>7} {'mechanism':>26} {'error_mi':>10} {'theory_mi':>10} "
          f"{'base/metric':>11}")
    gauss = "metric Gaussian d=1e-6"
    for model in ("local", "central"):
        for n in ns:
            errs = {"metric d_EM alpha=25": [], gauss: [], "user-DP eps=0.2": [],
                    "user-DP eps=alpha": []}
            g_scale = 0.0
            for rep in range(reps):
                rng = np.random.default_rng(100 + rep)
                users = draw(n, m, k, rng)
                truth = float(query_value(users, space, f)[0])
                rel = priv_emd_linear(users, space, f, alpha, model, lipschitz=1.0, rng=rng)
                errs["metric d_EM alpha=25"].append(abs(float(rel.estimate[0]) - truth))
                gr = priv_emd_linear(users, space, f, alpha, model, lipschitz=1.0,
                                     noise="gaussian", delta=1e-6, rng=rng)
                errs[gauss].append(abs(float(gr.estimate[0]) - truth))
                g_scale = gr.noise_scale
                means = f[users].mean(axis=1)
                for name, eps in (("user-DP eps=0.2", 0.2), ("user-DP eps=alpha", alpha)):
                    if model == "local":
                        est = float((means + rng.laplace(0, 1 / eps, n)).mean())
                    else:
                        est = float(means.mean() + rng.laplace(0, 1 / (n * eps)))
                    errs[name].append(abs(est - truth))
            metric_err = np.mean(errs["metric d_EM alpha=25"])
            for name, e in errs.items():
                if name == gauss:  # E|N(0, s^2)| = s sqrt(2/pi); local: the mean of n draws
                    th = g_scale * math.sqrt(2 / math.pi) / (math.sqrt(n) if model == "local"
                                                             else 1.0)
                else:
                    eps = alpha if name != "user-DP eps=0.2" else 0.2
                    scale = 1 / eps if model == "local" else 1 / (n * eps)
                    th = scale * math.sqrt(2 / (math.pi * n)) if model == "local" else scale
                print(f"{model:>7} {n:>7} {name:>26} {np.mean(e) * MILES:>10.3f} "
                      f"{th * MILES:>10.3f} {np.mean(e) / metric_err:>11.3g}", flush=True)
    print(f"total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
