"""Exact laws of shuffled randomizers on small data sets (a test oracle, not a test module).

The law of the histogram of n reports -- one from ``first`` (user 1), one from each row of
``others`` -- is built by convolution, outcome by outcome; the hockey-stick divergence is then
summed over every histogram. No reduction, no closed form: used to check that certified
shuffle bounds dominate real mechanisms and are attained by some.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np


def shuffled_law(first, others):
    """Law of the histogram of one report from ``first`` and one from each row of ``others``."""
    k = len(first)
    law = {tuple(np.eye(k, dtype=int)[y]): float(first[y]) for y in range(k) if first[y] > 0}
    for row in others:
        new = defaultdict(float)
        for h, w in law.items():
            for y in range(k):
                if row[y] > 0:
                    h2 = list(h)
                    h2[y] += 1
                    new[tuple(h2)] += w * float(row[y])
        law = new
    return law


def hockey(P, Q, eps):
    E = math.exp(eps)
    return sum(max(0.0, w - E * Q.get(h, 0.0)) for h, w in P.items())


def exact_shuffle_divergence(R0, R1, others, eps):
    P, Q = shuffled_law(R0, others), shuffled_law(R1, others)
    return max(hockey(P, Q, eps), hockey(Q, P, eps))


def krr_row(k, eps0, x):
    row = np.full(k, 1.0 / (math.exp(eps0) + k - 1))
    row[x] = math.exp(eps0) / (math.exp(eps0) + k - 1)
    return row


def metric_rows(points, alpha0):
    """Exponential-mechanism randomizer on a metric space of diameter 1: alpha0 d_X-DP."""
    D = np.abs(np.subtract.outer(points, points))
    D = D / D.max()
    W = np.exp(-alpha0 * D / 2.0)
    return W / W.sum(axis=1, keepdims=True), D
