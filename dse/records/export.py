"""`dse export`: an experiment's records as flat files (CSV or Parquet), one per table.

    experiment   one row: hypothesis, status, acceptance (JSON), workload identity, spec, ...
    candidates   one row per candidate: hash, origin, config/mapping/diff (JSON), latest status
    runs         one row per run: stage, status, error, provenance, versions
    metrics      long form, one row per metric with its kind, unit and scope; kinds are
                 never merged into one column
    decisions    verdicts with rationale, author and evidence run ids
    artifacts    evidence files: role, media type, sha256, size, original name, path, and
                 `evidence`: the file re-hashed now (ok, missing, altered, refused)

Each file is written to a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd

from dse.identity import canonical_json
from dse.records.blobs import EvidenceCheck

EXPORT_FORMATS = ("csv", "parquet")
EXPORT_TABLES = ("experiment", "candidates", "runs", "metrics", "decisions", "artifacts")


def export_tables(store, experiment: str | int) -> tuple[dict[str, pd.DataFrame], EvidenceCheck]:
    """The experiment's tables as DataFrames (JSON columns as canonical JSON text), and the
    check of its evidence files (each re-hashed; the artifacts table says what each is)."""
    record = store.experiment(experiment)
    experiment_id = record["id"]
    row = {k: (canonical_json(v) if isinstance(v, (list, dict)) else v) for k, v in record.items()}
    head = pd.DataFrame([row])
    head["created_at"] = pd.to_datetime(head["created_at"], utc=True)
    head["baseline_candidate_id"] = head["baseline_candidate_id"].astype("Int64")
    artifacts = store.artifacts(experiment_id)
    check = store.check_evidence(experiment_id)
    artifacts["evidence"] = [check.state_of(sha) for sha in artifacts["sha256"]]
    return {
        "experiment": head,
        "candidates": store.candidates(experiment_id),
        "runs": store.runs(experiment_id),
        "metrics": store.metrics(experiment_id),
        "decisions": store.decisions(experiment_id),
        "artifacts": artifacts,
    }, check


def export_experiment(store, experiment: str | int, out_dir: str | os.PathLike[str],
                      fmt: str = "csv") -> tuple[list[Path], EvidenceCheck]:  # fmt: skip
    """Write one file per table into `out_dir`; return their paths and the check of the
    evidence files (the caller says which are bad)."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"export format: got {fmt!r}; allowed: {', '.join(EXPORT_FORMATS)}")
    tables, check = export_tables(store, experiment)  # every read first: a bad name writes nothing
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in EXPORT_TABLES:
        path = out / f"{name}.{fmt}"
        _write_atomically(tables[name], path, fmt)
        paths.append(path)
    return paths, check


def _write_atomically(frame: pd.DataFrame, path: Path, fmt: str) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        if fmt == "csv":
            frame.to_csv(temp, index=False)
        else:
            _for_parquet(frame).to_parquet(temp, index=False, engine="pyarrow")
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def _for_parquet(frame: pd.DataFrame) -> pd.DataFrame:
    # A column of Python objects must be one type for Arrow: text (None stays null).
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object:
            frame[column] = frame[column].map(_text)
    return frame


def _text(value: object) -> str | None:
    if isinstance(value, str) or value is None:
        return value
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):  # a list or dict: not a missing value
        pass
    return str(value)
