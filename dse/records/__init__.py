"""dse.records: the record store (what was tried, why, what was seen, what was decided).

    from dse.records import Store
    with Store("records.db") as store:
        store.experiments()
"""

from dse.records.schema import (
    CANDIDATE_ORIGINS,
    EXPERIMENT_STATUSES,
    METRIC_KINDS,
    METRIC_SCOPES,
    RUN_STAGES,
    RUN_STATUSES,
)
from dse.records.store import (
    FINAL_RUN_STATUSES,
    MetricIn,
    Store,
    canonical_json,
    content_hash,
)

__all__ = [
    "CANDIDATE_ORIGINS",
    "EXPERIMENT_STATUSES",
    "FINAL_RUN_STATUSES",
    "METRIC_KINDS",
    "METRIC_SCOPES",
    "RUN_STAGES",
    "RUN_STATUSES",
    "MetricIn",
    "Store",
    "canonical_json",
    "content_hash",
]
