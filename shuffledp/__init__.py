"""shuffledp: differential privacy in the shuffle model.

The flagship is the private heatmap of [Ghazi23]_, run in the central model or as
a multi-message shuffle protocol. The names below are the public API, grouped by role; the
subpackages hold the rest: :mod:`shuffledp.encoders` (user side), :mod:`shuffledp.analyzers`
(server side), :mod:`shuffledp.accounting` (privacy accounting).

Roles
-----
data            :class:`Grid`, :class:`UserDistributions`
central model   :func:`central_heatmap`
protocol setup  :func:`derive_params` -> :class:`ProtocolParams`, :func:`generate_analyzer_key`,
                :func:`generate_mac_key`, :func:`public_bytes`
user device     :func:`user_batch` (points -> wire-ready, encrypted bytes)
shuffler        :class:`Shuffler` (``submit`` batches, ``mix_to`` a file)
analyzer        :func:`release_mixed` (verify, decrypt, sum mod q, Reconstruct, release)
research        :func:`shuffle_heatmap` (all three roles in one process)
metric DP       :func:`priv_emd_itemwise`, :func:`priv_emd_linear`, :func:`freq_est_local`,
                :func:`bounded_emd_reduction` (user-level d_EM-DP, Imola, Roy Chowdhury and
                Chaudhuri)
histograms      :func:`privhist`, :class:`AnonHistogram` (Suresh, NeurIPS 2019)
secure agg.     :mod:`shuffledp.secagg` (:func:`~shuffledp.secagg.secure_sum`, client and
                server state machines; Bonawitz et al., CCS 2017)
accounting      :func:`summation_parameters`, :func:`shuffle_ldp`, :func:`emd_itemwise`,
                :func:`emd_itemwise_alpha0`, :func:`reduction_alpha`, :func:`level_budgets`
records         :class:`HeatmapRelease`, :class:`Guarantee`, :class:`Neighbour`,
                :class:`ReleaseRefused`, :class:`WireError`

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from shuffledp.accounting import (
    Guarantee,
    emd_itemwise,
    emd_itemwise_alpha0,
    level_budgets,
    reduction_alpha,
    shuffle_ldp,
    summation_parameters,
)
from shuffledp.accounting.guarantee import Neighbour
from shuffledp.analyzers.heatmap.central import central_heatmap
from shuffledp.analyzers.heatmap.modular import ReleaseRefused
from shuffledp.analyzers.heatmap.release import HeatmapRelease
from shuffledp.analyzers.metric.freq import freq_est_local
from shuffledp.analyzers.metric.itemwise import priv_emd_itemwise
from shuffledp.analyzers.metric.linear import priv_emd_linear
from shuffledp.analyzers.metric.reduction import bounded_emd_reduction
from shuffledp.analyzers.privhist import AnonHistogram, privhist
from shuffledp.encoders.encoder import user_batch
from shuffledp.grid import Grid
from shuffledp.protocol.analyzer_input import release_mixed
from shuffledp.protocol.crypto import generate_analyzer_key, generate_mac_key, public_bytes
from shuffledp.protocol.params import ProtocolParams, derive_params
from shuffledp.protocol.runner import shuffle_heatmap
from shuffledp.protocol.shuffler import Shuffler
from shuffledp.protocol.wire import WireError
from shuffledp.users import UserDistributions

__version__ = "0.1.0"
__all__ = [
    "AnonHistogram",
    "Grid",
    "Guarantee",
    "HeatmapRelease",
    "Neighbour",
    "ProtocolParams",
    "ReleaseRefused",
    "Shuffler",
    "UserDistributions",
    "WireError",
    "__version__",
    "bounded_emd_reduction",
    "central_heatmap",
    "derive_params",
    "emd_itemwise",
    "emd_itemwise_alpha0",
    "freq_est_local",
    "generate_analyzer_key",
    "generate_mac_key",
    "level_budgets",
    "priv_emd_itemwise",
    "priv_emd_linear",
    "privhist",
    "public_bytes",
    "reduction_alpha",
    "release_mixed",
    "shuffle_heatmap",
    "shuffle_ldp",
    "summation_parameters",
    "user_batch",
]
