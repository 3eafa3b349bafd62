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
federated       :func:`federated_histogram` (one round: Polya noise + secure aggregation per
                shard), :func:`adaptive_histogram` (Alg. 2), :class:`FederatedHistogram`,
                :class:`FederatedRefused` (Bagdasaryan et al., PoPETs 2022)
secure agg.     :mod:`shuffledp.secagg` (:func:`~shuffledp.secagg.secure_sum`, client and
                server state machines; Bonawitz et al., CCS 2017)
accounting      :func:`summation_parameters`, :func:`shuffle_ldp`, :func:`emd_itemwise`,
                :func:`emd_itemwise_alpha0`, :func:`reduction_alpha`, :func:`level_budgets`
records         :class:`HeatmapRelease`, :class:`Guarantee`, :class:`Neighbour`,
                :class:`ReleaseRefused`, :class:`WireError`
refusals        :class:`Refused`: the base of every refusal (:class:`ReleaseRefused`,
                :class:`FederatedRefused`, ``SecAggRefused``, ``SecAggAborted``,
                ``BudgetExceeded``, ``LegacyLedger``, ``LockBusy``, ``TamperedLog``,
                ``RoundAlreadyReleased``, ``LedgerError``: the table in
                :mod:`shuffledp.errors`); a release or step that cannot be proven safe
                or correct is refused, not reported

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps"
   -- full entry in docs/references.md
"""

from shuffledp._lazy import lazy_names as _lazy_names
from shuffledp._version import __version__

# Names resolve on first use (PEP 562) so that `shuffledp --help` / `--version` and
# light submodules do not pay for scipy, numba and cryptography at start-up.
_LAZY = {
    "Guarantee": "shuffledp.accounting",
    "emd_itemwise": "shuffledp.accounting",
    "emd_itemwise_alpha0": "shuffledp.accounting",
    "level_budgets": "shuffledp.accounting",
    "reduction_alpha": "shuffledp.accounting",
    "shuffle_ldp": "shuffledp.accounting",
    "summation_parameters": "shuffledp.accounting",
    "Neighbour": "shuffledp.accounting.guarantee",
    "release_mixed": "shuffledp.analyzers.heatmap.modular",
    "central_heatmap": "shuffledp.analyzers.heatmap.central",
    "freq_est_local": "shuffledp.analyzers.metric.freq",
    "priv_emd_itemwise": "shuffledp.analyzers.metric.itemwise",
    "priv_emd_linear": "shuffledp.analyzers.metric.linear",
    "bounded_emd_reduction": "shuffledp.analyzers.metric.reduction",
    "ReleaseRefused": "shuffledp.analyzers.heatmap.modular",
    "Refused": "shuffledp.errors",
    "AnonHistogram": "shuffledp.analyzers.privhist",
    "privhist": "shuffledp.analyzers.privhist",
    "generate_analyzer_key": "shuffledp.protocol.crypto",
    "generate_mac_key": "shuffledp.protocol.crypto",
    "public_bytes": "shuffledp.protocol.crypto",
    "user_batch": "shuffledp.encoders.encoder",
    "Grid": "shuffledp.grid",
    "shuffle_heatmap": "shuffledp.protocol.runner",
    "ProtocolParams": "shuffledp.protocol.params",
    "derive_params": "shuffledp.protocol.params",
    "HeatmapRelease": "shuffledp.analyzers.heatmap.release",
    "Shuffler": "shuffledp.protocol.shuffler",
    "UserDistributions": "shuffledp.users",
    "WireError": "shuffledp.protocol.wire",
    "FederatedHistogram": "shuffledp.analyzers.federated.histogram",
    "FederatedRefused": "shuffledp.analyzers.federated.histogram",
    "federated_histogram": "shuffledp.protocol.federated",
    "adaptive_histogram": "shuffledp.protocol.federated",
}


__getattr__, __dir__ = _lazy_names(__name__, globals(), _LAZY)

__all__ = [
    "AnonHistogram",
    "FederatedHistogram",
    "FederatedRefused",
    "Grid",
    "Guarantee",
    "HeatmapRelease",
    "Neighbour",
    "ProtocolParams",
    "Refused",
    "ReleaseRefused",
    "Shuffler",
    "UserDistributions",
    "WireError",
    "__version__",
    "adaptive_histogram",
    "bounded_emd_reduction",
    "central_heatmap",
    "derive_params",
    "emd_itemwise",
    "emd_itemwise_alpha0",
    "federated_histogram",
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
