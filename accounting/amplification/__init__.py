"""Amplification by shuffling of eps0-LDP reports: clones and variation-ratio bounds
(:mod:`.clones`), shuffled k-RR (:mod:`.krr_shuffle`), binary RR (:mod:`.binary_rr`), exact
lower curves (:mod:`.krr_lower`); shared helpers in :mod:`._common`."""
