"""Seeded mutation fuzzer of the protocol's wire path: shuffler and analyzer, both paths.

Every case builds the honest batches of 4 users (2x2 grid, n = 4, declared dropout 0.5 so a
release needs >= 2 users), mutates either one user's batch on its way to the shuffler or
the mixed batch on its way to the analyzer, runs :class:`shuffledp.protocol.shuffler.Shuffler` and
:func:`shuffledp.analyzers.heatmap.modular.accumulate_mixed` with the count check of
:meth:`~shuffledp.analyzers.heatmap.modular.ModularAccumulator.modular_sums`, and classifies:

- ``rejected``: the analyzer refused (WireError / ReleaseRefused), nothing released;
- ``dropped``: the shuffler rejected or dropped the mutated batch (counted in its report)
  and the release is exactly that of the honest users forwarded;
- ``benign``: released, exact, and nothing was dropped (the mutation did not change the
  data, e.g. records swapped at one coordinate, or a resubmission after a bad upload);
- ``kept_edit``: released, and the sums are those of n_users - 1 honest users plus the
  edited batch itself, decrypted: the edit reached the shuffler as a complete, valid batch
  and was kept as its sender's input. Expected only for ``copy_from_other`` when the edited
  batch arrives before the batch it copied from (the shuffler keeps the first of two
  batches sharing a record, :mod:`shuffledp.protocol.shuffler` "Copied records"): an attacker who
  can edit a batch in transit can as well replace it by one encrypted to the analyzer's
  public key, so this is input substitution, which a user batch without sender
  authentication cannot prevent;
- ``silent``: released, but the sums are none of the above, or the header counts differ
  from the shuffler's (silent acceptance of corrupt data);
- ``crash``: any other exception.

Oracle: the shares of every honest user are known, so a release is exact iff its modular
sums equal the sum of some subset of honest users of size n_users (2^4 subsets) and its
(n_users, n_dropped) are those the shuffler reported. The mixed batch is authenticated with
a shuffler-analyzer MAC key, as the deployment path is.

Run: ``python bench/fuzz_wire.py [--cases 20000] [--seed 0]`` (about 3 minutes).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import itertools
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from shuffledp import Grid
from shuffledp.analyzers.heatmap.modular import (
    ReleaseRefused,
    accumulate_mixed,
    check_participation,
)
from shuffledp.protocol.crypto import (
    encrypt_records,
    encrypted_record_bytes,
    generate_analyzer_key,
    generate_mac_key,
    public_bytes,
)
from shuffledp.protocol.params import derive_params
from shuffledp.protocol.shuffler import Shuffler
from shuffledp.protocol.wire import (
    HEADER_SIZE,
    KIND_USER,
    KIND_USER_ENC,
    TAG_SIZE,
    Header,
    WireError,
    encode_batch,
)

N_USERS = 4
USER_MUTATIONS = (
    "bitflip", "truncate", "extend", "dup_record", "dup_record_same_coord",
    "copy_from_other", "swap_between", "replay_new_sender", "replay_same_sender",
    "other_round_batch", "other_round_record", "header_edit", "resubmit_after_bad",
)
MIXED_MUTATIONS = (
    "bitflip", "truncate", "extend", "dup_record", "swap_records", "drop_record",
    "header_edit", "other_round_mixed", "strip_tag", "forge_unkeyed_tag", "random_tag",
)
# on the plaintext path a user batch has no integrity: these cannot be detected there
# (a flipped share bit, or a record replaced by another at the same coordinate, is a valid
# batch; dup_record and copy_from_other hit the same coordinate by chance or by design)
PLAINTEXT_UNDETECTABLE = {
    "bitflip", "dup_record", "dup_record_same_coord", "copy_from_other", "other_round_record",
}
_HEADER_FIELDS = {  # name: (offset, size)
    "magic": (0, 4), "version": (4, 2), "kind": (6, 1), "record_bytes": (7, 1),
    "digest": (8, 16), "n_records": (24, 8), "n_users": (32, 8), "n_dropped": (40, 8),
    "flags": (48, 1), "reserved": (49, 15),
}
OUTCOMES = ("rejected", "dropped", "benign", "kept_edit", "silent", "crash")


@dataclass
class World:
    """Parameters of two runs, keys, and the honest batches of both paths."""

    p: object
    p_other: object
    key: object
    mac_key: bytes
    batches: dict  # (path, round) -> list of user batches
    sums: np.ndarray  # (N_USERS, m) honest share sums mod q


def make_world(seed: int = 0) -> World:
    grid = Grid(2, 2)
    kw = dict(epsilon=5.0, delta=1e-2, B=2, dropout=0.5)
    p = derive_params(grid, N_USERS, **kw)
    p_other = derive_params(grid, N_USERS, **kw)  # same numbers, another run (round id)
    rng = np.random.default_rng(seed)
    key = generate_analyzer_key()
    sb = np.uint64(p.share_bits)
    batches: dict = {}
    sums = np.zeros((N_USERS, p.m), dtype=np.int64)
    for rnd, pp in (("this", p), ("other", p_other)):
        plain, enc = [], []
        for u in range(N_USERS):
            coords = rng.permutation(np.repeat(np.arange(p.m, dtype=np.uint64), p.r))
            shares = rng.integers(0, p.q, coords.size).astype(np.uint64)
            if rnd == "this":
                np.add.at(sums[u], coords.astype(np.int64), shares.astype(np.int64))
            rec = (coords << sb) | shares
            plain.append(encode_batch(Header(KIND_USER, pp.record_bytes, pp.digest, rec.size),
                                      np.sort(rec)))  # plaintext: in canonical order
            enc.append(encode_batch(
                Header(KIND_USER_ENC, encrypted_record_bytes(pp), pp.digest, rec.size),
                encrypt_records(pp, rec, public_bytes(key))))
        batches[("plain", rnd)] = plain
        batches[("enc", rnd)] = enc
    return World(p, p_other, key, generate_mac_key(), batches, sums % p.q)


def _rb(w: World, enc: bool) -> int:
    return encrypted_record_bytes(w.p) if enc else w.p.record_bytes


def _coord(w: World, rec: bytes, enc: bool) -> int:
    if enc:
        return int.from_bytes(rec[:4], "little")
    return int.from_bytes(rec, "little") >> w.p.share_bits


def _records(data: bytes, rb: int) -> list[bytes]:
    body = data[HEADER_SIZE:]
    return [body[i : i + rb] for i in range(0, len(body) - len(body) % rb, rb)]


def _join(data: bytes, recs: list[bytes]) -> bytes:
    return data[:HEADER_SIZE] + b"".join(recs)


def _bitflip(rng, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(0, len(b) * 8))
        b[i // 8] ^= 1 << (i % 8)
    return bytes(b)


def _header_edit(rng, data: bytes) -> bytes:
    name = list(_HEADER_FIELDS)[int(rng.integers(0, len(_HEADER_FIELDS)))]
    off, size = _HEADER_FIELDS[name]
    b = bytearray(data)
    old = bytes(b[off : off + size])
    new = old
    while new == old:
        if size >= 8 and rng.random() < 0.5:  # small integer edits are the dangerous ones
            v = int.from_bytes(old, "little") + int(rng.choice([-1, 1, 2, -2, 100]))
            new = (v % (1 << (8 * size))).to_bytes(size, "little")
        else:
            new = rng.bytes(size) if size > 1 else bytes([int(rng.integers(0, 256))])
    b[off : off + size] = new
    return bytes(b)


def _same_coord_pair(rng, w, a: list[bytes], b: list[bytes], enc: bool) -> tuple[int, int]:
    i = int(rng.integers(0, len(a)))
    c = _coord(w, a[i], enc)
    js = [j for j, r in enumerate(b) if _coord(w, r, enc) == c and r != a[i]]
    return i, (int(rng.choice(js)) if js else int(rng.integers(0, len(b))))


def mutate_user(rng, w: World, path: str, kind: str) -> list[tuple[bytes, int]]:
    """Submissions (data, sender) after mutating one user's batch (the victim, user 0)."""
    enc = path == "enc"
    mine = list(w.batches[(path, "this")])
    other = w.batches[(path, "other")]
    rb = _rb(w, enc)
    subs = [(d, u) for u, d in enumerate(mine)]
    v = mine[0]
    recs = _records(v, rb)
    if kind == "bitflip":
        subs[0] = (_bitflip(rng, v), 0)
    elif kind == "truncate":
        subs[0] = (v[: int(rng.integers(0, len(v)))], 0)
    elif kind == "extend":
        subs[0] = (v + rng.bytes(int(rng.integers(1, 3 * rb))), 0)
    elif kind in ("dup_record", "dup_record_same_coord"):
        if kind == "dup_record":
            i, j = rng.choice(len(recs), 2, replace=False)
        else:
            i, j = _same_coord_pair(rng, w, recs, recs, enc)
        recs[int(i)] = recs[int(j)]
        subs[0] = (_join(v, recs), 0)
    elif kind in ("copy_from_other", "swap_between"):
        donor = _records(mine[1], rb)
        if rng.random() < 0.8:
            i, j = _same_coord_pair(rng, w, recs, donor, enc)
        else:
            i, j = int(rng.integers(0, len(recs))), int(rng.integers(0, len(donor)))
        if kind == "swap_between":
            recs[i], donor[j] = donor[j], recs[i]
            subs[1] = (_join(mine[1], donor), 1)
        else:
            recs[i] = donor[j]
        subs[0] = (_join(v, recs), 0)
    elif kind == "replay_new_sender":
        subs.append((v, 99))
    elif kind == "replay_same_sender":
        subs.append((v, 0))
    elif kind == "other_round_batch":
        subs[0] = (other[0], 0)
    elif kind == "other_round_record":
        i, j = _same_coord_pair(rng, w, recs, _records(other[0], rb), enc)
        recs[i] = _records(other[0], rb)[j]
        subs[0] = (_join(v, recs), 0)
    elif kind == "header_edit":
        subs[0] = (_header_edit(rng, v), 0)
    elif kind == "resubmit_after_bad":
        subs.insert(0, (_bitflip(rng, v[:HEADER_SIZE]) + v[HEADER_SIZE:-1], 0))
    else:  # pragma: no cover
        raise ValueError(kind)
    order = rng.permutation(len(subs))
    if kind in ("resubmit_after_bad", "replay_same_sender", "replay_new_sender"):
        order = np.arange(len(subs))  # the bad upload / the original comes first
    return [subs[i] for i in order]


