"""Seeded fault fuzzer of secure aggregation: hostile and faulty clients, never a wrong sum.

Every trial draws a small run (3-9 clients, a threshold t, a vector length, a modulus) and a
fault schedule: some clients drop at a random round, others send mutated messages. It drives
the real :class:`~shuffledp.secagg.SecAggClient` and :class:`~shuffledp.secagg.SecAggServer`
round by round; each delivery is (channel, bytes), shuffled, so a message can arrive twice,
under another client's name, from another round or session, or not at all.

Faults (per faulty client, one each):

- ``drop@r``: sends nothing from round r on (r = 0..3);
- round 0: truncated, extended, forged sender, keys copied from another client (delivered
  after the original), sent twice;
- round 1: wrong recipient, a recipient missing, truncated, extended, forged sender, sent
  twice, a lying commitment to its own seed (the one fault the protocol cannot tolerate:
  the seed is then unverifiable and the run must abort);
- round 2: wrong length, an entry >= m, forged sender, the round-1 message replayed, another
  session's message, sent twice, and *valid* edits of the masked vector (a client may send
  any vector: the oracle counts the edit as a change of its input, not as an error);
- round 3: flipped bits in 1-3 shares (same or different secrets), a repeated, missing,
  extra or relabelled entry, a share >= P, truncated, forged sender, the round-2 message
  replayed, sent twice.

Oracle, computed from the schedule alone (not from the server): a client stays honest in
round r unless it dropped or sent a message that the fault makes invalid at a round <= r.
The release is *required* when no lying commitment was sent and every round has at least t
honest clients, and at least t honest round-3 holders (no flipped share). Any release must
equal sum of (x_u + edit_u) over the survivors the server reports, and those survivors must
be exactly the clients that sent a valid round-2 message. Outcomes:

- ``silent wrong sums``: a released sum (or survivor set) that differs from the oracle's;
- ``crashes``: any exception other than the server's SecAggAborted or a client's refusal;
- ``hangs``: a trial that does not finish within ``--trial-timeout`` seconds;
- ``withheld``: no release although the oracle requires one.

Both graphs. ``--graph complete`` fuzzes the full protocol, ``--graph sparse`` SecAgg+
(:mod:`shuffledp.secagg.graph`): each trial then also draws an even degree k in [2, n - 2], a
threshold t in [2, k], the fewest clients per round (min_clients) and a public graph seed,
and runs the same faults on a random Harary graph (5-12 clients). The sparse oracle follows
the graph: a client goes on in rounds 1 and 2 only with at least t neighbours left (else it
refuses and leaves), every round needs min_clients clients, and a release is required when,
besides, every secret to rebuild (each survivor's seed, each dropped sharer's mask key) has t
correct holders among its owner's neighbours. ``--graph both`` (the default) runs
``--trials`` trials of each.

Run: ``python bench/fuzz_secagg.py [--trials 3500] [--seed 0] [--graph both]`` (about 45 s
per graph on 2 cores; 3,500 trials deliver about 2,300 mutated round-2/3 messages).
Exit status 1 if any silent wrong sum, crash, hang or withheld release occurred.
"""

from __future__ import annotations

import argparse
import os
import signal
import struct
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from shuffledp.secagg import SecAggAborted, SecAggClient, SecAggRefused, SecAggServer
from shuffledp.secagg import messages as msg
from shuffledp.secagg.graph import harary_graph
from shuffledp.secagg.server import COMMIT_BYTES, REVEAL

HDR = msg.HEADER.size
MODULI = (2, 97, 1 << 20, 1 << 62)
R0 = ("trunc", "extend", "forge", "copy_keys", "twice")
R1 = ("wrong_recipient", "missing_recipient", "trunc", "extend", "forge", "twice", "lie")
R2 = ("length", "out_of_range", "forge", "replay_prev", "other_session", "twice", "edit")
R3 = ("flip1", "flip2", "flip3", "dup_entry", "missing_entry", "extra_entry", "relabel",
      "out_of_field", "trunc", "forge", "replay_prev", "twice")
TOLERATED_VALID = {"twice", "edit", "flip1", "flip2", "flip3"}  # the message stays accepted


class Hang(Exception):
    pass


@dataclass
class Trial:
    n: int
    t: int
    L: int
    m: int
    drop: dict[int, int] = field(default_factory=dict)  # client -> first silent round
    fault: dict[int, tuple[int, str]] = field(default_factory=dict)  # client -> (round, kind)
    k: int = 0  # sparse: the degree (0: complete graph)
    min_clients: int = 0  # sparse: the fewest clients per round
    seed: bytes = b""  # sparse: the public graph seed

    def graph(self):
        return (harary_graph(self.n, self.k, self.seed, self.min_clients) if self.k
                else None)


