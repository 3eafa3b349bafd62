"""PrivHist: differentially private anonymized histograms ([Suresh19]_).

References
----------
.. [Suresh19] Suresh (2019), "Differentially private anonymized histograms" -- full entry in
   docs/references.md
"""

from shuffledp.analyzers.privhist.baselines import prevalence_baseline, sorted_count_baseline
from shuffledp.analyzers.privhist.histogram import (
    AnonHistogram,
    load_frequency_list,
    parse_frequency_list,
    sorted_l1,
    write_frequency_list,
)
from shuffledp.analyzers.privhist.mechanism import (
    PrivHistRelease,
    budget_split,
    privhist,
    split_histogram,
)
from shuffledp.analyzers.privhist.properties import (
    PropertyEstimates,
    compare_properties,
    estimate_properties,
)

__all__ = [
    "AnonHistogram",
    "PrivHistRelease",
    "PropertyEstimates",
    "budget_split",
    "compare_properties",
    "estimate_properties",
    "load_frequency_list",
    "parse_frequency_list",
    "prevalence_baseline",
    "privhist",
    "sorted_count_baseline",
    "sorted_l1",
    "split_histogram",
    "write_frequency_list",
]
