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
events          every released mechanism as a composable event with its dominating pair
compose         the Accountant: basic, advanced and PLD composition (dp_accounting)
ledger          releases from report.json files / specs, and the budget ledger

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022(4). arXiv:2111.02356.
.. [Imola] J. Imola, A. Roy Chowdhury, K. Chaudhuri, "Metric Differential Privacy at the
   User-Level" (preprint).
"""

from shuffledp.accounting.budget import (
    dl_epsilon_for_std,
    dl_std,
    level_budgets,
    next_query_epsilon,
    polya_shape,
    start_level,
    target_std,
)
from shuffledp.accounting.compose import Accountant, Composition, compose
from shuffledp.accounting.events import (
    DiscreteGaussian,
    DiscreteLaplace,
    EpsDelta,
    Parallel,
    PolyaSum,
    PrivacyEvent,
    Sequential,
    ShuffledKRR,
    ShuffledLDP,
    event_from_dict,
)
from shuffledp.accounting.guarantee import Guarantee
from shuffledp.accounting.metric.reductions import (
    ReductionBound,
    reduction_alpha,
    reduction_epsilon,
    reduction_samples,
)
from shuffledp.accounting.metric.shuffle import (
    DEFAULT_MAX_DELTA_OUT,
    ItemwiseBound,
    ItemwiseInverse,
    asymptotic_alpha0,
    composition_alpha,
    emd_itemwise,
    emd_itemwise_alpha0,
    thm43_validity_limit,
)
from shuffledp.accounting.shuffle_ldp.binary_rr import binary_rr_shuffle_exact
from shuffledp.accounting.shuffle_ldp.clones import (
    LocalParameter,
    ShuffleBound,
    clone_probability,
    clones_closed_form,
    clones_eps0_for_target,
    clones_numerical,
    clones_validity_limit,
    reduction_divergence,
    shuffle_ldp,
    variation_ratio_numerical,
)
from shuffledp.accounting.shuffle_ldp.krr_lower import krr_dataset_divergence, krr_lower_epsilon
from shuffledp.accounting.shuffle_ldp.krr_shuffle import (
    krr_blanket_divergence,
    krr_shuffle_numerical,
)
from shuffledp.accounting.summation import (
    MAX_Q,
    MAX_RECORD_BITS,
    SummationParameters,
    summation_parameters,
)

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