def mutate_mixed(rng, w: World, path: str, kind: str, mixed: bytes, other: bytes) -> bytes:
    enc = path == "enc"
    rb = _rb(w, enc)
    body_end = len(mixed) - TAG_SIZE
    recs = _records(mixed[:body_end], rb)
    tag = mixed[body_end:]
    if kind == "bitflip":
        return _bitflip(rng, mixed)
    if kind == "truncate":
        return mixed[: int(rng.integers(0, len(mixed)))]
    if kind == "extend":
        return mixed + rng.bytes(int(rng.integers(1, 3 * rb)))
    if kind in ("dup_record", "swap_records"):
        i, j = (int(x) for x in rng.choice(len(recs), 2, replace=False))
        if kind == "dup_record":
            recs[i] = recs[j]
        else:
            recs[i], recs[j] = recs[j], recs[i]
        return _join(mixed, recs) + tag
    if kind == "drop_record":
        del recs[int(rng.integers(0, len(recs)))]
        return _join(mixed, recs) + tag
    if kind == "header_edit":
        return _header_edit(rng, mixed)
    if kind == "other_round_mixed":
        return other
    if kind == "strip_tag":
        return mixed[:body_end]
    if kind == "forge_unkeyed_tag":  # recompute the public checksum after an edit
        h = bytearray(mixed[:HEADER_SIZE])
        h[48] = 0
        h[40] = (h[40] + 1) % 256  # n_dropped
        body = bytes(h) + mixed[HEADER_SIZE:body_end]
        return body + hashlib.sha256(body).digest()
    if kind == "random_tag":
        return mixed[:body_end] + rng.bytes(TAG_SIZE)
    raise ValueError(kind)  # pragma: no cover


