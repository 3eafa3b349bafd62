"""A short seeded run of bench/fuzz_secagg.py (the full run is 3,000 trials): hostile and
faulty clients give no silent wrong sum, no crash, no hang, and the sum is released exactly
when the schedule leaves at least t honest clients in every round and t correct share
holders. Deterministic (fixed seed); it fails on any single violation."""

import importlib.util
import sys
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "fuzz_secagg", Path(__file__).resolve().parents[2] / "bench" / "fuzz_secagg.py")
fuzz = importlib.util.module_from_spec(spec)
sys.modules.setdefault("fuzz_secagg", fuzz)  # dataclasses look their module up
spec.loader.exec_module(fuzz)


def test_fuzz_secagg_short_run(capsys):
    assert fuzz.main(["--trials", "200", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert "silent wrong sums: 0" in out and "crashes: 0" in out and "hangs: 0" in out


def test_the_oracle_requires_a_release_only_with_t_honest_clients_everywhere():
    tr = fuzz.Trial(n=5, t=3, L=2, m=97, drop={0: 1}, fault={1: (3, "flip1")})
    assert fuzz.oracle(tr)[0]  # 4 left after round 1, 3 correct holders
    tr.fault[2] = (3, "dup_entry")  # 2 correct holders
    assert not fuzz.oracle(tr)[0]
    tr = fuzz.Trial(n=5, t=3, L=2, m=97, fault={4: (1, "lie")})
    assert not fuzz.oracle(tr)[0]  # the liar's seed cannot be verified
    tr.drop[4] = 2  # ... unless it drops before its masked input
    assert fuzz.oracle(tr)[0]


def test_the_sparse_oracle_follows_the_graph():
    tr = fuzz.Trial(n=8, t=2, L=2, m=97, k=2, min_clients=6, seed=bytes(range(32)))
    assert fuzz.oracle(tr)[0]
    nb = tr.graph().neighbours(0)
    tr.drop = {nb[0]: 3}  # client 0 keeps one neighbour in the unmasking: 1 < t shares
    assert not fuzz.oracle(tr)[0]
    tr.drop = {nb[0]: 2}  # shared its keys, then dropped: client 0 still goes on ...
    required, per_round = fuzz.oracle(tr)
    assert 0 in per_round[2] and not required  # ... but its seed has 1 < t holders left
    tr.drop = {nb[0]: 1}  # never shared its keys: client 0 holds 1 < t shares
    required, per_round = fuzz.oracle(tr)
    assert 0 in per_round[1] and 0 not in per_round[2] and not required  # it refuses
