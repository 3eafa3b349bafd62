"""The communication graph of SecAgg+ ([Bell20]_): k = O(log n) neighbours per client.

In the full protocol ([Bonawitz17]_) every client agrees keys with, masks against and
Shamir-shares its secrets among all n - 1 others: O(n) work per client, O(n^2) per run.
SecAgg+ replaces the complete graph by a random k-regular graph G and runs the same rounds
on G's edges only: a client advertises keys to, shares its mask key s_sk and self-mask seed
b (threshold t) among, and masks against its k neighbours; the server reconstructs a secret
from t of the owner's neighbours. The pairwise masks still cancel in the sum (each edge
(u, v) adds +PRG(s_uv) at one end and -PRG(s_uv) at the other), so the sum is exact.

The graph ([Bell20]_ Sec. 3, the random Harary graph): H(n, k) (k even) puts the n clients
on a ring and joins each to the k/2 nearest on either side; the clients are placed on the
ring by a uniformly random permutation pi. Node u's neighbours are then a uniformly random
k-subset of the other n - 1 clients, which is what the bounds below use.

Parameter choice (:func:`sparse_parameters`; the semi-honest analysis of [Bell20]_ Sec. 3:
a server that follows the protocol and colludes with at most gamma n clients, at most
delta n dropouts). Let C = floor(gamma n), D = floor(delta n), B = C + D. For the smallest
even k for which a t exists:

1. security, connectivity: removing the corrupted and dropped clients leaves the honest
   survivors connected (otherwise the server learns the sums of the components apart). A
   set R disconnects H(n, k) only if it holds two runs of k/2 ring-consecutive clients
   separated on both sides by a client outside R (if at most one gap between consecutive
   remaining clients exceeds k/2, the remaining clients form a path). There are
   n (n - k - 1) / 2 such pairs of runs, and k given ring positions all fall in a set of B
   clients placed by a uniform permutation with probability C(n - k, B - k) / C(n, B), so
   P[disconnected] <= n (n - k - 1) / 2 * C(n - k, B - k) / C(n, B) <= 2^-(eta + 1);
2. security, threshold: no honest client has t or more corrupted neighbours (they would
   hold t shares of both its secrets and unmask its input). An honest client's corrupted
   neighbours are X ~ Hypergeometric(n - 1, C, k); union over n clients:
   n P[X >= t] <= 2^-(eta + 1);
3. correctness: every client has at least t neighbours that survive to the unmasking
   (otherwise its secret cannot be rebuilt and the round is refused). Survivors among its
   neighbours are Y ~ Hypergeometric(n - 1, n - 1 - D, k) at worst; n P[Y < t] <= 2^-sigma.

t is the smallest value satisfying 2 (cheaper reconstruction); 3 then holds for it. Every
inequality is checked exactly in integer arithmetic (no floating point). The total
security failure probability is at most 2^-eta, the correctness failure at most 2^-sigma.
When no k < n - 1 qualifies (small n, or large gamma + delta) the complete graph is used.

Where the graph's randomness comes from (threat model). The bounds need the permutation to
be independent of which clients are corrupted or drop out, so it must be drawn after the
corruptions are fixed and must not be chosen by the server. Here the graph is a public,
deterministic function of a 32-byte seed (:func:`graph_seed`: SHA-256 of the run's context,
which holds the 16-byte session id drawn fresh for each run, and of n, k, min_clients), and
every client computes its own neighbourhood from the seed: the server never sends a
neighbour list, so it cannot give two clients inconsistent graphs, nor one client a
neighbourhood of its choice. As in [Bell20]_'s semi-honest setting (Sec. 3) the server draws
the session honestly; a server that re-draws session ids until the graph suits it gains a
factor of its number of tries in the eta bound (out of scope here; a deployment that must
exclude it takes the seed from a public randomness beacon published after enrolment:
``graph_seed`` of :func:`shuffledp.secagg.secure_sum`). Corruptions are assumed static
(fixed before the seed) and dropouts independent of the graph.

What could not be verified: the text of [Bell20]_ was not available while this was written;
the bounds 1-3 are derived above from first principles and agree with the union bounds of
the authors' released parameter finder (Google's federated-compute, graph parameter finder
for the "curious server" class: the same run-pair count and hypergeometric tails, eta split
evenly between the two security events). The paper's section and theorem numbers, its
default (sigma, eta) and its semi-malicious variant (where a server that lies about who
dropped needs 2t > k + corrupted neighbours and a consistency round) are not reproduced:
only the semi-honest protocol is implemented, with sigma = 20 and eta = 40 as defaults.

References
----------
.. [Bell20] Bell, Bonawitz, Gascon, Lepoint, Raykova (2020), "Secure Single-Server Aggregation
   with (Poly)Logarithmic Overhead", Sec. 3 (random Harary graph, semi-honest protocol) --
   full entry in docs/references.md.
.. [Bonawitz17] Bonawitz et al. (2017), "Practical Secure Aggregation", Fig. 4 -- full entry in
   docs/references.md.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from shuffledp import _validation as v

SECURITY_BITS = 40
FAILURE_BITS = 20
#: the default fraction of corrupted clients (colluding with the server) a sparse graph tolerates
CORRUPT = 0.05


@dataclass(frozen=True)
class GraphParameters:
    """The degree k and Shamir threshold t of a SecAgg+ graph, with the bounds they meet.

    Attributes
    ----------
    n : int
        Clients.
    k : int
        Degree (neighbours per client); n - 1 for the complete graph.
    threshold : int
        t: shares (from neighbours) needed to rebuild a client's secret.
    min_clients : int
        The fewest clients any round may end with: n - floor(delta n).
    dropout, corrupt : float
        delta and gamma the parameters were chosen for.
    security_bits, failure_bits : int
        eta and sigma.
    log2_disconnect, log2_corrupt_tail, log2_survivor_tail : float
        log2 of the three bounds (connectivity, n P[X >= t], n P[Y < t]); -inf when the event
        is impossible.
    complete : bool
        True when no sparse graph qualifies and the complete graph is used.
    """

    n: int
    k: int
    threshold: int
    min_clients: int
    dropout: float
    corrupt: float
    security_bits: int
    failure_bits: int
    log2_disconnect: float
    log2_corrupt_tail: float
    log2_survivor_tail: float
    complete: bool = False

    def to_dict(self) -> dict:
        """The parameters as a JSON-ready dict."""
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def _log2(num: int, den: int) -> float:
    """log2(num / den) of two non-negative integers of any size (-inf for 0)."""
    return -math.inf if num == 0 else math.log2(num) - math.log2(den)


def _hyper_terms(pop: int, good: int, k: int) -> list[int]:
    """C(good, j) C(pop - good, k - j) for j = 0..k (the hypergeometric pmf times C(pop, k))."""
    return [math.comb(good, j) * math.comb(pop - good, k - j) for j in range(k + 1)]


def _threshold_range(n: int, k: int, C: int, D: int, eta: int, sigma: int):
    """(t_min, t_max, corrupt tail numerator, survivor tail numerator, C(n-1, k)) or None."""
    total = math.comb(n - 1, k)
    bad = _hyper_terms(n - 1, C, k)
    # smallest t with n * P[X >= t] * 2^(eta+1) <= 1
    tail, t_min = 0, k + 1
    for t in range(k, -1, -1):
        tail += bad[t]
        if n * tail << (eta + 1) > total:
            break
        t_min = t
    t_min = max(t_min, 2)  # Shamir sharing here needs t >= 2
    alive = _hyper_terms(n - 1, n - 1 - D, k)
    # largest t with n * P[Y < t] * 2^sigma <= 1
    low, t_max = 0, 0
    for t in range(1, k + 1):
        low += alive[t - 1]
        if n * low << sigma > total:
            break
        t_max = t
    if t_min > t_max:
        return None
    return t_min, t_max, sum(bad[t_min:]), sum(alive[:t_min]), total


def _disconnect(n: int, k: int, B: int) -> tuple[int, int]:
    """(numerator, denominator) of n (n - k - 1) / 2 * C(n - k, B - k) / C(n, B)."""
    if k > B or n - k - 1 <= 0:
        return 0, 1
    return n * (n - k - 1) * math.comb(n - k, B - k), 2 * math.comb(n, B)


def sparse_parameters(n: int, dropout: float, corrupt: float = CORRUPT, *,
                      security_bits: int = SECURITY_BITS, failure_bits: int = FAILURE_BITS,
                      min_clients: int | None = None) -> GraphParameters:
    """The smallest even degree k and its threshold t meeting [Bell20]_'s three bounds.

    Parameters
    ----------
    n : int
        Clients, n >= 2.
    dropout : float in [0, 1)
        delta: the largest fraction of clients that may drop out (a round with fewer than
        n - floor(delta n) clients is refused).
    corrupt : float in [0, 1)
        gamma: the largest fraction of clients colluding with the server.
    security_bits : int
        eta: P[the server learns more than the sum] <= 2^-eta (bounds 1 and 2 of the module
        docstring, 2^-(eta + 1) each).
    failure_bits : int
        sigma: P[some client's secret cannot be rebuilt] <= 2^-sigma (bound 3).
    min_clients : int, optional
        The fewest clients a round may end with, given as a count instead of ``dropout``
        (then D = n - min_clients exactly, and ``dropout`` is ignored).

    Returns
    -------
    GraphParameters
        k, t, min_clients and the log2 of each bound; ``complete=True`` (k = n - 1, see
        Notes) when no sparse graph qualifies.

    Raises
    ------
    ValueError
        ``n`` < 2, a fraction outside [0, 1), delta + gamma >= 1, or bits outside [1, 256].
    TypeError
        A count is not an integer.

    Notes
    -----
    The complete-graph fallback uses t = n - floor(delta n) (every survivor's share is
    needed at worst), which needs t > floor(gamma n) for the threshold bound; if even that
    fails a ValueError says so.
    """
    n = v.count("n", n, 2)
    if min_clients is not None:
        mc = v.bounded_count("min_clients", min_clients, 1, n)
        dropout = (n - mc) / n
    delta = v.interval("dropout", dropout, 0.0, 1.0, open_low=False)
    gamma = v.interval("corrupt", corrupt, 0.0, 1.0, open_low=False)
    eta = v.bounded_count("security_bits", security_bits, 1, 256)
    sigma = v.bounded_count("failure_bits", failure_bits, 1, 256)
    if delta + gamma >= 1:
        raise ValueError(f"dropout + corrupt must be < 1, got dropout={dropout!r}, "
                         f"corrupt={corrupt!r}")
    D, C = math.floor(delta * n), math.floor(gamma * n)
    if min_clients is not None:
        D = n - mc
    min_clients = n - D
    for k in range(2, n - 1, 2):
        num, den = _disconnect(n, k, C + D)
        if num << (eta + 1) > den:
            continue
        got = _threshold_range(n, k, C, D, eta, sigma)
        if got is None:
            continue
        t_min, _, bad, low, total = got
        t = max(t_min, 2)
        return GraphParameters(n, k, t, min_clients, delta, gamma, eta, sigma,
                               _log2(num, den), _log2(n * bad, total), _log2(n * low, total))
    t = max(2, min_clients) if n >= 2 else 1
    if t <= C:
        raise ValueError(f"no graph tolerates corrupt={corrupt!r} with dropout={dropout!r} "
                         f"for n={n}: the complete graph's threshold {t} is not above the "
                         f"{C} corrupted clients")
    return GraphParameters(n, n - 1, t, min_clients, delta, gamma, eta, sigma, -math.inf,
                           -math.inf, -math.inf, complete=True)


def graph_seed(context: bytes, n: int, k: int, min_clients: int) -> bytes:
    """The public 32-byte seed of a run's graph: SHA-256 of a label, the run's packed context
    (session id, modulus, vector length, threshold) and n, k, min_clients.

    Parameters
    ----------
    context : bytes
        The run's packed :class:`~shuffledp.secagg.messages.Context` (32 bytes), or any
        public unpredictable bytes (a randomness beacon's output).
    n, k, min_clients : int
        The graph's size, degree and the fewest clients per round.

    Returns
    -------
    bytes
        32 bytes.

    Raises
    ------
    struct.error
        A count outside [0, 2^32) (the caller's counts are checked before).
    """
    return hashlib.sha256(b"shuffledp secagg+ graph" + bytes(context)
                          + struct.pack("<III", n, k, min_clients)).digest()


def _permutation(seed: bytes, n: int) -> np.ndarray:
    """Fisher-Yates from the ChaCha20 keystream of ``seed``: exactly uniform (rejection of the
    top words per draw), identical on every machine."""
    enc = Cipher(algorithms.ChaCha20(seed, bytes(16)), mode=None).encryptor()
    words = np.frombuffer(enc.update(bytes(8 * (n + 64))), dtype="<u8").tolist()
    pos = 0
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        bound = i + 1
        limit = (1 << 64) - ((1 << 64) % bound)
        while True:
            if pos == len(words):
                words = np.frombuffer(enc.update(bytes(8 * 1024)), dtype="<u8").tolist()
                pos = 0
            w = words[pos]
            pos += 1
            if w < limit:
                break
        j = w % bound
        perm[i], perm[j] = perm[j], perm[i]
    return np.asarray(perm, dtype=np.int64)


@dataclass(frozen=True)
class CommunicationGraph:
    """A run's graph: each client's neighbours (the complete graph or a random Harary graph).

    Build it with :func:`harary_graph` or :func:`complete_graph`; every party computes the
    same graph from the public seed.

    Attributes
    ----------
    n : int
        Clients (ids 0..n-1).
    k : int
        Degree.
    min_clients : int
        The fewest clients a round may end with (bound into every key derivation).
    seed : bytes
        The public seed (32 zero bytes for the complete graph).
    complete : bool
        True for the complete graph.
    """

    n: int
    k: int
    min_clients: int
    seed: bytes
    complete: bool
    _ring: np.ndarray = field(repr=False, compare=False)  # ring position -> client
    _where: np.ndarray = field(repr=False, compare=False)  # client -> ring position

    def neighbours(self, u: int) -> list[int]:
        """Client ``u``'s neighbours, sorted (every other client for the complete graph)."""
        if self.complete:
            return [w for w in range(self.n) if w != u]
        p = int(self._where[u])
        h = self.k // 2
        idx = [(p + d) % self.n for d in range(-h, h + 1) if d]
        return sorted(int(w) for w in self._ring[idx])

    def descriptor(self) -> bytes:
        """What the key derivations bind: b"" for the complete graph (the full protocol's
        derivations are unchanged), else kind, n, k, min_clients and the seed."""
        if self.complete:
            return b""
        return b"harary" + struct.pack("<III", self.n, self.k, self.min_clients) + self.seed

    def edges(self) -> set[tuple[int, int]]:
        """All edges (u, v) with u < v."""
        return {(u, w) for u in range(self.n) for w in self.neighbours(u) if u < w}


def complete_graph(n: int, min_clients: int | None = None) -> CommunicationGraph:
    """The full protocol's graph: every pair of clients joined.

    Parameters
    ----------
    n : int
        Clients, n >= 2.
    min_clients : int, optional
        The fewest clients a round may end with (default 0: the threshold rules).

    Returns
    -------
    CommunicationGraph

    Raises
    ------
    ValueError
        ``n`` < 2 or ``min_clients`` outside [0, n].
    TypeError
        A count is not an integer.
    """
    n = v.count("n", n, 2)
    mc = 0 if min_clients is None else v.bounded_count("min_clients", min_clients, 0, n)
    empty = np.zeros(0, dtype=np.int64)
    return CommunicationGraph(n, n - 1, mc, bytes(32), True, empty, empty)


def harary_graph(n: int, k: int, seed: bytes, min_clients: int) -> CommunicationGraph:
    """The random Harary graph H(n, k) of [Bell20]_ Sec. 3 from a public seed.

    Parameters
    ----------
    n : int
        Clients, n >= 3.
    k : int
        Even degree, 2 <= k <= n - 2.
    seed : bytes
        32 public bytes (:func:`graph_seed`): the ring order is the Fisher-Yates permutation
        of the seed's ChaCha20 keystream.
    min_clients : int
        The fewest clients a round may end with, 1 <= min_clients <= n.

    Returns
    -------
    CommunicationGraph

    Raises
    ------
    ValueError
        ``k`` odd or outside [2, n - 2], ``seed`` not 32 bytes, ``min_clients`` outside
        [1, n].
    TypeError
        A count is not an integer.
    """
    n = v.count("n", n, 3)
    k = v.bounded_count("k", k, 2, n - 2)
    if k % 2:
        raise ValueError(f"k must be even (a Harary graph of odd degree is not built here), "
                         f"got k={k}")
    if not isinstance(seed, (bytes, bytearray)) or len(seed) != 32:
        raise ValueError(f"seed must be 32 bytes, got {seed!r:.40}")
    mc = v.bounded_count("min_clients", min_clients, 1, n)
    ring = _permutation(bytes(seed), n)
    where = np.empty(n, dtype=np.int64)
    where[ring] = np.arange(n)
    return CommunicationGraph(n, k, mc, bytes(seed), False, ring, where)


__all__ = ["CORRUPT", "FAILURE_BITS", "SECURITY_BITS", "CommunicationGraph", "GraphParameters",
           "complete_graph", "graph_seed", "harary_graph", "sparse_parameters"]