def _shuffle(w: World, p, path: str, subs) -> tuple[bytes, object]:
    s = Shuffler(p, encrypted=path == "enc", mac_key=w.mac_key)
    for data, sender in subs:
        s.submit(data, sender)
    s.missing(max(0, N_USERS - s.n_users_seen))
    f = io.BytesIO()
    s.mix_to(f)
    return f.getvalue(), s.report


def _exact(w: World, sums: np.ndarray, n_users: int, extra: np.ndarray | None = None) -> bool:
    """Sums of n_users honest users, or of n_users - 1 and the ``extra`` share sums."""
    k = n_users if extra is None else n_users - 1
    base = np.zeros(w.p.m, dtype=np.int64) if extra is None else extra
    for t in itertools.combinations(range(N_USERS), k):
        if np.array_equal((w.sums[list(t)].sum(axis=0) + base) % w.p.q, sums):
            return True
    return False


def _edited_sums(w: World, path: str, subs) -> list[np.ndarray]:
    """Share sums of the submitted batches that are not honest ones but open completely."""
    from shuffledp.protocol.crypto import decrypt_records
    from shuffledp.protocol.wire import unpack_records

    honest = set(w.batches[(path, "this")])
    out = []
    for data, _ in subs:
        if data in honest or len(data) <= HEADER_SIZE:
            continue
        body = data[HEADER_SIZE:]
        if path == "enc":
            if len(body) % _rb(w, True):
                continue
            c, sh, failed = decrypt_records(w.p, body, w.key)
            if failed:
                continue
        else:
            if len(body) % w.p.record_bytes:
                continue
            v = unpack_records(np.frombuffer(body, np.uint8), w.p.record_bytes)
            c = (v >> np.uint64(w.p.share_bits)).astype(np.int64)
            sh = v & np.uint64((1 << w.p.share_bits) - 1)
            if c.size and c.max() >= w.p.m:
                continue
        tot = np.zeros(w.p.m, dtype=np.int64)
        np.add.at(tot, np.asarray(c, dtype=np.int64), np.asarray(sh, dtype=np.int64))
        out.append(tot % w.p.q)
    return out


