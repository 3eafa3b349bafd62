"""The shuffler of the shuffle-model heatmap protocol, and message encryption to the analyzer.

The shuffler ([Ghazi23]_ App. F; see "Trust model" below) is trusted only to permute and to
forget who sent what. :class:`Shuffler`:

1. validates each user's batch as it arrives (:mod:`shuffledp.protocol.wire` header, parameter
   digest -- which covers the round id --, exact length, coordinate < m, on plaintext
   batches share < q and the records in canonical (ascending) order, no ephemeral key
   twice in an encrypted batch, not a copy of an accepted batch: the fingerprint is taken
   over the *sorted* records, so a copy with its records reordered is a replay too (see
   "Replays" below); when the shuffler is given the analyzer's key id, an encrypted batch
   must name that key in its header); a bad batch is rejected and counted by a named
   reason (:data:`REJECT_REASONS`), never forwarded, and does not burn its sender id, so the
   user can resubmit (:meth:`Shuffler.inspect` runs the checks that do not depend on earlier
   batches without changing the shuffler, so a caller may run them on several threads and
   hand each result to :meth:`Shuffler.submit`);
2. drops a user whose batch is incomplete (not exactly r messages for every coordinate): a
   partial batch would leave a share-sum that is not the user's noisy value;
3. strips sender identity and spreads the records over bucket files (pass 1), then loads one
   bucket at a time to find the batches that share an encrypted record, removes a batch
   iff it shares a record with an *earlier kept* batch (first accepted wins, see "Copied
   records" below), permutes each bucket uniformly and appends it to the output (pass 2):
   a uniformly random permutation of all kept records in memory bounded by
   ``memory_limit``;
4. writes one mixed batch whose header (counts) and records are covered by a tag, an
   HMAC-SHA256 under a key it shares with the analyzer (:meth:`Shuffler.mix_to`); or, when
   the analyzer runs in the same process (the plaintext wire path of
   :mod:`shuffledp.protocol.runner`), hands it each permuted bucket instead
   (:meth:`Shuffler.mix_each`: the same permutation and counts, nothing serialised and no
   tag, as there is no channel between the two to protect).

Replays
-------
A replay is a copy of an accepted batch submitted again, under any sender id, its records
in any order. Its fingerprint is SHA-256 over the batch's records in a canonical order, a
function of the multiset of records only, kept for every accepted batch: an equal
fingerprint is refused as ``replayed_batch``, before the copy can take one of the n places.
Encrypted records are sorted as byte strings for it. A plaintext batch must *arrive* in the
canonical order (records ascending as integers: coordinate-major, each coordinate's r shares
ascending; the device writes it so, :func:`shuffledp.protocol.wire.frame_shares`), which the
shuffler checks in the same linear pass as the ranges and counts, refusing any other order
as ``non_canonical``; its fingerprint is then SHA-256 of the records as received. A reordered
copy of a plaintext batch is therefore refused (``non_canonical``), an exact one has the
same fingerprint (``replayed_batch``): the property is that of sorting on arrival, without
the sort. The order of a user's own batch carries nothing: the shuffler knows whose batch it
is anyway and permutes every record.

Streaming bucket shuffle and why it is uniform
----------------------------------------------
Pass 1 gives each record a bucket label L in {0..k-1}; pass 2 permutes each bucket by an
independent uniform permutation (Fisher-Yates from :class:`SecureRandom`) and concatenates
buckets 0, 1, ..., k-1. If the labels of the N records are i.i.d. uniform, the output is a
uniformly random ordering: relabelling the input records by any fixed permutation sigma
leaves the joint law of (labels, in-bucket permutations) unchanged, so P(output = pi) =
P(output = pi o sigma) for every arrangement pi and every sigma, hence P(output = pi) = 1/N!.
Plaintext records get their labels from :class:`SecureRandom`, one uniform 16-bit value
each (k is a power of two and at most 2^16, so its low bits are exactly uniform; half the
keystream of a 32-bit word per record). Encrypted records get L = SipHash-2-4
([SipHash12]_) of their ephemeral public key under a fresh secret 128-bit key, masked to k
bits: distinct keys then get labels indistinguishable from i.i.d. uniform (SipHash is a PRF;
the same computational assumption as the ChaCha20 generator behind every other draw), and *equal*
keys -- a duplicated or replayed record -- land in the same bucket, where pass 2 finds them
exactly. Removing duplicates depends only on record contents, not on labels, so the
surviving records keep i.i.d. labels. k is the least power of two with n r m (record + 4)
bytes / k <= memory_limit / 8 (n the provisioned users; the 4 bytes of batch index are kept
for encrypted records only) and n r m / k <= 2^18 records, so the expected bucket fits with
room for the copies pass 2 makes and its permutation stays in a core's cache; bucket sizes
are binomial, within a few per cent of the mean at the sizes where buckets matter. Pass 2
permutes several buckets at once on worker threads; the random words of each bucket are
drawn from the shuffler's source in bucket order, so the output for a given source does not
depend on the threads. Plaintext records (at most 8 bytes) are permuted as 64-bit integers as
they are read, by Fisher-Yates run from the front (the "inside-out" form: record i goes to
place i after the record at a uniform place j in [0, i] moves there; by induction the first
i + 1 places then hold a uniformly random order of the first i + 1 records), so a bucket is
read and permuted in one pass, wherever its parts lie.

In memory a batch's records stay where pass 1 put them, grouped by bucket (one array per
batch, spread over the buckets by one compiled pass that also checks a plaintext batch,
:meth:`Shuffler.inspect`); pass 2 reads bucket i from every batch's group i where it lies
(no copy), and files take over when more than ``memory_limit / 4`` bytes are held.

Trust model and what the checks buy
-----------------------------------
- A network attacker or any party without keys can replay, truncate, splice, duplicate or edit
  users' batches and the mixed batch. Replays and copied encrypted records are caught by the
  shuffler (ephemeral keys are fresh per message, so a repeated key is a copy) without knocking out
  the honest original (see "Copied records"); records of another run or another coordinate fail the
  analyzer's HPKE open (``info`` = label || parameter digest || round id || coordinate enters the
  key schedule); any change to the mixed batch after the shuffler fails its keyed tag. Nothing that
  fails authentication or the counts is released: the analyzer refuses when any message fails or any
  coordinate misses r * n_users messages, and when fewer than n_min users were forwarded (the
  declared dropout fraction, :data:`shuffledp.protocol.params.DEFAULT_DROPOUT` by default, is the
  headroom). A user batch carries no sender authentication, so whoever can edit one in transit can
  as well replace it by a batch of its own (encrypting to the analyzer's public key needs no
  secret): that is input substitution, treated as poisoning below.
- A malicious user can always make the release fail (a ciphertext that does not open
  cannot be traced back to its sender: unlinkability) and can shift its own contribution
  arbitrarily within Z_q (there is no range proof): denial of service and input poisoning
  are outside what this protocol prevents. Like every distributed-noise protocol, the
  guarantee counts the noise of honest users' batches: a malicious user who adds less noise
  (or a splice kept ahead of the batch it copied from) is counted among the n_users
  forwarded without supplying its share of the noise.
- The shuffler is trusted for integrity: it holds the tag key, so a malicious shuffler can
  drop users, forward partial batches or misstate n_dropped. The analyzer still checks that
  every coordinate holds exactly r * n_users authentic messages of this run, so a shuffler
  cannot inflate n_users or forge shares, but verifying the shuffler itself would need a
  verifiable shuffle, which this code does not implement.
- The plaintext path (``encrypted=False``) is a simulation aid: the shuffler reads every
  share, and a user batch has no integrity protection (a flipped share bit is a valid
  share; a checksum would not stop anyone who can edit the batch). Do not deploy it.

Copied records
--------------
Two honest batches never share an ephemeral key (32 fresh random bytes per message), so a
key seen in two accepted batches means one of them holds a copy. The shuffler cannot tell
copy from original, and removing both (as an earlier version did) let one attacker with
one copied batch veto every release. The rule is sequential: in acceptance order, batch i
is kept iff it shares no record with an earlier *kept* batch (:meth:`Shuffler._copied_batches`
computes exactly this from the conflict groups pass 2 finds). Why that is safe:

- No record is ever counted twice: of any group of batches holding one record, at most one
  is kept. Counting an honest user's records twice would double its contribution, hence
  the sensitivity the noise is calibrated for: that is the privacy reason copies must go.
- A whole copy (the records reordered, under another sender id) has the same sorted
  fingerprint and is rejected on arrival as ``replayed_batch`` (a plaintext copy reordered
  as ``non_canonical``, see "Replays") whichever comes first; if
  the copy came first, it carries exactly the honest user's records, once, so the sum is
  the same as with the original. It never takes one of the n places either.
- A partial copy (a splice of copied and own records) kept because it came first is a
  batch whose share-sum is not anyone's noisy value: input poisoning by whoever sent it,
  which this protocol does not prevent (below). The honest batch it copied from is then
  removed (``copied_record``), a dropout the declared dropout fraction absorbs. The copied
  records that survive are some of the honest user's shares, never two copies of one, so
  the honest user's influence on every coordinate is at most its own noisy value, once:
  the sensitivity is unchanged (and any r - 1 of the r shares of a coordinate are jointly
  uniform, so copying fewer than all of them reveals nothing by itself).
- The decision depends only on the record contents and the acceptance order, not on the
  bucket labels, so the kept records keep i.i.d. labels and the shuffle stays uniform.

Deployment path: every message is encrypted to the analyzer's X25519 public key
(:func:`shuffledp.protocol.crypto.encrypt_records`: HPKE base mode, RFC 9180, DHKEM(X25519,
HKDF-SHA256) ([RFC5869]_), ChaCha20-Poly1305; a fresh ephemeral key ``enc`` per message).
Two ciphertexts of one user share nothing but the coordinate field (which every user fills
the same way), so the shuffler and the analyzer cannot link them. The analyzer side is
:mod:`shuffledp.analyzers.heatmap.modular`.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps"
   -- full entry in docs/references.md
.. [SipHash12] Aumasson and Bernstein (2012), "SipHash: a fast short-input PRF"
   -- full entry in docs/references.md
.. [RFC5869] Krawczyk and Eronen (2010), "HKDF" (RFC 5869) -- full entry in docs/references.md
.. [Lemire19] Lemire (2019), "Fast Random Integer Generation in an Interval"
   -- full entry in docs/references.md
.. [Knuth97] Knuth (1997), "The Art of Computer Programming, Vol. 2"
   -- full entry in docs/references.md
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import weakref
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any

import numba
import numpy as np

from shuffledp.protocol.crypto import encrypted_record_bytes, siphash24
from shuffledp.protocol.params import ProtocolParams
from shuffledp.protocol.wire import (
    HEADER_SIZE,
    KEY_ID_SIZE,
    KIND_MIXED,
    KIND_MIXED_ENC,
    KIND_USER,
    KIND_USER_ENC,
    BatchWriter,
    Header,
    WireError,
    _fast_records,
    _keep_mask,
    _prefetch_write,
    _record_at,
    _record_from,
    _store8,
    decode_batch,
    header_mismatch,
    unpack_records,
)
from shuffledp.randomness import SecureRandom, _fisher_yates, _lemire_below

#: the first five of a header that parses are checked by
#: :func:`shuffledp.protocol.wire.header_mismatch` (:data:`~shuffledp.protocol.wire.HEADER_REASONS`)
REJECT_REASONS = (
    "malformed",  # header does not parse, or the batch is longer than its header promises
    "truncated",  # the header parses but fewer bytes follow than it promises
    "wrong_digest",  # produced under other protocol parameters or in another run
    "wrong_kind",  # not a user batch, or encrypted when plaintext expected (or vice versa)
    "wrong_key",  # does not name the analyzer key the shuffler was given (another, or none)
    "wrong_record_size",
    "coordinate_out_of_range",
    "share_out_of_range",
    "incomplete",  # well formed, but not exactly r messages for every coordinate
    "non_canonical",  # plaintext records valid and complete but not in ascending order
    "duplicate_sender",  # a sender whose batch was already accepted submitted again
    "replayed_batch",  # the same records as an accepted batch, in any order, any sender id
    "duplicate_record",  # an ephemeral key twice in one batch
    "copied_record",  # shares an encrypted record with an earlier kept batch (pass 2)
    "over_capacity",  # more users than the n the parameters provision for
)
#: why a directory entry named like a batch was not read as one (``ShuffleReport.ignored``);
#: such entries are no user's submission and are not counted as dropped users
IGNORED_REASONS = (
    "not_a_regular_file",  # a directory, FIFO, socket, device, or a link to one (or dangling)
    "empty",  # a regular file of 0 bytes
    "unreadable",  # a regular file that cannot be opened (permissions)
)
DEFAULT_MEMORY_LIMIT = 256 << 20
_MIN_MEMORY_LIMIT = 1 << 20
_MAX_BUCKETS = 1 << 16
_IDX_BYTES = 4  # batch index stored next to each encrypted record in the bucket files
#: buckets hold at most about this many records on average (more buckets otherwise), so a
#: bucket's permutation (an int64 index per record) stays within a core's cache
_BUCKET_RECORDS = 1 << 18
#: bytes ahead of a bucket's write position that the spread asks the cache for
_PF_AHEAD = 128
#: :meth:`Shuffler.mix_each` reads buckets held in memory in groups of about this many bytes
_GROUP_BYTES = 8 << 20


def _check_threads(workers: int | None) -> int:
    if workers is None:
        return max(1, os.cpu_count() or 1)
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1 or None, got workers={workers!r}")
    return int(workers)


def _duplicate_groups(keys: np.ndarray) -> list[np.ndarray]:
    """Row indices of each group of identical rows (size >= 2) of a 2D uint8 array.

    Sorts by the first 8 bytes (honest ephemeral keys never tie there) and compares the
    full rows of tied candidates exactly, so the answer is exact.
    """
    k = np.ascontiguousarray(keys, dtype=np.uint8)
    if k.shape[0] < 2:
        return []
    first = np.ascontiguousarray(k[:, :8]).view("<u8").ravel()
    order = np.argsort(first, kind="stable")
    tie = first[order][1:] == first[order][:-1]
    if not tie.any():
        return []
    cand = order[np.r_[tie, False] | np.r_[False, tie]]
    full = np.ascontiguousarray(k[cand]).view(np.dtype((np.void, k.shape[1]))).ravel()
    _, inv, cnt = np.unique(full, return_inverse=True, return_counts=True)
    return [cand[inv.ravel() == g] for g in np.flatnonzero(cnt > 1)]


# --------------------------------------------------------------------------------------
# encryption to the analyzer (deployment path)
# --------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------
# the shuffler
# --------------------------------------------------------------------------------------
@dataclass
class ShuffleReport:
    """What the shuffler did.

    ``rejected`` counts submissions by named reason (:data:`REJECT_REASONS`; a user who
    resubmits after a bad upload is counted once per bad upload), including ``incomplete``
    batches and the accepted batches removed at mixing for sharing a record with an earlier
    kept batch (``copied_record``, also ``n_removed``): every submission not forwarded has
    exactly one named reason there. ``n_dropped`` counts users: senders none of whose
    submissions was forwarded (anonymous submissions count one each), removed batches
    (``n_removed``), and users admitted but absent (``n_missing``). ``ignored`` counts
    directory entries named like a batch that were not read as one
    (:data:`IGNORED_REASONS`, filled by the ``shuffle`` command); they are no user's
    submission and not counted as dropped.

    Attributes
    ----------
    n_forwarded : int
        Batches forwarded into the mixed batch.
    n_missing : int
        Users admitted but whose batch never arrived.
    n_failed_users : int
        Senders none of whose submissions was accepted.
    n_removed : int
        Accepted batches removed at mixing (``copied_record``).
    rejected : collections.Counter
        Rejected submissions by reason (:data:`REJECT_REASONS`).
    ignored : collections.Counter
        Directory entries not read as a batch, by reason (:data:`IGNORED_REASONS`).
    """

    n_forwarded: int = 0
    n_missing: int = 0
    n_failed_users: int = 0
    n_removed: int = 0
    rejected: Counter = field(default_factory=Counter)
    ignored: Counter = field(default_factory=Counter)

    @property
    def n_incomplete(self) -> int:
        """Submissions rejected as incomplete (``rejected["incomplete"]``)."""
        return int(self.rejected["incomplete"])

    @property
    def n_rejected(self) -> int:
        return int(sum(self.rejected.values()))

    @property
    def n_dropped(self) -> int:
        """Users not forwarded: failed, removed as copies, or never submitted."""
        return self.n_failed_users + self.n_removed + self.n_missing

    def to_dict(self) -> dict:
        return {
            "n_forwarded": self.n_forwarded,
            "n_dropped": self.n_dropped,
            "n_incomplete": self.n_incomplete,
            "n_missing": self.n_missing,
            "n_removed": self.n_removed,
            "rejected": {k: v for k, v in self.rejected.items() if v},
            "ignored": {k: v for k, v in self.ignored.items() if v},
        }


@numba.njit(cache=True, nogil=True)
def _scatter_by_label(rows, tail, labels, k, out):  # pragma: no cover - compiled
    """Counting sort of ``rows`` by bucket label ``labels[i] & (k - 1)`` (k a power of two)
    into ``out`` (each row then ``tail``, the batch index bytes); returns the bucket bounds
    (k + 1,). Stable within a bucket."""
    n, rb = rows.shape
    msk = np.int64(k - 1)
    bounds = np.zeros(k + 1, dtype=np.int64)
    for i in range(n):
        bounds[(np.int64(labels[i]) & msk) + 1] += 1
    for b in range(k):
        bounds[b + 1] += bounds[b]
    pos = bounds[:-1].copy()
    nt = tail.size
    slot = np.uint64(rb + nt)
    src = rows.reshape(-1)
    dst = out.reshape(-1)
    if nt == 0 and rb <= 8:
        # plaintext: read 8 bytes, write 8 bytes (the extra ones are rewritten by the next
        # records of the same bucket), the last bytes of a bucket byte by byte
        nf = _fast_records(src.size, rb)
        keep = _keep_mask(rb)
        for i in range(n):
            lab = np.int64(labels[i]) & msk
            p = pos[lab]
            pos[lab] = p + 1
            d = np.uint64(p) * slot
            v = _record_at(src, i, rb, keep, nf)
            if d + np.uint64(8) <= np.uint64(bounds[lab + 1]) * slot:
                for c in range(8):
                    dst[d + np.uint64(c)] = np.uint8((v >> np.uint64(8 * c)) & np.uint64(0xFF))
            else:
                for c in range(rb):
                    dst[d + np.uint64(c)] = np.uint8((v >> np.uint64(8 * c)) & np.uint64(0xFF))
        return bounds
    for i in range(n):
        lab = np.int64(labels[i]) & msk
        d = np.uint64(pos[lab]) * slot
        pos[lab] += 1
        s0 = np.uint64(i) * np.uint64(rb)
        for c in range(rb):
            dst[d + np.uint64(c)] = src[s0 + np.uint64(c)]
        for c in range(nt):
            dst[d + np.uint64(rb + c)] = tail[c]
    return bounds


@numba.njit(cache=True, nogil=True)
def _gather_rows(rows, perm, rb, out):  # pragma: no cover - compiled
    """out[i] = rows[perm[i], :rb] (the permuted records without their batch index)."""
    slot = rows.shape[1]
    if slot <= 8 and rows.shape[0] > 0:
        # 8-byte reads and writes (each write's extra bytes are rewritten by the next one)
        flat = rows.reshape(-1)
        dst = out.reshape(-1)
        nf = _fast_records(flat.size, slot)
        keep = _keep_mask(slot)
        end = np.uint64(dst.size)
        for i in range(perm.size):
            v = _record_at(flat, perm[i], slot, keep, nf)
            d = np.uint64(i) * np.uint64(rb)
            if d + np.uint64(8) <= end:
                for c in range(8):
                    dst[d + np.uint64(c)] = np.uint8((v >> np.uint64(8 * c)) & np.uint64(0xFF))
            else:
                for c in range(rb):
                    dst[d + np.uint64(c)] = np.uint8((v >> np.uint64(8 * c)) & np.uint64(0xFF))
        return
    for i in range(perm.size):
        src = perm[i]
        for c in range(rb):
            out[i, c] = rows[src, c]


@numba.njit(cache=True, nogil=True)
def _check_plain(body, rb, share_bits, q, m, r, labels, k, out):  # pragma: no cover - compiled
    """Validate plaintext records in one pass and, with ``labels``, spread them by bucket.

    ``body`` holds the records (``rb`` bytes each, little-endian integers
    ``(a << share_bits) | w``). Returns (code, bounds): code 0 if the records are canonical --
    record i at coordinate i // r (so every coordinate < m occurs exactly r times), every
    share < q, the records in ascending order --, else 1 (a share >= q), 2 (a coordinate >=
    m), 3 (incomplete: a coordinate not exactly r times) or 4 (all that holds but the order is
    not ascending), in that precedence. With ``labels`` of one per record (unsigned), code 0 also
    leaves the records grouped by bucket ``labels[i] & (k - 1)`` in ``out`` (flat, n rb +
    k (8 - rb) bytes; stable): bucket b's records are bytes bounds[b] rb + (8 - rb) b on,
    ``bounds`` (k + 1) counting records as :func:`_scatter_by_label`'s do; pass empty
    ``labels`` to check only. Honest batches take the one pass; a batch that misfits is
    counted again to name the reason.
    """
    n = body.size // rb
    nf = _fast_records(body.size, rb)
    keep = _keep_mask(rb)
    mask = (np.uint64(1) << np.uint64(share_bits)) - np.uint64(1)
    sb = np.uint64(share_bits)
    uq = np.uint64(q)
    spread = labels.size == n and n > 0
    msk = np.int64(k - 1)
    bounds = np.zeros(k + 1, dtype=np.int64)
    if spread:
        for i in range(n):
            bounds[(np.int64(labels[i]) & msk) + 1] += 1
        for b in range(k):
            bounds[b + 1] += bounds[b]
    # bucket b starts at byte bounds[b] rb + gap b (gap = 8 - rb): every record is written
    # as 8 bytes, the extra ones rewritten by the bucket's next record or left in the gap
    gap = np.uint64(8 - rb)
    pos = np.empty(k, dtype=np.uint64)
    for b in range(k):
        pos[b] = np.uint64(bounds[b]) * np.uint64(rb) + gap * np.uint64(b)
    urb = np.uint64(rb)
    pf_end = np.uint64(max(0, out.size - _PF_AHEAD))
    if n == r * m:
        # record i must hold coordinate i // r, a share < q, and be >= record i - 1: any
        # difference sets a bit of ``bad`` (branch-free; the loops without and with the
        # spread kept apart so each compiles tight)
        bad = np.uint64(0)
        prev = np.uint64(0)
        i = 0
        if not spread:
            for a in range(m):
                ua = np.uint64(a)
                for _ in range(r):
                    v = _record_at(body, i, rb, keep, nf)
                    bad |= ((v >> sb) ^ ua) | np.uint64((v & mask) >= uq) | np.uint64(v < prev)
                    prev = v
                    i += 1
        else:
            for a in range(m):
                ua = np.uint64(a)
                for _ in range(r):
                    v = _record_at(body, i, rb, keep, nf)
                    bad |= ((v >> sb) ^ ua) | np.uint64((v & mask) >= uq) | np.uint64(v < prev)
                    prev = v
                    lab = np.int64(labels[i]) & msk
                    d = pos[lab]
                    pos[lab] = d + urb
                    _store8(out, d, v)
                    # hundreds of write streams are more than the hardware prefetcher
                    # follows: ask for the bucket's line two ahead (about 1.6x faster)
                    if d < pf_end:
                        _prefetch_write(out, d + _PF_AHEAD)
                    i += 1
        if bad == 0:
            return 0, bounds
    cnt = np.zeros(m, dtype=np.int64)
    bad_share = False
    bad_coord = False
    for i in range(n):
        v = _record_at(body, i, rb, keep, nf)
        c = np.int64(v >> sb)
        if (v & mask) >= uq:
            bad_share = True
        if c >= m:
            bad_coord = True
            continue
        cnt[c] += 1
    if bad_share:
        return 1, bounds
    if bad_coord:
        return 2, bounds
    if n != r * m:
        return 3, bounds
    for c in range(m):
        if cnt[c] != r:
            return 3, bounds
    return 4, bounds


_NO_LABELS = np.zeros(0, dtype=np.uint16)
_PLAIN_REASONS = {1: "share_out_of_range", 2: "coordinate_out_of_range", 3: "incomplete",
                  4: "non_canonical"}


@numba.njit(cache=True, nogil=True)
def _narrow(vals, rb, out):  # pragma: no cover - compiled
    """out (flat uint8) = the low ``rb`` bytes of each of ``vals``, little-endian, in turn."""
    end = np.uint64(out.size)
    ff = np.uint64(0xFF)
    for i in range(vals.size):
        v = vals[i]
        d = np.uint64(i) * np.uint64(rb)
        if d + np.uint64(8) <= end:  # 8 bytes; the next record rewrites the extra ones
            for c in range(8):
                out[d + np.uint64(c)] = np.uint8((v >> np.uint64(8 * c)) & ff)
        else:
            for c in range(rb):
                out[d + np.uint64(c)] = np.uint8((v >> np.uint64(8 * c)) & ff)


@numba.njit(cache=True, nogil=True)
def _gather_permute_at(addr, end, cnt, jb, rb, words, out):  # pragma: no cover - compiled
    """Bucket ``jb`` of a group read as uint64 integers and uniformly permuted as it is read:
    for each part s, the ``cnt[s, jb]`` records (``rb`` <= 8 bytes each, little-endian)
    from the absolute address ``addr[s, jb]`` (in an array that ends at ``end[s]``, kept
    alive by the caller) are the inputs x_0, x_1, ... in turn, and Fisher-Yates run from
    the front ([Knuth97]_ Sec. 3.4.2, Alg. P in its "inside-out" form; see the module
    docstring) puts x_i at place i after moving ``out[j]`` there, j uniform in [0, i] from
    ``words`` (:func:`~shuffledp.randomness._lemire_below`). One pass over the parts where
    they lie: no copy of them, no array of the inputs in order. Returns the number of
    records placed: all of them, or, when the words ran out at record i, i (the records
    from i on are then in ``out`` in input order; :func:`_fisher_yates_up` continues from i
    with more words, the same permutation as if the words had not run out)."""
    total = 0
    for s in range(addr.shape[0]):
        total += cnt[s, jb]
    if total > out.size:  # a compiled loop writes no further than it is given
        raise ValueError("_gather_permute_at: out is shorter than the bucket")
    keep = _keep_mask(rb)
    urb = np.uint64(rb)
    pos = 0
    o = 0
    stop = -1  # where the words ran out
    for s in range(addr.shape[0]):
        a = np.uint64(addr[s, jb])
        e = np.uint64(end[s])
        for _ in range(cnt[s, jb]):
            v = _record_from(a, e, rb, keep)
            a += urb
            if o > 0 and stop < 0:
                j, pos = _lemire_below(words, pos, np.uint64(o + 1))
                if j < 0:
                    stop = o
                    out[o] = v
                else:
                    out[o] = out[j]
                    out[j] = v
            else:
                out[o] = v
            o += 1
    return o if stop < 0 else stop


@numba.njit(cache=True, nogil=True)
def _gather_permute(buf, at, cnt, jb, rb, words, out):  # pragma: no cover - compiled
    """:func:`_gather_permute_at` of parts of one array: part s's records start at byte
    ``at[s, jb]`` of ``buf``."""
    base = np.uint64(buf.ctypes.data)
    addr = np.empty(at.shape, dtype=np.uint64)
    for s in range(at.shape[0]):
        for j in range(at.shape[1]):
            addr[s, j] = base + np.uint64(at[s, j])
    end = np.full(at.shape[0], base + np.uint64(buf.size), dtype=np.uint64)
    return _gather_permute_at(addr, end, cnt, jb, rb, words, out)


@numba.njit(cache=True, nogil=True)
def _fisher_yates_up(vals, i, words):  # pragma: no cover - compiled
    """Continue the inside-out Fisher-Yates of :func:`_gather_permute` on ``vals`` (places
    0..i-1 done, the inputs from i on in order): swap place i with a uniform j in [0, i],
    i = i, i + 1, ...; returns the next place (``vals.size`` when done)."""
    pos = 0
    n = vals.size
    while i < n:
        j, pos = _lemire_below(words, pos, np.uint64(i + 1))
        if j < 0:
            return i
        tmp = vals[i]
        vals[i] = vals[j]
        vals[j] = tmp
        i += 1
    return i


def _permute_bucket(rows: np.ndarray, words: np.ndarray, rb: int):
    """(rows uniformly permuted without their batch index, rows, perm, 0), or, when the words
    run out first (more Lemire rejections than provided for), (None, rows, perm, position).

    Records of at most 8 bytes (plaintext) are read as uint64 values and permuted as they
    are read (``perm`` is then those values; :func:`_gather_permute`, the inside-out
    Fisher-Yates, continued from the position by :func:`_fisher_yates_up`); longer ones
    through an index (Fisher-Yates from the back, continued by ``_fisher_yates``) and a
    gather. Either way the output is ``rows[P]`` for a uniform permutation P of ``words``.
    """
    n = rows.shape[0]
    if rows.shape[1] <= 8:
        vals = np.empty(n, dtype=np.uint64)
        i = int(_gather_permute(np.ascontiguousarray(rows).reshape(-1), _ONE_PART,
                                np.full((1, 1), n, dtype=np.int64), 0, rows.shape[1], words,
                                vals))
        if i < n:
            return None, rows, vals, i
        return _permuted(rows, vals, rb), rows, vals, 0
    perm = np.arange(n, dtype=np.int64)
    i = int(_fisher_yates(perm, n - 1, words)) if n > 1 else 0
    if i > 0:
        return None, rows, perm, i
    return _permuted(rows, perm, rb), rows, perm, 0


_ONE_PART = np.zeros((1, 1), dtype=np.int64)


def _permuted(rows: np.ndarray, perm: np.ndarray, rb: int) -> np.ndarray:
    """The permuted records (n, rb) from the finished ``perm`` of :func:`_permute_bucket`."""
    out = np.empty((rows.shape[0], rb), dtype=np.uint8)
    if perm.dtype == np.uint64:
        _narrow(perm, rb, out.reshape(-1))
    else:
        _gather_rows(rows, perm, rb, out)
    return out


@dataclass(frozen=True)
class Inspection:
    """What :meth:`Shuffler.inspect` found in one user's batch.

    Attributes
    ----------
    reason : str or None
        None if the batch passed every check that does not depend on earlier batches, else
        one of :data:`REJECT_REASONS`.
    rows : numpy.ndarray or None
        The records (2D uint8, one row each) of a batch that passed.
    fingerprint : bytes or None
        Its order-free digest (:meth:`Shuffler._fingerprint`).
    spread : _Spread, optional
        A plaintext batch's records already grouped by bucket label.
    """

    reason: str | None
    rows: np.ndarray | None = None
    fingerprint: bytes | None = None
    spread: _Spread | None = None


@dataclass(frozen=True)
class _Spread:
    """One batch's records grouped by bucket: bucket i's records are the bytes
    ``flat[bounds[i] slot + gap i : bounds[i + 1] slot + gap i]`` (``bounds``, k + 1,
    counts records; ``gap`` spare bytes follow each bucket)."""

    flat: np.ndarray
    bounds: np.ndarray
    gap: int

    def part(self, i: int, slot: int) -> np.ndarray:
        lo = int(self.bounds[i]) * slot + self.gap * i
        return self.flat[lo : lo + int(self.bounds[i + 1] - self.bounds[i]) * slot]


def _scratch(store: dict, name: str, n: int, dtype: type) -> np.ndarray:
    """The first n items of the array ``store[name]``, made (or grown) when it is too short:
    big arrays reused from call to call rather than mapped anew."""
    a = store.get(name)
    if a is None or a.size < n:
        a = store[name] = np.empty(max(n, int(1.25 * n)), dtype=dtype)
    return a[:n]


class _Buckets:
    """k append-only byte buckets: in memory until ``flush_bytes`` are buffered, then files.

    In memory the buckets are the batches' :class:`_Spread` s, kept by reference (the
    caller no longer writes to them), so adding a batch copies nothing; :meth:`load`
    assembles a bucket in one copy, and :meth:`group_parts` says where the buckets of a
    group lie in the spreads, for a compiled pass that reads them there (nothing flushed).
    ``slot`` is the bytes per record.
    """

    def __init__(self, k: int, flush_bytes: int, workdir: str | None, slot: int = 1) -> None:
        self.k = k
        self.flush_bytes = flush_bytes
        self.workdir = workdir
        self.slot = slot
        self.spreads: list[_Spread] = []
        self.sizes = np.zeros(k, dtype=np.int64)  # bytes per bucket in memory
        self.buffered = 0
        self.dir: str | None = None
        self._cleanup: weakref.finalize[Any, Any] | None = None

    def _path(self, i: int) -> str:
        if self.dir is None:
            raise RuntimeError(f"bucket {i} has no file: nothing was flushed yet (dir=None)")
        return os.path.join(self.dir, f"bucket{i:05d}")

    def add(self, spread: _Spread) -> None:
        """Add one batch's records, grouped by bucket (kept by reference)."""
        if spread.bounds.shape != (self.k + 1,):
            raise ValueError(f"a spread over {spread.bounds.size - 1} buckets, expected {self.k}")
        self.spreads.append(spread)
        added = np.diff(spread.bounds) * self.slot
        self.sizes += added
        self.buffered += int(added.sum())

    def maybe_flush(self) -> None:
        if self.buffered < self.flush_bytes:
            return
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="shuffledp-", dir=self.workdir)
            self._cleanup = weakref.finalize(self, shutil.rmtree, self.dir, True)
        for i in np.flatnonzero(self.sizes).tolist():
            with open(self._path(i), "ab") as fh:
                fh.writelines(sp.part(i, self.slot).data for sp in self.spreads)
        self.spreads = []
        self.sizes[:] = 0
        self.buffered = 0

    def load(self, i: int, release: bool = False) -> np.ndarray:
        """Whole content of bucket i (file part then memory), flat uint8; ``release`` frees
        the file (the memory of a batch is freed once every bucket of it is released)."""
        path = self._path(i) if self.dir is not None else None
        size = os.path.getsize(path) if path is not None and os.path.exists(path) else 0
        out = np.empty(size + int(self.sizes[i]), dtype=np.uint8)
        if path is not None and size:
            with open(path, "rb", buffering=0) as fh:
                if fh.readinto(out[:size].data) != size:
                    raise OSError(f"short read of shuffler bucket file {path}")
        if self.sizes[i]:
            at = size
            for sp in self.spreads:
                part = sp.part(i, self.slot)
                out[at : at + part.size] = part
                at += part.size
        if release:
            self.buffered -= int(self.sizes[i])
            self.sizes[i] = 0
            if path is not None and size:
                os.remove(path)
            if not self.buffered:
                self.spreads = []
        return out

    def groups(self, size: int) -> Iterator[tuple[int, int]]:
        """Consecutive bucket ranges [g0, g1) of about ``size`` bytes each."""
        g0 = 0
        while g0 < self.k:
            g1 = g0 + 1
            held = int(self.sizes[g0])
            while g1 < self.k and held + int(self.sizes[g1]) <= size:
                held += int(self.sizes[g1])
                g1 += 1
            yield g0, g1
            g0 = g1

    def group_parts(self, g0: int, g1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where buckets g0..g1-1 held in memory (nothing flushed) lie: (addr, end, cnt),
        bucket g0 + j being the ``cnt[s, j]`` records from the absolute address ``addr[s,
        j]`` in spread s's array, which ends at ``end[s]``, s = 0, 1, ... in turn (for
        :func:`_gather_permute_at`, which reads them where they are; the spreads stay
        referenced here until :meth:`close`). Reads only, so threads may read several groups
        at once."""
        slot = self.slot
        n_sp = len(self.spreads)
        addr = np.empty((n_sp, g1 - g0), dtype=np.uint64)
        end = np.empty(n_sp, dtype=np.uint64)
        cnt = np.empty((n_sp, g1 - g0), dtype=np.int64)
        cols = np.arange(g0, g1)
        for s, sp in enumerate(self.spreads):
            b = sp.bounds[g0 : g1 + 1].astype(np.int64)
            base = sp.flat.ctypes.data
            addr[s] = base + b[:-1] * slot + sp.gap * cols
            end[s] = base + sp.flat.size
            cnt[s] = np.diff(b)
        return addr, end, cnt

    def close(self) -> None:
        self.spreads = []
        self.sizes[:] = 0
        self.buffered = 0
        if self._cleanup is not None:
            self._cleanup()


class Shuffler:
    """Collect users' batches, validate, drop incomplete users, strip identity, mix.

    Parameters
    ----------
    params : ProtocolParams
    encrypted : bool
        Expect encrypted user batches (deployment path). ``False`` is the plaintext
        simulation aid: the shuffler then sees every share (see the module docstring).
    source : SecureRandom, optional
        Cryptographically secure source for bucket labels, permutations and the SipHash key.
    mac_key : bytes, optional
        Key (>= 16 bytes, :func:`generate_mac_key`) shared with the analyzer only; the mixed
        batch's tag is then an HMAC the analyzer verifies. Without it the tag is a plain
        SHA-256 (accidental corruption only).
    workdir : str, optional
        Directory for the temporary bucket files (default: the system temporary directory).
        Files are created only once more than ``memory_limit / 4`` bytes are buffered, and
        removed by :meth:`mix_to` / :meth:`close`.
    memory_limit : int
        Approximate bound, in bytes, on the memory the shuffler's data takes (default
        256 MiB; the interpreter and libraries come on top).
    analyzer_key_id : bytes, optional
        The 8-byte id of the analyzer's public key
        (:func:`~shuffledp.protocol.crypto.analyzer_key_id`; encrypted batches only). An
        encrypted batch whose header names another key, or none, is then rejected on arrival
        as ``wrong_key`` (its user dropped whole) instead of failing at the analyzer after
        mixing. Without it the header's key id is not checked.
    workers : int, optional
        Threads that permute buckets in :meth:`mix_to` (default: every core); the random
        words are drawn from ``source`` in bucket order, so the mixed batch for a given
        source is the same for every value.
    """

    def __init__(
        self,
        params: ProtocolParams,
        *,
        encrypted: bool = False,
        source: SecureRandom | None = None,
        mac_key: bytes | None = None,
        workdir: str | None = None,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
        analyzer_key_id: bytes | None = None,
        workers: int | None = None,
    ) -> None:
        if not isinstance(params, ProtocolParams):
            raise TypeError(f"params must be a ProtocolParams, got {type(params).__name__}")
        if isinstance(memory_limit, bool) or not isinstance(memory_limit, (int, np.integer)):
            raise TypeError(f"memory_limit must be an integer, got memory_limit={memory_limit!r}")
        if memory_limit < _MIN_MEMORY_LIMIT:
            raise ValueError(f"memory_limit must be >= {_MIN_MEMORY_LIMIT} bytes, got "
                             f"memory_limit={memory_limit!r}")
        if workdir is not None and not os.path.isdir(workdir):
            raise ValueError(f"workdir must be an existing directory, got workdir={workdir!r}")
        if mac_key is not None and (not isinstance(mac_key, bytes) or len(mac_key) < 16):
            raise ValueError(f"mac_key must be bytes of length >= 16, got {type(mac_key).__name__}"
                             f" of length {len(mac_key) if isinstance(mac_key, bytes) else '-'}")
        if analyzer_key_id is not None and (
                not encrypted or not isinstance(analyzer_key_id, bytes)
                or len(analyzer_key_id) != KEY_ID_SIZE):
            raise ValueError(f"analyzer_key_id must be {KEY_ID_SIZE} bytes and needs "
                             f"encrypted=True, got analyzer_key_id={analyzer_key_id!r}, "
                             f"encrypted={encrypted!r}")
        self.analyzer_key_id = analyzer_key_id
        self.params = params
        self.encrypted = bool(encrypted)
        self.source = source if source is not None else SecureRandom()
        self.mac_key = mac_key
        self.report = ShuffleReport()
        self._rb = encrypted_record_bytes(params) if encrypted else params.record_bytes
        # the batch index next to each record serves the copied-record check only
        self._slot = self._rb + (_IDX_BYTES if self.encrypted else 0)
        n_expected = params.n * params.messages_per_user
        expected = n_expected * self._slot
        k = 1
        while ((k * (int(memory_limit) // 8) < expected or k * _BUCKET_RECORDS < n_expected)
               and k < _MAX_BUCKETS):
            k *= 2
        self.workers = _check_threads(workers)
        self._buckets = _Buckets(k, int(memory_limit) // 4, workdir, self._slot)
        self._sip_key = self.source.bytes(16)
        self._scratch = threading.local()
        self._batch_hashes: set[bytes] = set()
        self._accepted: set = set()
        self._failed: set = set()
        self._n_accepted = 0
        self._mixed = False

    @property
    def n_buckets(self) -> int:
        return self._buckets.k

    # ----- pass 1: validation and bucketing -----
    def _fail(self, sender: Hashable | None, reason: str) -> bool:
        self.report.rejected[reason] += 1
        if sender is None:
            self.report.n_failed_users += 1
        elif sender not in self._failed and sender not in self._accepted:
            self._failed.add(sender)
            self.report.n_failed_users += 1
        return False

    def _validate(self, data: bytes) -> tuple[str | None, np.ndarray | None]:
        """(reason, records as 2D uint8 rows); reason None when the batch is acceptable."""
        seen = self.inspect(data)
        return seen.reason, seen.rows

    def inspect(self, data: bytes | memoryview, source: SecureRandom | None = None
                ) -> Inspection:
        """Check one user's batch without changing the shuffler (:class:`Inspection`).

        Every check of :meth:`submit` that does not depend on earlier batches, and the
        order-free fingerprint :meth:`submit` compares with accepted batches. With
        ``source`` (a secure generator this caller uses alone), a plaintext batch's records
        are also spread over the buckets here, labels drawn from ``source`` (i.i.d. uniform
        like those :meth:`submit` draws from the shuffler's own source). Reads only the
        parameters, so several threads may inspect batches at once; hand the result to
        :meth:`submit` (``inspected=``) with the same ``data`` to accept the batch.

        Parameters
        ----------
        data : bytes or memoryview
            One user's batch.
        source : SecureRandom, optional
            A secure generator for the bucket labels of a plaintext batch (used by this
            caller alone); without it :meth:`submit` spreads the records.

        Returns
        -------
        Inspection
            The reason a batch fails (or None), its records, fingerprint and spread.
        """
        p = self.params
        try:
            h = Header.unpack(bytes(data[:HEADER_SIZE]))
        except WireError:
            return Inspection("malformed")
        bad = header_mismatch(p, h, KIND_USER_ENC if self.encrypted else KIND_USER)
        if bad is not None:  # wrong_digest, wrong_kind, wrong_record_size, incomplete
            return Inspection(bad.reason)
        if self.analyzer_key_id is not None and h.key_id != self.analyzer_key_id:
            return Inspection("wrong_key")
        if len(data) < h.total_bytes:
            return Inspection("truncated")
        if len(data) != h.total_bytes:
            return Inspection("malformed")
        rows = np.frombuffer(data, dtype=np.uint8, offset=HEADER_SIZE).reshape(-1, self._rb)
        if not self.encrypted:
            # one pass: the checks and, with a source, the spread over the buckets
            labels = _NO_LABELS if source is None else self._draw_labels(rows, source)
            code, spread = self._check_canonical(rows, labels)
            if code:
                return Inspection(_PLAIN_REASONS[code])
            return Inspection(None, rows, hashlib.sha256(rows.data).digest(),
                              None if source is None else spread)
        coords = np.ascontiguousarray(rows[:, :4]).view("<u4").ravel().astype(np.int64)
        if coords.size and coords.max() >= p.m:
            return Inspection("coordinate_out_of_range")
        if coords.size != p.r * p.m or np.any(np.bincount(coords, minlength=p.m) != p.r):
            return Inspection("incomplete")
        if _duplicate_groups(rows[:, 4:36]):
            return Inspection("duplicate_record")
        return Inspection(None, rows, self._fingerprint(rows))

    def _check_canonical(self, rows: np.ndarray, labels: np.ndarray) -> tuple[int, _Spread]:
        """(check code of :func:`_check_plain`, the records grouped by ``labels`` --
        meaningful when the code is 0 and ``labels`` holds one per record)."""
        p = self.params
        body = np.ascontiguousarray(rows).reshape(-1)
        k = self._buckets.k if labels.size else 1
        size = rows.shape[0] * self._rb + k * (8 - self._rb) if labels.size else 0
        flat = np.empty(size, dtype=np.uint8)
        code, bounds = _check_plain(body, self._rb, p.share_bits, p.q, p.m, p.r,
                                    labels, k, flat)
        return int(code), _Spread(flat, bounds, 8 - self._rb)

    def submit(self, data: bytes | memoryview, sender: Hashable | None = None, *,
               inspected: Inspection | None = None) -> bool:
        """Validate one user's batch; keep its records if acceptable. Returns True if accepted.

        ``sender`` (any hashable, e.g. a connection id) is only used to refuse a second
        batch from a sender already accepted; a sender whose batch was rejected may submit
        again. It is forgotten once the batch is mixed. ``inspected`` is what this
        shuffler's :meth:`inspect` returned for exactly these ``data`` (e.g. computed on
        another thread); without it the batch is inspected here.
        """
        if self._mixed:
            raise RuntimeError("this Shuffler has already mixed; make a new one per round")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, got {type(data).__name__}")
        if sender is not None and sender in self._accepted:
            return self._fail(sender, "duplicate_sender")
        seen = self.inspect(data) if inspected is None else inspected
        rows, fingerprint = seen.rows, seen.fingerprint
        if seen.reason is not None or rows is None or fingerprint is None:
            return self._fail(sender, seen.reason or "malformed")
        if fingerprint in self._batch_hashes:
            return self._fail(sender, "replayed_batch")
        if self._n_accepted >= self.params.n:
            return self._fail(sender, "over_capacity")
        self._batch_hashes.add(fingerprint)
        self._bucket(rows, self._n_accepted, seen.spread)
        self._n_accepted += 1
        self.report.n_forwarded += 1
        if sender is not None:
            self._accepted.add(sender)
            if sender in self._failed:
                self._failed.discard(sender)
                self.report.n_failed_users -= 1
        return True

    def _fingerprint(self, rows: np.ndarray) -> bytes:
        """SHA-256 of the batch's records in sorted order: the same for any reordering.

        A copy of an accepted batch with its records permuted is thus a replay, refused on
        arrival (before it can take one of the n places); two honest batches never share an
        encrypted record (fresh ephemeral keys), and two plaintext ones hold the same
        multiset of r m uniform shares with negligible probability. A plaintext batch is
        accepted only in ascending numeric order (:func:`_check_plain`; ``non_canonical``
        otherwise), so its records as received are already sorted and are hashed as they
        are; encrypted records are sorted as byte strings.
        """
        if not self.encrypted:
            code, _ = self._check_canonical(rows, _NO_LABELS)
            if code:
                raise ValueError(f"rows are not a valid plaintext batch ({_PLAIN_REASONS[code]})")
            return hashlib.sha256(np.ascontiguousarray(rows).data).digest()
        rb = rows.shape[1]
        flat = np.ascontiguousarray(rows).view(np.dtype((np.void, rb))).ravel()
        return hashlib.sha256(np.sort(flat).tobytes()).digest()

    def _draw_labels(self, rows: np.ndarray, source: SecureRandom | None = None) -> np.ndarray:
        """Bucket labels (only their low log2 k bits are used): SipHash of the ephemeral key
        of an encrypted record, a uniform 16-bit value from ``source`` (default: the
        shuffler's) for a plaintext one; all 0 when there is one bucket."""
        if self._buckets.k == 1:
            return np.zeros(rows.shape[0], dtype=np.uint32)
        if self.encrypted:
            return siphash24(self._sip_key, rows[:, 4:36])
        # one scratch array per thread: the labels are used up before inspect returns; a
        # label is 16 bits of the keystream (k <= _MAX_BUCKETS = 2^16), two per word
        n = rows.shape[0]
        buf = getattr(self._scratch, "labels", None)
        if buf is None or buf.size != (n + 1) // 2:
            buf = self._scratch.labels = np.empty((n + 1) // 2, dtype=np.uint32)
        return (source or self.source).fill_uint32(buf).view(np.uint16)[:n]

    def _scatter(self, rows: np.ndarray, labels: np.ndarray, index: int = 0) -> _Spread:
        """The rows (then the batch index, encrypted only) grouped by bucket label."""
        tail = (np.frombuffer(np.uint32(index).astype("<u4").tobytes(), np.uint8)
                if self.encrypted else np.zeros(0, dtype=np.uint8))
        slots = np.empty((rows.shape[0], self._slot), dtype=np.uint8)
        bounds = _scatter_by_label(np.ascontiguousarray(rows), tail, labels, self._buckets.k,
                                   slots)
        return _Spread(slots.reshape(-1), bounds, 0)

    def _bucket(self, rows: np.ndarray, index: int, spread: _Spread | None = None) -> None:
        self._buckets.add(spread if spread is not None
                          else self._scatter(rows, self._draw_labels(rows), index))
        self._buckets.maybe_flush()

    def missing(self, k: int) -> None:
        """Record k users who were admitted but never sent a batch (dropouts)."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got k={k!r}")
        self.report.n_missing += int(k)

    @property
    def n_users_seen(self) -> int:
        """Distinct users who submitted something (accepted or not)."""
        return self.report.n_forwarded + self.report.n_failed_users

    # ----- pass 2: remove copies, permute each bucket, write -----
    def _rows(self, buf: np.ndarray) -> np.ndarray:
        return buf.reshape(-1, self._slot)

    def _batch_index(self, rows: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(rows[:, self._rb :]).view("<u4").ravel()

    def _copied_batches(self) -> set[int]:
        """Accepted batches to remove: those sharing an encrypted record with an earlier kept
        batch.

        Exactly the sequential rule "in acceptance order, keep batch i iff it shares no
        ephemeral key with an earlier kept batch" (module docstring, "Copied records"):
        pass 2 finds every group of batches holding one key (bucket by bucket, the equal keys
        share a bucket); the batches are then visited in increasing index, and a batch is
        kept iff none of its groups already has a kept member. O(total group size) time and
        memory, whatever the number of copies of one record.
        """
        if not self.encrypted:
            return set()
        groups: list[np.ndarray] = []
        for i in range(self.n_buckets):
            rows = self._rows(self._buckets.load(i))
            idx = self._batch_index(rows)
            groups.extend(np.unique(idx[g]) for g in _duplicate_groups(rows[:, 4:36]))
        if not groups:
            return set()
        member_of: dict[int, list[int]] = {}
        for gid, members in enumerate(groups):
            for j in members.tolist():
                member_of.setdefault(j, []).append(gid)
        taken = np.zeros(len(groups), dtype=bool)  # the group already has a kept batch
        removed: set[int] = set()
        for j in sorted(member_of):
            gids = member_of[j]
            if taken[gids].any():
                removed.add(j)
            else:
                taken[gids] = True
        return removed

    def _finish(self, out: np.ndarray | None, rows: np.ndarray, perm: np.ndarray,
                i: int) -> memoryview:
        """The permuted bucket: ``out``, or, if the words ran out at position i, the
        Fisher-Yates continued from ``source`` and the rows gathered here."""
        if out is None:
            if perm.dtype == np.uint64:  # record values, the inside-out Fisher-Yates
                while i < perm.size:
                    i = int(_fisher_yates_up(perm, i, self._words(perm.size - i + 64)))
            else:
                while i > 0:
                    i = int(_fisher_yates(perm, i, self._words(i + 64)))
            out = _permuted(rows, perm, self._rb)
        return out.reshape(-1).data

    def _words(self, n: int) -> np.ndarray:
        return self.source.fill_uint32(np.empty(n, dtype=np.uint32))

    def _mix_header(self) -> tuple[Header, np.ndarray]:
        """Remove copied batches (pass 2's copy check), count them; (header, removed)."""
        bad = self._copied_batches()
        rep = self.report
        if bad:
            rep.rejected["copied_record"] += len(bad)
            rep.n_removed += len(bad)
            rep.n_forwarded -= len(bad)
        p = self.params
        h = Header(KIND_MIXED_ENC if self.encrypted else KIND_MIXED, self._rb, p.digest,
                   rep.n_forwarded * p.messages_per_user, rep.n_forwarded, rep.n_dropped)
        return h, np.fromiter(bad, dtype=np.uint32, count=len(bad))

    def _permuted_buckets(self, bad_arr: np.ndarray, ex: ThreadPoolExecutor,
                          then: Callable[[Any], Any] | None = None) -> Iterator[Any]:
        """The buckets permuted on ``ex`` (``then`` applied to each result there), in order.

        The words of each bucket are drawn here, in bucket order: the permutation for a
        given source does not depend on the threads.
        """
        pending: deque = deque()

        def task(rows: np.ndarray, words: np.ndarray) -> Any:
            res = _permute_bucket(rows, words, self._rb)
            return res if then is None or res[0] is None else (then(res[0]),)

        for i in range(self.n_buckets):
            rows = self._rows(self._buckets.load(i, release=True))
            if bad_arr.size:
                rows = rows[~np.isin(self._batch_index(rows), bad_arr)]
            n = rows.shape[0]
            pending.append(ex.submit(task, rows, self._words(n + 64 + (n * n >> 31))))
            if len(pending) > self.workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def mix_to(self, f: IO[bytes]) -> Header:
        """Write the mixed batch (header, uniformly permuted records, tag) to a binary file.

        Memory stays near ``memory_limit`` whatever the number of users: buckets are loaded
        one at a time. Returns the header written. The output carries no sender identity:
        only the records, the number of users forwarded and the number dropped.
        """
        if self._mixed:
            raise RuntimeError("this Shuffler has already mixed; make a new one per round")
        self._mixed = True
        try:
            h, bad_arr = self._mix_header()
            with BatchWriter(f, h, self.mac_key) as w, \
                    ThreadPoolExecutor(self.workers) as ex:
                for res in self._permuted_buckets(bad_arr, ex):
                    w.write(self._finish(*res))
            return w.header
        finally:
            self.close()

    def mix_each(self, consume: Callable[[np.ndarray], object]) -> Header:
        """:meth:`mix_to` within one process: each permuted bucket goes to ``consume``.

        Plaintext only. The same buckets, permutations and header as :meth:`mix_to` for the
        same source (unless a bucket's Lemire draws outrun the random words drawn for it,
        beyond the 64 + n^2 / 2^31 spare ones: then its permutation continues from words
        drawn at another point of the stream, still uniform, but not :meth:`mix_to`'s), but
        nothing is serialised and no tag computed: ``consume`` gets each
        bucket's permuted records as uint64 integers on the worker thread that permuted it
        (in bucket order on one worker; concurrently on several, so ``consume`` must be
        thread-safe, e.g. one accumulator per thread), in an array reused once ``consume``
        returns (copy what must outlive the call). For a consumer in this process, such
        as the wire path's analyzer (:func:`shuffledp.protocol.runner.wire_heatmap`), which
        shares the shuffler's memory: there is no channel between them to authenticate.
        Buckets held in memory are also read on the worker threads. Returns the header
        :meth:`mix_to` would write (without its tag flag).

        Raises
        ------
        ValueError
            If the shuffler takes encrypted batches.
        """
        if self.encrypted:
            raise ValueError("mix_each takes plaintext batches only; use mix_to")
        if self._mixed:
            raise RuntimeError("this Shuffler has already mixed; make a new one per round")
        self._mixed = True
        try:
            h, _ = self._mix_header()
            b = self._buckets

            def permute(placed: int, out: np.ndarray) -> tuple:
                if placed < out.size:
                    return (out.copy(), placed)
                consume(out)
                return ()

            local = threading.local()

            def group(g0: int, g1: int, words: list) -> list:
                # buckets in memory are read here where they lie, a group of them at a time,
                # and permuted as they are read (_gather_permute_at) into an array this
                # thread reuses (a bucket whose words ran out gets its own copy)
                scratch = getattr(local, "scratch", None)
                if scratch is None:
                    scratch = local.scratch = {}
                addr, end, cnt = b.group_parts(g0, g1)
                res = []
                for j, w in enumerate(words):
                    out = _scratch(scratch, "out", int(cnt[:, j].sum()), np.uint64)
                    res.append(permute(int(_gather_permute_at(addr, end, cnt, j, self._slot,
                                                              w, out)), out))
                return res

            def spilled(flat: np.ndarray, words: np.ndarray) -> list:
                n = flat.size // self._slot
                out = np.empty(n, dtype=np.uint64)
                return [permute(int(_gather_permute(flat, _ONE_PART, np.full((1, 1), n, np.int64),
                                                    0, self._slot, words, out)), out)]

            def done(results: list) -> None:
                for res in results:
                    if res:  # the words ran out: finished here, in bucket order
                        vals, k = res
                        while k < vals.size:
                            k = int(_fisher_yates_up(vals, k, self._words(vals.size - k + 64)))
                        consume(vals)

            def words(n: int) -> np.ndarray:  # drawn here, in bucket order
                return self._words(n + 64 + (n * n >> 31))

            pending: deque = deque()
            with ThreadPoolExecutor(self.workers) as ex:
                if b.dir is None:
                    for g0, g1 in b.groups(_GROUP_BYTES):
                        ws = [words(int(b.sizes[i]) // self._slot) for i in range(g0, g1)]
                        pending.append(ex.submit(group, g0, g1, ws))
                        if len(pending) > self.workers:
                            done(pending.popleft().result())
                else:
                    for i in range(self.n_buckets):
                        flat = b.load(i, release=True)
                        pending.append(ex.submit(spilled, flat, words(flat.size // self._slot)))
                        if len(pending) > self.workers:
                            done(pending.popleft().result())
                while pending:
                    done(pending.popleft().result())
            return h
        finally:
            self.close()

    def mix(self) -> tuple[Header, np.ndarray]:
        """In-memory :meth:`mix_to` for small runs: returns (header, records).

        Plaintext records come back as uint64 message integers
        (:func:`shuffledp.protocol.wire.encode_batch` packs them), encrypted ones as raw records.
        """
        import io

        buf = io.BytesIO()
        self.mix_to(buf)
        h, rec = decode_batch(buf.getvalue(), self.mac_key)
        if not self.encrypted:
            rec = unpack_records(rec, self._rb).astype(np.uint64)
        return h, rec

    def close(self) -> None:
        """Forget everything (temporary files, sender ids, fingerprints)."""
        self._mixed = True
        self._buckets.close()
        self._accepted = set()
        self._failed = set()
        self._batch_hashes = set()

    def __enter__(self) -> Shuffler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _shuffle_batches(
    params: ProtocolParams,
    batches: Iterable[bytes],
    *,
    encrypted: bool = False,
    expected_users: int | None = None,
    source: SecureRandom | None = None,
    mac_key: bytes | None = None,
) -> tuple[Header, np.ndarray, ShuffleReport]:
    """Run the shuffler over user batches (bytes, one user each); returns (header, records, report).

    With ``expected_users``, users admitted but absent from ``batches`` count as dropped.
    """
    s = Shuffler(params, encrypted=encrypted, source=source, mac_key=mac_key)
    for k, data in enumerate(batches, start=1):
        s.submit(data, sender=k)
    if expected_users is not None:
        s.missing(max(0, int(expected_users) - s.n_users_seen))
    h, rec = s.mix()
    return h, rec, s.report