def draw_trial(g: np.random.Generator, sparse: bool = False) -> Trial:
    if sparse:
        n = int(g.integers(5, 13))
        k = 2 * int(g.integers(1, (n - 2) // 2 + 1))
        t = int(g.integers(2, k + 1))
        tr = Trial(n, t, int(g.integers(1, 7)), int(g.choice(MODULI)), k=k,
                   min_clients=int(g.integers(n // 2, n + 1)), seed=g.bytes(32))
    else:
        n = int(g.integers(3, 10))
        t = int(g.integers(2, n + 1))
        tr = Trial(n, t, int(g.integers(1, 7)), int(g.choice(MODULI)))
    for c in g.permutation(n)[: int(g.integers(0, max(1, n // 2) + 1))]:
        c = int(c)
        if g.random() < 0.25:
            tr.drop[c] = int(g.integers(0, 4))
        else:
            r = int(g.choice([0, 1, 2, 2, 3, 3, 3]))  # round-2/3 faults most often
            tr.fault[c] = (r, str(g.choice((R0, R1, R2, R3)[r])))
    return tr


def _frame_like(out: bytes, payload: bytes, sender: int | None = None) -> bytes:
    s = struct.unpack_from("<I", out, 8)[0] if sender is None else sender
    return msg.frame(out[5], s, out[16:48], payload)


def _flip(out: bytes, entry: int, bit: int) -> bytes:
    b = bytearray(out)
    b[HDR + 4 + entry * REVEAL.size + 5 + bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


def mutate(g, tr, c, r, kind, out, sent, keep):
    """The deliveries (channel, bytes) that faulty client c makes of its round-r message."""
    p = out[HDR:]
    other = int((c + 1 + g.integers(0, tr.n - 1)) % tr.n)
    if kind == "twice":
        return [(c, out), (c, out)]
    if kind == "trunc":
        return [(c, out[: int(g.integers(0, len(out)))])]
    if kind == "extend":
        return [(c, out + bytes(int(g.integers(1, 40))))]
    if kind == "forge":
        return [(c, _frame_like(out, p, sender=other))]
    if kind == "copy_keys":
        keep["late"].append((c, None, other))  # resolved once the original is known
        return []
    if kind in ("wrong_recipient", "missing_recipient"):
        k = struct.unpack_from("<I", p, COMMIT_BYTES)[0]
        if k == 0:
            return [(c, out[:-1])]
        q = bytearray(p)
        if kind == "wrong_recipient":
            struct.pack_into("<I", q, COMMIT_BYTES + 4, tr.n + 5)
            return [(c, _frame_like(out, bytes(q)))]
        item = 4 + (len(p) - COMMIT_BYTES - 4) // k
        body = q[COMMIT_BYTES + 4 + item:]
        return [(c, _frame_like(out, bytes(q[:COMMIT_BYTES]) + struct.pack("<I", k - 1)
                                + bytes(body)))]
    if kind == "lie":
        b = bytearray(out)
        b[HDR + int(g.integers(0, COMMIT_BYTES))] ^= 1 << int(g.integers(0, 8))
        return [(c, bytes(b))]
    if kind == "length":
        return [(c, _frame_like(out, p[: max(0, len(p) - 8 * int(g.integers(1, 3)))]
                                if g.random() < 0.5 else p + bytes(8)))]
    if kind == "out_of_range":
        y = np.frombuffer(p, "<i8").copy()
        y[int(g.integers(0, y.size))] = tr.m + int(g.integers(0, 5)) if g.random() < 0.7 else -1
        return [(c, _frame_like(out, y.astype("<i8").tobytes()))]
    if kind == "replay_prev":
        return [(c, sent[(r - 1, c)])]
    if kind == "other_session":
        return [(c, out[:16] + os.urandom(16) + out[32:])]
    if kind == "edit":
        y = np.frombuffer(p, "<i8").copy()
        j = int(g.integers(0, y.size))
        new = int(g.integers(0, tr.m))
        keep["edit"][c] = np.zeros(tr.L, dtype=object)
        keep["edit"][c][j] = (new - int(y[j])) % tr.m
        y[j] = new
        return [(c, _frame_like(out, y.astype("<i8").tobytes()))]
    k = struct.unpack_from("<I", p)[0]
    if kind.startswith("flip"):
        b = out
        count = int(kind[-1])
        entries = g.choice(k, size=min(count, k), replace=False)
        for e in entries:
            b = _flip(b, int(e), int(g.integers(0, 250)))
        keep["flipped"].add(c)
        return [(c, b)]
    body = p[4:]
    if kind == "dup_entry":
        j = int(g.integers(0, k))
        return [(c, _frame_like(out, struct.pack("<I", k + 1) + body
                                + body[j * REVEAL.size:(j + 1) * REVEAL.size]))]
    if kind == "missing_entry":
        j = int(g.integers(0, k))
        return [(c, _frame_like(out, struct.pack("<I", k - 1) + body[:j * REVEAL.size]
                                + body[(j + 1) * REVEAL.size:]))]
    if kind == "extra_entry":
        return [(c, _frame_like(out, struct.pack("<I", k + 1) + body
                                + REVEAL.pack(tr.n + 3, 0, os.urandom(32))))]
    if kind == "relabel":
        q = bytearray(p)
        q[4 + int(g.integers(0, k)) * REVEAL.size + 4] ^= 1
        return [(c, _frame_like(out, bytes(q)))]
    if kind == "out_of_field":
        q = bytearray(p)
        j = int(g.integers(0, k))
        q[4 + j * REVEAL.size + 5:4 + (j + 1) * REVEAL.size] = b"\xff" * 32
        return [(c, _frame_like(out, bytes(q)))]
    raise AssertionError(kind)


def _invalid(tr: Trial, c: int, r: int) -> bool:
    f = tr.fault.get(c)
    return (f is not None and f[0] == r and f[1] not in TOLERATED_VALID and f[1] != "lie")


def sparse_oracle(tr: Trial) -> tuple[bool, list[set[int]]]:
    """The oracle on the trial's graph: clients refuse with fewer than t neighbours, rounds
    need min_clients, each secret t correct holders among its owner's neighbours."""
    graph = tr.graph()
    nb = {u: set(graph.neighbours(u)) for u in range(tr.n)}
    per_round: list[set[int]] = []
    prev = set(range(tr.n))
    for r in range(4):
        now = set()
        for c in prev:
            if tr.drop.get(c, 9) <= r:
                continue
            if r in (1, 2) and len(nb[c] & per_round[r - 1]) < tr.t:
                continue  # an honest client refuses: too few neighbours left
            if not _invalid(tr, c, r):
                now.add(c)
        per_round.append(now)
        if len(now) < tr.min_clients:
            return False, per_round + [set()] * (3 - r)
        prev = now
    lie = any(k == "lie" and c in per_round[2] for c, (_, k) in tr.fault.items())
    flips = {c for c, (r, k) in tr.fault.items() if r == 3 and k.startswith("flip")}
    good = per_round[3] - flips
    owners = per_round[2] | (per_round[1] - per_round[2])
    required = not lie and all(len(nb[u] & good) >= tr.t for u in owners)
    return required, per_round


def oracle(tr: Trial) -> tuple[bool, list[set[int]]]:
    """(release required?, honest-and-accepted clients per round) from the schedule alone."""
    if tr.k:
        return sparse_oracle(tr)
    alive = set(range(tr.n))
    per_round = []
    for r in range(4):
        alive = {c for c in alive if tr.drop.get(c, 9) > r}
        alive = {c for c in alive if not (c in tr.fault and tr.fault[c][0] == r
                                          and tr.fault[c][1] not in TOLERATED_VALID
                                          and tr.fault[c][1] != "lie")}
        per_round.append(set(alive))
    # a lying commitment matters only if its seed must be unmasked: the liar's masked input
    # was accepted (then its self-mask seed is unverifiable and the run must abort)
    lie = any(k == "lie" and c in per_round[2] for c, (_, k) in tr.fault.items())
    flips = {c for c, (r, k) in tr.fault.items() if r == 3 and k.startswith("flip")}
    good_holders = per_round[3] - flips
    required = (not lie and all(len(a) >= tr.t for a in per_round)
                and len(good_holders) >= tr.t)
    return required, per_round


def run_trial(g: np.random.Generator, tr: Trial,
              honest_survivors: set[int]) -> tuple[str, int]:
    """Outcome and the number of mutated round-2/3 messages delivered; a release is silent
    (wrong) unless its survivors are ``honest_survivors`` (the oracle's round-2 set) and its
    sum theirs."""
    X = [g.integers(0, tr.m, tr.L) for _ in range(tr.n)]
    session = os.urandom(16)
    graph = tr.graph()
    server = SecAggServer(tr.n, tr.L, tr.m, tr.t, session, graph=graph)
    clients = {i: SecAggClient(i, X[i], tr.m, tr.t, session, graph=graph) for i in range(tr.n)}
    keep = {"late": [], "edit": {}, "flipped": set()}
    sent: dict[tuple[int, int], bytes] = {}
    incoming: dict[int, bytes | None] = dict.fromkeys(range(tr.n))
    steps = [lambda c, _: c.advertise(), SecAggClient.share_keys, SecAggClient.masked_input,
             SecAggClient.unmask]
    mutated = 0
    total = None
    for r in range(4):
        deliveries = []
        keep["late"] = []
        for i, c in clients.items():
            if tr.drop.get(i, 9) <= r or i not in incoming:
                continue
            try:
                out = steps[r](c, incoming[i])
            except (SecAggRefused, msg.MessageError):
                continue  # an honest client leaves (the oracle decides if that was allowed)
            sent[(r, i)] = out
            f = tr.fault.get(i)
            if f is not None and f[0] == r:
                deliveries += mutate(g, tr, i, r, f[1], out, sent, keep)
                mutated += r >= 2
            else:
                deliveries.append((i, out))
        order = [deliveries[j] for j in g.permutation(len(deliveries))]
        for c, _, src in keep["late"]:  # key copies arrive after the original
            if (0, src) in sent:
                out = sent[(0, src)]
                order.append((c, _frame_like(out, out[HDR:], sender=c)))
        for ch, data in order:
            server.receive(data, channel=ch)
        try:
            reply = server.close_round()
        except SecAggAborted:
            return "aborted", mutated
        if isinstance(reply, dict):  # round 1; rounds 0 and 2 of a sparse graph
            incoming = dict(reply)
        elif isinstance(reply, bytes):
            incoming = {i: reply for i in server.members[-1]}
        else:
            total = reply
    survivors = set(server.members[3])
    want = np.zeros(tr.L, dtype=object)
    for u in survivors:
        want = want + X[u].astype(object) + keep["edit"].get(u, 0)
    if survivors != honest_survivors or total.tolist() != [int(w % tr.m) for w in want]:
        return "silent", mutated
    return "released", mutated


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=3500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trial-timeout", type=float, default=30.0)
    ap.add_argument("--graph", choices=("complete", "sparse", "both"), default="both")
    a = ap.parse_args(argv)
    bad = 0
    for graph in (("complete", "sparse") if a.graph == "both" else (a.graph,)):
        print(f"== {graph} graph ==")
        bad += _fuzz(a, graph == "sparse")
    return 1 if bad else 0


def _fuzz(a, sparse: bool) -> int:
    g = np.random.default_rng(a.seed)
    counts: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    mutated = 0
    examples: dict[str, str] = {}

    def alarm(*_):
        raise Hang()
    signal.signal(signal.SIGALRM, alarm)
    t0 = time.perf_counter()
    for k in range(a.trials):
        tr = draw_trial(g, sparse)
        for r, kind in tr.fault.values():
            kinds[f"r{r}:{kind}"] += 1
        for r in tr.drop.values():
            kinds[f"drop@{r}"] += 1
        required, per_round = oracle(tr)
        signal.setitimer(signal.ITIMER_REAL, a.trial_timeout)
        try:
            outcome, mut = run_trial(g, tr, per_round[2])
            mutated += mut
        except Hang:
            outcome = "hang"
        except Exception as e:  # noqa: BLE001 - a crash is what this counts
            outcome = "crash"
            examples.setdefault("crash", f"trial {k}: {type(e).__name__}: {e} ({tr})")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if outcome == "aborted" and required:
            outcome = "withheld"
        counts[outcome] += 1
        counts["required"] += required
        if outcome in ("silent", "withheld"):
            examples.setdefault(outcome, f"trial {k}: {tr}")
    wall = time.perf_counter() - t0
    print(f"trials: {a.trials} (seed {a.seed}), {wall:.1f} s")
    print(f"mutated round-2/3 messages delivered: {mutated}")
    print(f"faulty-client schedules: {sum(kinds.values())} faults over "
          f"{len(kinds)} kinds ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
    print(f"released (correct): {counts['released']}, aborted: {counts['aborted']}, "
          f"release required by the oracle: {counts['required']}")
    print(f"silent wrong sums: {counts['silent']}")
    print(f"crashes: {counts['crash']}")
    print(f"hangs: {counts['hang']}")
    print(f"correct sum withheld although the protocol allows it: {counts['withheld']}")
    for k, v in examples.items():
        print(f"  first {k}: {v}")
    return counts["silent"] + counts["crash"] + counts["hang"] + counts["withheld"]


if __name__ == "__main__":
    sys.exit(main())
