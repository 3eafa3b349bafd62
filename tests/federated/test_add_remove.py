"""Federated releases under add/remove (n private): the stated (eps, delta) is checked against
the exact output laws of neighbouring data sets, at and across a shard boundary.

The released count of a cell is its data count plus the survivors' noise: with every client
adding X - Y, X, Y ~ Polya(1/n_min, a), k survivors give Polya(k/n_min, a) - Polya(k/n_min, a)
(Polya shapes with one a add up; Bagdasaryan et al., PoPETs 2022, Def. 4.1, Thm 4.2), and a
shard with k < n_min survivors gets the publisher's n_min - k top-up shares. The
tests read n_min, a, the top-ups and the shards each user landed in from the code's own
releases, build
those laws exactly (40-digit mpmath, truncated where the neglected mass is below 1e-35, which
is added to the divergence), and compute the hockey-stick divergence
H_eps(P || Q) = sum_z max(0, P(z) - e^eps Q(z)) in both directions.
"""

import json
import math

import mpmath as mp
import numpy as np
import pytest
import scipy.stats
from click.testing import CliRunner

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.analyzers.federated.histogram import (
    PRIVATE_SHARD_KEYS,
    FederatedRefused,
    public_shards,
)
from shuffledp.analyzers.federated.population import (
    ShardPlan,
    add_remove_noise,
    gamma_share_rdp,
    joining_share_epsilon,
    series_share_rdp,
    server_view_epsilon,
)
from shuffledp.protocol.federated import adaptive_histogram, federated_histogram

DPS = 40
TAIL = mp.mpf("1e-35")


def _nb(s, a):
    """Polya(s, a) pmf at 0..K (K where the tail is below TAIL) and the neglected mass."""
    with mp.workdps(DPS):
        s, a = mp.mpf(s), mp.mpf(a)
        p = [(1 - a) ** s]
        k = 0
        while True:
            p.append(p[-1] * a * (s + k) / (k + 1))
            k += 1
            if k > 20 and p[-1] * (1 + s) / (1 - a) < TAIL * 1e-5:
                break
        return p, max(mp.mpf(0), 1 - mp.fsum(p))


def _pd(s, a):
    """Polya(s, a) - Polya(s, a): {z: pmf} and the neglected mass (at most twice the
    Polya's)."""
    p, miss = _nb(s, a)
    K = len(p) - 1
    with mp.workdps(DPS):
        out = {}
        for z in range(0, K + 1):
            out[z] = mp.fsum(p[y + z] * p[y] for y in range(K + 1 - z))
            out[-z] = out[z]
        return out, 2 * miss


def _shift(pmf, c):
    return {z + c: q for z, q in pmf.items()}


def _hockey(P, Q, eps, slack):
    """max over both directions of sum_z max(0, P(z) - e^eps Q(z)), plus the truncation."""
    with mp.workdps(DPS):
        e = mp.e ** mp.mpf(eps)
        zs = set(P) | set(Q)
        one = mp.fsum(max(mp.mpf(0), P.get(z, 0) - e * Q.get(z, 0)) for z in zs)
        two = mp.fsum(max(mp.mpf(0), Q.get(z, 0) - e * P.get(z, 0)) for z in zs)
        return float(max(one, two) + slack)


def _cell_law(rel, count, shard=None):
    """The law of one cell of a release: ``count`` plus the noise of every survivor (of the
    given shard only, when ``shard`` is set), read from the release's shards and parameters."""
    p = rel.guarantee.parameters
    a = math.exp(-p.get("noise_epsilon", rel.guarantee.epsilon) / p["sensitivity"])
    shards = rel.shards if shard is None else [rel.shards[shard]]
    shares = sum(mp.mpf(s["survivors"] + s.get("top_up_shares", 0)) / s["n_min"]
                 for s in shards)
    pmf, miss = _pd(shares, a)
    return _shift(pmf, count), miss


def _release(n, **kw):
    """n users, all in cell 0 of a one-cell histogram, under add/remove."""
    kw.setdefault("neighbour", "add_remove")
    return federated_histogram(np.zeros(n, dtype=np.int64), 1, kw.pop("epsilon", 1.0),
                               aggregation="simulate", rng=0, **kw)