def run_case(rng, w: World, path: str, side: str, kind: str) -> str:
    enc = path == "enc"
    subs: list = []
    try:
        if side == "user":
            subs = mutate_user(rng, w, path, kind)
            mixed, report = _shuffle(w, w.p, path, subs)
        else:
            mixed, report = _shuffle(w, w.p, path, [(d, u) for u, d in
                                                    enumerate(w.batches[(path, "this")])])
            other = b""
            if kind == "other_round_mixed":
                other, _ = _shuffle(w, w.p_other, path, [(d, u) for u, d in enumerate(
                    w.batches[(path, "other")])])
            mixed = mutate_mixed(rng, w, path, kind, mixed, other)
    except Exception as e:  # a crash of the shuffler
        return f"crash:{type(e).__name__}:{e}"
    try:
        res = accumulate_mixed(w.p, mixed, key=w.key if enc else None, mac_key=w.mac_key,
                               workers=1)
        h = res.header
        check_participation(w.p, h.n_users)
        sums = res.accumulator.modular_sums(h.n_users)
    except (WireError, ReleaseRefused):
        return "rejected"
    except Exception as e:
        return f"crash:{type(e).__name__}:{e}"
    if (h.n_users, h.n_dropped) != (report.n_forwarded, report.n_dropped):
        return "silent"
    if not _exact(w, sums, h.n_users):
        if any(_exact(w, sums, h.n_users, e) for e in _edited_sums(w, path, subs)):
            return "kept_edit"
        return "silent"
    if report.n_dropped or report.n_rejected or report.n_incomplete:
        return "dropped"
    return "benign"


def run(cases: int, seed: int = 0, world: World | None = None) -> dict:
    """Run ``cases`` mutated cases; returns {(path, side, kind): Counter(outcome)}."""
    w = world if world is not None else make_world(seed)
    rng = np.random.default_rng(seed)
    plan = [(path, "user", k) for path in ("plain", "enc") for k in USER_MUTATIONS] + [
        (path, "mixed", k) for path in ("plain", "enc") for k in MIXED_MUTATIONS]
    out: dict = {}
    for c in range(cases):
        path, side, kind = plan[c % len(plan)]
        outcome = run_case(rng, w, path, side, kind)
        out.setdefault((path, side, kind), Counter())[outcome.split(":")[0]] += 1
        if outcome.startswith("crash"):
            out.setdefault("crashes", []).append((path, side, kind, outcome))
    return out


def summarise(out: dict) -> dict:
    tot = {p: Counter() for p in ("plain", "enc")}
    for key, cnt in out.items():
        if key != "crashes":
            tot[key[0]].update(cnt)
    return tot


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t = time.perf_counter()
    out = run(args.cases, args.seed)
    dt = time.perf_counter() - t
    print(f"{args.cases} mutated batches in {dt:.0f} s (seed {args.seed})")
    print(f"{'path':6} {'side':6} {'mutation':22} " + " ".join(f"{o:>9}" for o in OUTCOMES))
    for key in sorted(k for k in out if k != "crashes"):
        c = out[key]
        flag = " (undetectable on plaintext by design)" if (
            key[0] == "plain" and key[1] == "user" and key[2] in PLAINTEXT_UNDETECTABLE) else ""
        print(f"{key[0]:6} {key[1]:6} {key[2]:22} " + " ".join(
            f"{c[o]:9d}" for o in OUTCOMES) + flag)
    for path, c in summarise(out).items():
        print(f"TOTAL {path:5}: {sum(c.values())} cases, rejected {c['rejected']}, "
              f"counted-and-dropped {c['dropped']}, benign {c['benign']}, "
              f"kept edit {c['kept_edit']}, silent acceptance {c['silent']}, "
              f"crash {c['crash']}")
    for cr in out.get("crashes", [])[:10]:
        print("crash:", cr)


if __name__ == "__main__":
    main()
