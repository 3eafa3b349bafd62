"""``shuffledp sweep``: one parameter over a list of values, shuffle and central side by side.

:mod:`.config` (what runs), :mod:`.run` (running it, resumably), :mod:`.store` (``runs.csv``
and ``runs.jsonl``), :mod:`.plot` (t-interval summaries and PNGs). The names below are the
sweep's API.
"""

from shuffledp.sweep.config import (
    COLUMNS,
    DEFAULT_MODELS,
    METRICS,
    MODELS,
    PARAMETERS,
    PRESETS,
    SIGMA_NOTE,
    Run,
    RunRecord,
    SweepConfig,
    check_models,
    parse_value,
    plan,
)
from shuffledp.sweep.plot import PLOT_HINT, plot, summarise, t_interval
from shuffledp.sweep.run import load_input, run_one, run_sweep, subsample_users
from shuffledp.sweep.store import (
    CSV_NAME,
    JSONL_NAME,
    append_record,
    done_keys,
    read_runs,
    repair,
)

__all__ = ["COLUMNS", "CSV_NAME", "DEFAULT_MODELS", "JSONL_NAME", "METRICS", "MODELS",
           "PARAMETERS", "PLOT_HINT", "PRESETS", "SIGMA_NOTE", "Run", "RunRecord",
           "SweepConfig", "append_record",
           "check_models",
           "done_keys", "load_input", "parse_value", "plan", "plot", "read_runs", "repair",
           "run_one", "run_sweep", "subsample_users", "summarise", "t_interval"]