def test_pair_inside_one_shard_19_vs_20_users_is_exact():
    """S = N = 20, planned dropout 0.1: n_min = 18 for both neighbours; 19 and 20 users add
    19/18 and 20/18 shapes. The claimed (1, delta) holds exactly, and the claim without the
    joining share's charge (the discrete Laplace at eps_noise) fails by orders of
    magnitude: the noise law itself differs between the neighbours."""
    kw = dict(shard_size=20, dropout=0.1, max_users=20)
    r19, r20 = _release(19, **kw), _release(20, **kw)
    g19, g20 = r19.guarantee, r20.guarantee
    assert (g19.epsilon, g19.delta, g19.neighbour) == (g20.epsilon, g20.delta,
                                                       Neighbour.ADD_REMOVE)
    assert g19.parameters["noise_epsilon"] == g20.parameters["noise_epsilon"] < 1.0
    assert [s["n_min"] for s in r19.shards] == [s["n_min"] for s in r20.shards] == [18]
    P, m1 = _cell_law(r19, 19)
    Q, m2 = _cell_law(r20, 20)
    assert _hockey(P, Q, g19.epsilon, m1 + m2) <= g19.delta
    # the share is what costs: at eps_noise (the DL the survivors' shares add up to) the
    # pair is far from (eps_noise, delta)
    assert _hockey(P, Q, g19.parameters["noise_epsilon"], 0) > 1e3 * g19.delta


def test_pair_inside_one_shard_on_two_cells_every_cell_changes_law():
    """The joining user's share reaches every cell, not only hers: the two-cell release
    (user data in cell 0) is checked on the exact product law."""
    r19 = federated_histogram(np.zeros(19, dtype=np.int64), 2, 2.0, aggregation="simulate",
                              rng=0, shard_size=20, dropout=0.1, max_users=20,
                              neighbour="add_remove")
    r20 = federated_histogram(np.zeros(20, dtype=np.int64), 2, 2.0, aggregation="simulate",
                              rng=0, shard_size=20, dropout=0.1, max_users=20,
                              neighbour="add_remove")
    g = r19.guarantee
    assert r20.guarantee.delta == g.delta and g.parameters["length"] == 2
    P0, m1 = _cell_law(r19, 19)
    P1, _ = _cell_law(r19, 0)
    Q0, m2 = _cell_law(r20, 20)
    Q1, _ = _cell_law(r20, 0)
    with mp.workdps(DPS):
        P = {(x, y): px * py for x, px in P0.items() for y, py in P1.items()}
        Q = {(x, y): qx * qy for x, qx in Q0.items() for y, qy in Q1.items()}
    assert _hockey(P, Q, g.epsilon, 2 * (m1 + m2)) <= g.delta


def test_pair_across_a_shard_boundary_1000_vs_1001_users():
    """The old layout opened a second shard for the 1001st user (shard size 1000) whose one
    client added a whole discrete Laplace. On the public plan (max_users = 1001: K = 2
    shards by user id mod 2, n_min = 500) user 1000 joins shard 0 and shard 1 is untouched.
    Checked on the server's view of the joining shard and on the released total; the
    old layout's law (consecutive blocks, n_min from the block size) breaks its own claim."""
    kw = dict(shard_size=1000, max_users=1001)
    ra, rb = _release(1000, **kw), _release(1001, **kw)
    g = ra.guarantee
    assert rb.guarantee.delta == g.delta and g.parameters["noise_epsilon"] < 1.0
    assert [(s["clients"], s["n_min"]) for s in ra.shards] == [(500, 500), (500, 500)]
    assert [(s["clients"], s["n_min"]) for s in rb.shards] == [(501, 500), (500, 500)]
    assert ra.shards[1] == rb.shards[1]
    P, m1 = _cell_law(ra, 500, shard=0)  # the secure-aggregation server's view of shard 0
    Q, m2 = _cell_law(rb, 501, shard=0)
    assert _hockey(P, Q, g.epsilon, m1 + m2) <= g.delta
    P, m1 = _cell_law(ra, 1000)  # the released count
    Q, m2 = _cell_law(rb, 1001)
    assert _hockey(P, Q, g.epsilon, m1 + m2) <= g.delta
    # the old layout: [1000 clients, n_min 1000] against [1000, n_min 1000] + [1, n_min 1],
    # noise at eps itself (a = e^-1), claimed delta = the Polya tables' charge (< 1e-26)
    a = math.exp(-1.0)
    old_a, ma = _pd(1, a)
    old_b, mb = _pd(2, a)
    old = _hockey(_shift(old_a, 1000), _shift(old_b, 1001), 1.0, ma + mb)
    assert old > 0.07  # measured 0.0726 on the total; the server sees a new shard (delta 1)


