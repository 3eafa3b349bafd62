"""Metric-DP accounting: PrivEMDItemWise amplification and its inverse (:mod:`.shuffle`),
BoundedEMDReduction (:mod:`.reductions`)."""
