"""dse.records: the record store (what was tried, why, what was seen, what was decided).

    from dse.records import Store
    with Store("records.db") as store:          # or Store("postgresql://user@host/db")
        store.experiments()

See store.py for the API, evidence.py for imported RTL/FPGA evidence, export.py for
CSV and Parquet export.
"""

from dse.lazy import lazy_attributes

# Names load on first use: a light submodule (`dse.records.recorded`, the rerun shortcut's
# read; `dse.records.light`, `dse history`'s) is importable without SQLAlchemy, its ORM and pandas.
_SOURCES = {
    "choices": ("ARTIFACT_ROLES", "CANDIDATE_ORIGINS", "EXPERIMENT_STATUSES", "IMPORTED_METRIC_KINDS",
                "METRIC_KINDS", "METRIC_SCOPES", "RUN_STAGES", "RUN_STATUSES"),
    "not_found": ("RecordNotFound",),
    "store": ("FINAL_RUN_STATUSES", "ArtifactRef", "ImportedEvidence", "MetricIn", "MetricRow", "Store", "StoreBusy",
              "canonical_json", "content_hash", "database_url"),
}
__getattr__ = lazy_attributes(__name__, _SOURCES)

__all__ = [
    "ARTIFACT_ROLES",
    "CANDIDATE_ORIGINS",
    "EXPERIMENT_STATUSES",
    "FINAL_RUN_STATUSES",
    "IMPORTED_METRIC_KINDS",
    "METRIC_KINDS",
    "METRIC_SCOPES",
    "RUN_STAGES",
    "RUN_STATUSES",
    "ArtifactRef",
    "ImportedEvidence",
    "MetricIn",
    "MetricRow",
    "RecordNotFound",
    "Store",
    "StoreBusy",
    "canonical_json",
    "content_hash",
    "database_url",
]