def test_the_layout_and_the_noise_do_not_depend_on_n():
    """Adding user n never moves another user, never opens a shard, never changes n_min or
    a; at n = S + 1 the old consecutive blocks would have opened a shard of one."""
    plan = ShardPlan(max_users=25_000, shard_size=10_000, dropout=0.1)
    assert (plan.shards, plan.n_min) == (3, 7500)
    ids = np.arange(10_000)
    before = plan.assign(ids, 10_000)
    after = plan.assign(np.append(ids, 10_000), 10_001)
    assert np.array_equal(after[:-1], before) and set(after) == {0, 1, 2}
    with pytest.raises(FederatedRefused, match="more users than max_users=25000"):
        plan.assign(None, 25_001)
    with pytest.raises(ValueError, match="must not repeat"):
        plan.assign(np.array([1, 1]), 2)
    with pytest.raises(ValueError, match=r"user_ids\[1\]=-3"):
        plan.assign(np.array([1, -3]), 2)
    kw = dict(shard_size=20, max_users=20, dropout=0.1, epsilon=2.0)
    rels = [_release(n, **kw) for n in (1, 17, 18, 19, 20)]
    seen = {(r.guarantee.parameters["n_min"], r.guarantee.parameters["noise_epsilon"],
             r.guarantee.delta, r.guarantee.notes) for r in rels}
    assert len(seen) == 1  # the same noise parameters and claim for every n the plan admits
    # fewer than n_min = 18 survivors: topped up to 18 shares, not refused
    assert [r.shards[0]["top_up_shares"] for r in rels] == [17, 1, 0, 0, 0]


def _dropped(n, k):
    """A release of n users (all in cell 0 of one cell) of whom the first n - k drop out
    before sending their masked input: k survivors. S = N = 20, planned dropout 0.1: n_min
    = 18."""
    d = np.zeros(n, dtype=bool)
    d[:n - k] = True
    return _release(n, shard_size=20, max_users=20, dropout=0.1, dropped=d)


@pytest.mark.parametrize("n,k", [(19, 17), (18, 17), (19, 18)])
def test_boundary_pairs_around_n_min_are_exact(n, k):
    """The pairs at n_min = 18 the top-up decides: D with n users of whom k survive against
    D + one user who survives (k + 1). Before the top-up, k = 17 was refused while k + 1 = 18
    was released (the refusal leaked; 18 users at a real dropout of 2% were refused with
    probability 0.305, 19 users with 0.055). Now both are released with the claimed
    (1, delta) checked exactly, and:

    * k = n_min - 1 = 17 vs 18: both releases hold exactly n_min shares (one top-up share on
      D's side), so the pair is DL(a) shifted by one: exactly (eps_noise, 0), i.e. the
      hockey-stick divergence at the DL's own epsilon is zero up to the truncation;
    * k = n_min = 18 vs 19: no top-up; the joining share changes the noise law, and at
      eps_noise the pair is far from the claimed delta (the charge is needed)."""
    ra, rb = _dropped(n, k), _dropped(n + 1, k + 1)
    g = ra.guarantee
    assert (rb.guarantee.epsilon, rb.guarantee.delta) == (g.epsilon, g.delta) == (1.0, g.delta)
    assert g.neighbour is Neighbour.ADD_REMOVE and g.delta < 1e-10
    assert [ra.shards[0]["top_up_shares"], rb.shards[0]["top_up_shares"]] == (
        [1, 0] if k == 17 else [0, 0])
    P, m1 = _cell_law(ra, k)
    Q, m2 = _cell_law(rb, k + 1)
    assert _hockey(P, Q, g.epsilon, m1 + m2) <= g.delta  # measured 5.3e-41, 5.9e-41
    a = mp.mpf(math.exp(-g.parameters["noise_epsilon"]))
    with mp.workdps(DPS):
        dl_eps = -mp.log(a)  # the DL's own epsilon, as the code's float a has it
    at_noise = _hockey(P, Q, dl_eps, m1 + m2)
    if k == 17:
        assert at_noise < 1e-30
    else:
        assert at_noise > 1e3 * g.delta  # measured 7.3e-3


