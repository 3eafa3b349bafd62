"""Privacy accounting: guarantee records, budget splits, amplification bounds.

Modules
-------
guarantee       the :class:`Guarantee` record carried by every release
budget          per-level split of [Ghazi23]_; noise <-> budget conversions of
                [Bagdasaryan22]_ (eqs. 5, 7-9)
clones          amplification by shuffling of eps0-LDP reports: closed form and exact numerics
                of the clones and variation-ratio (stronger clone) reductions
krr_shuffle     shuffled k-ary randomized response: exact numerics of its privacy blanket
krr_lower       exact privacy curves of shuffled k-RR on specific data sets (lower bounds)
binary_rr       shuffled binary randomized response: exact worst case over every data set
metric_shuffle  PrivEMDItemWise ([Imola]_ Thm 4.3/4.4), its inverse and baselines
summation       parameters of the [Ghazi23]_ App. F shuffle summation protocol (q, r, noise,
                bits)
reductions      BoundedEMDReduction ([Imola]_ Thm 5.3)
zcdp            zCDP of the discrete Gaussian and its (eps, delta) / metric conversion
events          every released mechanism as a composable event with its dominating pair,
                its (epsilon, delta) derived from or verified against its parameters
pld             privacy loss distributions whose numerical error is bounded and charged
compose         the Accountant: basic, advanced and PLD composition
dp_events       to/from dp_accounting's DpEvent (the ``interop`` extra)
ledger          releases from report.json files / specs, and the budget ledger

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps" -- full entry in
   docs/references.md
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards Sparse Federated Analytics" -- full entry in
   docs/references.md
.. [Imola] Imola et al. (preprint), "Metric Differential Privacy at the User-Level" -- full entry in
   docs/references.md
"""

from shuffledp._lazy import lazy_names as _lazy_names

# Names resolve on first use (PEP 562) so that `shuffledp --help` / `--version` and
# light submodules do not pay for scipy, numba and cryptography at start-up.
_LAZY = {
    "binary_rr_shuffle_exact": "shuffledp.accounting.amplification.binary_rr",
    "dl_epsilon_for_std": "shuffledp.accounting.budget",
    "dl_std": "shuffledp.accounting.budget",
    "level_budgets": "shuffledp.accounting.budget",
    "next_query_epsilon": "shuffledp.accounting.budget",
    "polya_shape": "shuffledp.accounting.budget",
    "start_level": "shuffledp.accounting.budget",
    "target_std": "shuffledp.accounting.budget",
    "LocalParameter": "shuffledp.accounting.amplification.clones",
    "ShuffleBound": "shuffledp.accounting.amplification.clones",
    "clone_probability": "shuffledp.accounting.amplification.clones",
    "clones_closed_form": "shuffledp.accounting.amplification.clones",
    "clones_eps0_for_target": "shuffledp.accounting.amplification.clones",
    "clones_numerical": "shuffledp.accounting.amplification.clones",
    "clones_validity_limit": "shuffledp.accounting.amplification.clones",
    "reduction_divergence": "shuffledp.accounting.amplification.clones",
    "shuffle_ldp": "shuffledp.accounting.amplification.clones",
    "variation_ratio_numerical": "shuffledp.accounting.amplification.clones",
    "Accountant": "shuffledp.accounting.composition",
    "Composition": "shuffledp.accounting.composition",
    "compose": "shuffledp.accounting.composition",
    "DiscreteGaussian": "shuffledp.accounting.events",
    "DiscreteLaplace": "shuffledp.accounting.events",
    "EpsDelta": "shuffledp.accounting.events",
    "Parallel": "shuffledp.accounting.events",
    "PolyaSum": "shuffledp.accounting.events",
    "PrivacyEvent": "shuffledp.accounting.events",
    "Sequential": "shuffledp.accounting.events",
    "ShuffledKRR": "shuffledp.accounting.events",
    "ShuffledLDP": "shuffledp.accounting.events",
    "event_from_dict": "shuffledp.accounting.events",
    "from_dp_event": "shuffledp.accounting.dp_events",
    "to_dp_event": "shuffledp.accounting.dp_events",
    "Guarantee": "shuffledp.accounting.guarantee",
    "krr_dataset_divergence": "shuffledp.accounting.amplification.krr_lower",
    "krr_lower_epsilon": "shuffledp.accounting.amplification.krr_lower",
    "krr_blanket_divergence": "shuffledp.accounting.amplification.krr_shuffle",
    "krr_shuffle_numerical": "shuffledp.accounting.amplification.krr_shuffle",
    "DEFAULT_MAX_DELTA_OUT": "shuffledp.accounting.metric.shuffle",
    "ItemwiseBound": "shuffledp.accounting.metric.shuffle",
    "ItemwiseInverse": "shuffledp.accounting.metric.shuffle",
    "asymptotic_alpha0": "shuffledp.accounting.metric.shuffle",
    "composition_alpha": "shuffledp.accounting.metric.shuffle",
    "emd_itemwise": "shuffledp.accounting.metric.shuffle",
    "emd_itemwise_alpha0": "shuffledp.accounting.metric.shuffle",
    "thm43_validity_limit": "shuffledp.accounting.metric.shuffle",
    "ReductionBound": "shuffledp.accounting.metric.reductions",
    "reduction_alpha": "shuffledp.accounting.metric.reductions",
    "reduction_epsilon": "shuffledp.accounting.metric.reductions",
    "reduction_samples": "shuffledp.accounting.metric.reductions",
    "MAX_Q": "shuffledp.accounting.summation",
    "MAX_RECORD_BITS": "shuffledp.accounting.summation",
    "SummationParameters": "shuffledp.accounting.summation",
    "summation_parameters": "shuffledp.accounting.summation",
}


__getattr__, __dir__ = _lazy_names(__name__, globals(), _LAZY)

__all__ = [
    "Accountant",
    "Composition",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "EpsDelta",
    "Parallel",
    "PolyaSum",
    "PrivacyEvent",
    "Sequential",
    "ShuffledKRR",
    "ShuffledLDP",
    "compose",
    "event_from_dict",
    "from_dp_event",
    "to_dp_event",
    "DEFAULT_MAX_DELTA_OUT",
    "MAX_Q",
    "MAX_RECORD_BITS",
    "Guarantee",
    "ItemwiseBound",
    "ItemwiseInverse",
    "LocalParameter",
    "ReductionBound",
    "ShuffleBound",
    "SummationParameters",
    "asymptotic_alpha0",
    "clones_closed_form",
    "binary_rr_shuffle_exact",
    "clone_probability",
    "krr_blanket_divergence",
    "krr_dataset_divergence",
    "krr_lower_epsilon",
    "krr_shuffle_numerical",
    "clones_eps0_for_target",
    "clones_numerical",
    "clones_validity_limit",
    "composition_alpha",
    "dl_epsilon_for_std",
    "dl_std",
    "emd_itemwise",
    "emd_itemwise_alpha0",
    "level_budgets",
    "next_query_epsilon",
    "polya_shape",
    "reduction_alpha",
    "reduction_divergence",
    "reduction_epsilon",
    "reduction_samples",
    "shuffle_ldp",
    "variation_ratio_numerical",
    "start_level",
    "summation_parameters",
    "target_std",
    "thm43_validity_limit",
]
