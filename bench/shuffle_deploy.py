"""Cost of the deployment path: per-message HPKE encryption to the analyzer (RFC 9180).

Each message is one HPKE base-mode Seal (DHKEM(X25519, HKDF-SHA256), HKDF-SHA256,
ChaCha20-Poly1305): a fresh ephemeral X25519 key per message, so ciphertexts of one user are
unlinkable (shuffledp.protocol.crypto.encrypt_records);
the analyzer does one X25519 exchange per message to open it. Prints the measured cost per
message (encrypt, decrypt, envelope check by the shuffler), the bytes per encrypted message,
and the extrapolation to one user at the Fig. 12 setting (320x240, n=50, eps=5, delta=1e-5).

Run: ``python bench/shuffle_deploy.py [--messages 4000] [--B 256]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from shuffledp import Grid
from shuffledp.protocol.crypto import (
    decrypt_records,
    encrypt_records,
    encrypted_record_bytes,
    generate_analyzer_key,
    public_bytes,
)
from shuffledp.protocol.params import derive_params
from shuffledp.protocol.shuffler import Shuffler
from shuffledp.protocol.wire import KIND_USER_ENC, Header, encode_batch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=4000)
    ap.add_argument("--B", type=int, default=256)
    args = ap.parse_args()
    p = derive_params(Grid(320, 240), 50, epsilon=5.0, delta=1e-5, B=args.B)
    key = generate_analyzer_key()
    k = args.messages
    rng = np.random.default_rng(0)
    rec = (rng.integers(0, p.m, k).astype(np.uint64) << np.uint64(p.share_bits)) | rng.integers(
        0, p.q, k).astype(np.uint64)
    t = time.perf_counter()
    ct = encrypt_records(p, rec, public_bytes(key))
    t_enc = (time.perf_counter() - t) / k
    t = time.perf_counter()
    c, s, failed = decrypt_records(p, ct, key)
    t_dec = (time.perf_counter() - t) / k
    assert failed == 0 and np.array_equal(c, (rec >> np.uint64(p.share_bits)).astype(np.int64))
    # shuffler envelope check on a (fake-sized) complete user batch is O(records), numpy only
    rb = encrypted_record_bytes(p)
    mpu = p.messages_per_user
    print(f"Fig. 12 setting, B={args.B}: {mpu} messages/user, plaintext {p.record_bytes} B/msg, "
          f"encrypted {rb} B/msg")
    print(f"encrypt (user)   : {t_enc * 1e6:7.1f} us/message -> {t_enc * mpu:8.1f} s/user/core")
    print(f"decrypt (analyzer): {t_dec * 1e6:7.1f} us/message -> {t_dec * mpu * 50 / 3600:8.2f} "
          f"core-hours for n=50")
    print(f"encrypted batch  : {rb * mpu / 1e6:7.1f} MB/user "
          f"(plaintext {p.bytes_per_user / 1e6:.1f})")
    # envelope validation and mixing by the shuffler, small grid so a whole batch is cheap
    small = derive_params(Grid(8, 8), 3, epsilon=5.0, delta=1e-5, B=4)
    m_small = small.messages_per_user
    recs = (np.repeat(np.arange(small.m, dtype=np.uint64), small.r) << np.uint64(
        small.share_bits))
    body = encrypt_records(small, recs, public_bytes(key))
    batch = encode_batch(Header(KIND_USER_ENC, encrypted_record_bytes(small), small.digest,
                                m_small), body)
    warm = Shuffler(small, encrypted=True)
    warm.submit(batch)
    warm.mix()  # load the compiled Fisher-Yates
    sh = Shuffler(small, encrypted=True)
    t = time.perf_counter()
    for j in range(20):
        sh.submit(batch, sender=j)
    sh.mix()
    t_sh = (time.perf_counter() - t) / (20 * m_small)
    print(f"shuffler (envelope check + secure permutation of encrypted records): "
          f"{t_sh * 1e9:.0f} ns/message")


if __name__ == "__main__":
    main()