@pytest.mark.parametrize("k", [1, 9, 17, 18])
def test_server_view_bound_dominates_the_exact_loss(k):
    """The SecAgg server sees a shard's sum before the top-up: k survivors' shares,
    Polya(k/18, a) - Polya(k/18, a). Its exact pure epsilon for a unit shift (the largest
    |ln p(z + 1)/p(z)|, z over the bulk; outside it the ratio lies in [a s, a] by the same
    argument) is at most server_view_epsilon and within 2% of it (measured 3.887 vs 3.890 at
    k = 1, 1.675 vs 1.693 at k = 9, 1.053 vs 1.057 at k = 17, both 1 at k = n_min)."""
    pmf, _ = _pd(mp.mpf(k) / 18, math.exp(-1.0))
    with mp.workdps(DPS):
        exact = float(max(abs(mp.log(pmf[z + 1] / pmf[z])) for z in range(-60, 60)))
    bound = server_view_epsilon(k, 18, 1.0, 1)
    assert exact <= bound + 1e-12 and exact >= 0.98 * bound
    assert server_view_epsilon(k, 18, 1.0, 3) == pytest.approx(1.0 + 3 * math.log(18 / k))
    with pytest.raises(ValueError, match="survivors must be an integer >= 1, got survivors=0"):
        server_view_epsilon(0, 18, 1.0, 1)


@pytest.mark.parametrize("agg", ["plain", "simulate"])
def test_short_shard_is_released_with_the_top_up_recorded(agg):
    """100 of the planned 1,000 users (N = S = 1,000, n_min = 1,000): the clients' noise
    (plain: the sum of each client's own Polya shares; simulate: their sum's law) and the
    publisher's top-up of 900 shares make DL(a) in every cell (the exact-law tests above read
    the top-up from the record; this checks that the noise holds it). Over 3,999 empty cells
    the sample variance is within 25% of 2a/(1 - a)^2 (measured 1.01x plain, 0.96x simulate);
    without the top-up it would be 0.1x. At a = e^{-0.535} (eps_noise) the DL's excess
    kurtosis is 3.15, so the sample variance of 3,999 draws has relative sd
    sqrt((3.15 + 2) / 3999) = 0.036: 25% is 7 sd (false failure < 1e-9 by the normal
    approximation). The top-up is in the evaluation's shard record, not in what a release
    publishes."""
    rel = federated_histogram(np.zeros(100, dtype=np.int64), 4000, 1.0, shard_size=1000,
                              max_users=1000, dropout=0.0, neighbour="add_remove",
                              aggregation=agg, rng=3)
    (s,) = rel.shards
    assert (s["survivors"], s["n_min"], s["top_up_shares"]) == (100, 1000, 900)
    assert "top_up_shares" not in public_shards(rel)[0]
    g = rel.guarantee
    assert g.parameters["top_up"] is True
    assert any("topped up by the publisher" in note for note in g.notes)
    a = math.exp(-g.parameters["noise_epsilon"])
    var = float(np.var(rel.counts[1:].astype(float)))
    assert abs(var / (2 * a / (1 - a) ** 2) - 1) < 0.25


def test_secure_aggregation_releases_the_top_up_in_its_noise():
    """Real SecAgg+ on 20 of the planned 1,000 clients (n_min = 1,000, all 20 survive): the
    unmasked sum plus the publisher's 980 shares is DL(a) in every cell. Over 1,999 empty
    cells the sample variance is within 25% of 2a/(1 - a)^2 (measured 0.91-0.98x over seeds
    0-2; without the top-up it would be 0.02x). At a = e^{-0.707} the DL's excess kurtosis is
    3.26, so the relative sd of the sample variance is sqrt(5.26 / 1999) = 0.051: 25% is 4.9
    sd (false failure 1.1e-6 by the normal approximation)."""
    rel = federated_histogram(np.zeros(20, dtype=np.int64), 2000, 1.0, shard_size=1000,
                              max_users=1000, dropout=0.0, neighbour="add_remove",
                              aggregation="secagg", rng=5)
    (s,) = rel.shards
    assert (s["survivors"], s["n_min"], s["top_up_shares"]) == (20, 1000, 980)
    a = math.exp(-rel.guarantee.parameters["noise_epsilon"])
    var = float(np.var(rel.counts[1:].astype(float)))
    assert abs(var / (2 * a / (1 - a) ** 2) - 1) < 0.25


def test_secure_aggregation_tops_up_down_to_its_threshold():
    """Real SecAgg+: a shard of 14 clients, all surviving (n_min = 18), is unmasked and topped
    up with 4 shares (its threshold is 10, more than two thirds of its own 14 clients); a
    shard of 18 clients of which 6 drop keeps 12 < 13 = its threshold, which SecAgg does not
    unmask: refused, and the guarantee names that threshold as not covered."""
    plan = ShardPlan(max_users=20, shard_size=20, dropout=0.1)
    assert (plan.n_min, plan.secagg_floor) == (18, 14)
    assert [plan.secagg_threshold(c) for c in (14, 18)] == [10, 13]
    rel = federated_histogram(np.zeros(14, dtype=np.int64), 1, 1.0, shard_size=20,
                              max_users=20, dropout=0.1, neighbour="add_remove",
                              aggregation="secagg", rng=4)
    assert rel.shards[0]["top_up_shares"] == 4
    assert rel.guarantee.parameters["secagg_floor"] == 14
    assert any("secagg_floor=14" in note and "not covered" in note
               for note in rel.guarantee.notes)
    assert all(k not in public_shards(rel)[0] for k in ("secagg_degree", "secagg_threshold",
                                                        "top_up_shares", "bytes_up_per_client"))
    dropped = np.zeros(18, dtype=bool)
    dropped[:6] = True
    with pytest.raises(FederatedRefused, match="12 of 18 clients survived, fewer than the 13"):
        federated_histogram(np.zeros(18, dtype=np.int64), 1, 1.0, shard_size=20,
                            max_users=20, dropout=0.1, neighbour="add_remove",
                            aggregation="secagg", dropped=dropped, rng=4)


def test_secure_aggregation_refuses_one_survivor_even_at_n_min_1():
    """n_min = 1 (eps 50, planned shard of 2, dropout 0.5): one survivor needs no top-up,
    but SecAgg cannot unmask fewer than 2; the refusal names the threshold instead of
    failing inside the protocol."""
    plan = ShardPlan(max_users=2, shard_size=2, dropout=0.5)
    assert (plan.n_min, plan.secagg_threshold(2)) == (1, 2)
    with pytest.raises(FederatedRefused, match="1 of 2 clients survived, fewer than the 2"):
        federated_histogram(np.zeros(2, dtype=np.int64), 1, 50.0, shard_size=2, max_users=2,
                            dropout=0.5, neighbour="add_remove", aggregation="secagg",
                            dropped=np.array([True, False]), rng=4)


@pytest.mark.parametrize("clients,dropout,threshold", [
    (20, 0.1, 14), (200, 0.1, 145), (1000, 0.1, 827), (10_000, 0.1, 8782), (20, 0.0, 20),
    (2, 0.0, 2), (10, 0.9, 7), (24, 0.1, 17), (10_500, 0.1, 9000)])
def test_secagg_threshold_rule(clients, dropout, threshold):
    """max(2, floor(2c/3) + 1, min(n_min, the binomial 2^-40 quantile of the survivors at the
    planned dropout)) for a plan of 10,000-client shards (n_min = ceil((1 - dropout) 10^4))
    or, for c <= 200, a plan of c-client shards; checked against the tail directly."""
    planned = 10_000 if clients > 200 else clients
    plan = ShardPlan(max_users=planned, shard_size=planned, dropout=dropout)
    assert plan.secagg_threshold(clients) == threshold
    tail = 2.0 ** -40
    if threshold > max(2, 2 * clients // 3 + 1) and threshold < plan.n_min:
        # the quantile decides: the threshold qualifies, one more does not
        assert scipy.stats.binom.cdf(threshold - 1, clients, 1 - dropout) <= tail
        assert scipy.stats.binom.cdf(threshold, clients, 1 - dropout) > tail
    assert threshold >= 2 * clients // 3 + 1  # the complete graph's security threshold


@pytest.mark.parametrize("alpha,n_min,a", [(2.0, 18, math.exp(-1.0)), (50.0, 18, math.exp(-1.0)),
                                           (300.0, 9000, math.exp(-1.0)),
                                           (5.0, 3, math.exp(-0.2))])
def test_renyi_bounds_dominate_the_exact_divergence(alpha, n_min, a):
    """Both bounds on the order-alpha Renyi divergence of Polya(1, a) against Polya(1 + h, a)
    (both directions) are >= the 40-digit series, the series bound within 1e-5 relative of it
    (a tight bound; the closed form only holds the Gamma limit)."""
    with mp.workdps(DPS):
        h, aa, al = mp.mpf(1) / n_min, mp.mpf(a), mp.mpf(alpha)

        def P(k):
            return (1 - aa) * aa**k

        def Q(k):
            return (mp.gamma(k + 1 + h) / (mp.gamma(1 + h) * mp.factorial(k))
                    * (1 - aa) ** (1 + h) * aa**k)

        up = mp.nsum(lambda k: Q(k) ** al * P(k) ** (1 - al), [0, mp.inf])
        down = mp.nsum(lambda k: P(k) ** al * Q(k) ** (1 - al), [0, mp.inf])
        exact = float(max(mp.log(up), mp.log(down)) / (al - 1))
    s = series_share_rdp(alpha, n_min, a)
    assert exact <= s <= exact * (1 + 1e-5) + 1e-15
    assert gamma_share_rdp(alpha, n_min) >= exact


def test_calibration_meets_the_target_and_refuses_what_it_cannot_pay():
    cal = add_remove_noise(1.0, 1e-10, 1, 9000, 300)
    assert cal.noise_epsilon + cal.share_epsilon <= 1.0 and cal.certified_delta <= 1e-10
    assert 0.98 < cal.noise_epsilon < 1.0 and cal.share_epsilon < 0.011
    e, _ = joining_share_epsilon(9000, cal.a, 300, cal.share_delta)
    assert e == cal.share_epsilon
    with pytest.raises(FederatedRefused, match="n_min=90 survivors per shard over 100 cells"):
        add_remove_noise(1.0, 1e-10, 1, 90, 100)


def test_add_remove_needs_a_public_bound_and_zero_out_keeps_the_old_noise():
    with pytest.raises(ValueError, match="pass max_users=N"):
        federated_histogram(np.zeros(5, dtype=int), 2, 1.0, aggregation="plain", rng=0,
                            neighbour="add_remove")
    with pytest.raises(ValueError, match="max_users and user_ids plan an add/remove round"):
        federated_histogram(np.zeros(5, dtype=int), 2, 1.0, neighbour="zero_out",
                            max_users=5, aggregation="plain", rng=0)
    z = federated_histogram(np.zeros(20, dtype=int), 2, 1.0, neighbour="zero_out",
                            shard_size=20, aggregation="plain", rng=0)
    assert z.guarantee.neighbour is Neighbour.ZERO_OUT and z.shards[0]["n_min"] == 20
    assert z.guarantee.event.levels[0].parameter == 1.0  # DL(e^-1): sensitivity 1


def test_public_shards_and_rounds_hold_no_count_under_add_remove():
    r = _release(20, shard_size=20, max_users=20, dropout=0.1, epsilon=2.0)
    assert r.shards[0]["survivors"] == 20  # the evaluation's view
    assert r.shards[0]["top_up_shares"] == 0
    assert all(k not in s for s in public_shards(r) for k in PRIVATE_SHARD_KEYS)
    g = np.random.default_rng(0)
    rows, cols = g.integers(0, 8, 5000), g.integers(0, 8, 5000)
    rel = adaptive_histogram(rows, cols, 3, 1.0, shard_size=6000, aggregation="simulate",
                             max_users=6000, dropout=0.2, rng=1, neighbour="add_remove")
    assert rel.guarantee.neighbour is Neighbour.ADD_REMOVE
    assert sum(x["epsilon"] for x in rel.rounds) == pytest.approx(1.0, rel=1e-9)
    assert all(x["noise_epsilon"] < x["epsilon"] for x in rel.rounds)
    assert rel.guarantee.parameters["eq7_users"] == 6000
    assert rel.guarantee.parameters["users_per_query"] is None
    # the server sees every round's sum before its top-up: the rounds' bounds add up
    # (simulate: no SecAgg threshold, one survivor at worst, Delta = 1, n_min = 4,800)
    sv = sum(x["noise_epsilon"] + math.log(4800) for x in rel.rounds)
    assert len(rel.rounds) > 1
    assert rel.guarantee.parameters["server_view_epsilon_max"] == pytest.approx(sv, rel=1e-12)
    assert any(f"at most {sv:.4g}" in note for note in rel.guarantee.notes)
    assert all("users" not in x and "survivors" not in x for x in rel.public_rounds())
    assert 5000 not in json.loads(json.dumps(rel.guarantee.to_dict(), default=str)
                                  )["parameters"].values()


def test_sampled_users_per_query_are_calibrated_for_replace_one():
    """A fixed number U of sampled users per sub-query: the neighbours' samples couple to
    differ by one replaced user, so the rounds carry the replace-one sensitivity 2."""
    g = np.random.default_rng(0)
    rows, cols = g.integers(0, 8, 3000), g.integers(0, 8, 3000)
    rel = adaptive_histogram(rows, cols, 3, 1.0, users_per_query=1000, shard_size=1000,
                             aggregation="simulate", rng=1, neighbour="add_remove")
    assert rel.guarantee.neighbour is Neighbour.ADD_REMOVE
    assert all(e.levels[0].sensitivity == 2 for e in rel.guarantee.event.steps)
    assert sum(x["epsilon"] for x in rel.rounds) == pytest.approx(1.0, rel=1e-9)


def _csv(path, n, seed=0):
    g = np.random.default_rng(seed)
    lines = ["user_id,x,y"] + [f"u{i:05d},{x:.4f},{y:.4f}"
                               for i, (x, y) in enumerate(g.random((n, 2)) * 0.999)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_private_report_does_not_state_n(tmp_path):
    """--input with 1237 users, --max-users 1300 under add/remove: report.json (and the
    summary line) hold the public bound, not n nor anything that follows it; zero_out (n
    public) states the users; --input without --max-users is refused (exit 2)."""
    from shuffledp.cli import main

    data = _csv(tmp_path / "u.csv", 1237)
    common = ["federated", "--input", str(data), "--depth", "3", "--dropout-rate", "0",
              "--aggregation", "simulate", "--seed", "1"]
    res = CliRunner().invoke(main, [*common, "--neighbour", "add_remove", "--max-users", "1300",
                                    "--out", str(tmp_path / "ar")])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "ar" / "report.json").read_text()
    rep = json.loads(text)
    assert rep["max_users"] == 1300 and rep["guarantee"]["neighbour"] == "add/remove one user"
    for key in ("users", "communication_total_vector_entries", "seconds"):
        assert key not in rep
    assert all(k not in r for r in rep["rounds"] for k in ("users", "survivors"))
    assert "1237" not in text and "1237" not in res.output
    zo = CliRunner().invoke(main, [*common, "--out", str(tmp_path / "zo")])  # the default
    assert zo.exit_code == 0, zo.output
    rep = json.loads((tmp_path / "zo" / "report.json").read_text())
    assert rep["users"] == 1237 and rep["guarantee"]["neighbour"].startswith("zero out")
    bad = CliRunner().invoke(main, [*common, "--neighbour", "add_remove", "--out",
                                    str(tmp_path / "x")])
    assert bad.exit_code == 2 and "--max-users" in bad.output
