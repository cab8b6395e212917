"""`dse evidence import`: measurements made outside dse (RTL simulation, FPGA) into the store."""

from __future__ import annotations

import shlex

from ..errors import InputError
from .common import add_db_argument, open_store


def cmd_evidence_import(args) -> int:
    from ..records import IMPORTED_METRIC_KINDS
    from ..records.evidence import FORMATS

    if args.kind not in IMPORTED_METRIC_KINDS:
        raise InputError(args.file, "--kind", args.kind,
                         f"{', '.join(IMPORTED_METRIC_KINDS)} (evidence from outside dse)")  # fmt: skip
    if args.format not in FORMATS:
        raise InputError(args.file, "--format", args.format, ", ".join(FORMATS))
    digits = args.candidate.strip().lstrip("cC")
    if not digits.isdigit():
        raise InputError(args.file, "--candidate", args.candidate, "a candidate id (a whole number)")
    command = " ".join(
        ["dse", "evidence", "import", "--kind", args.kind, shlex.quote(args.file),
         "--candidate", digits, "--format", args.format]
        + (["--note", shlex.quote(args.note)] if args.note else [])
    )  # fmt: skip
    with open_store(args.db) as store:
        done = store.import_evidence(int(digits), args.kind, args.file, fmt=args.format,
                                     note=args.note, command=command)  # fmt: skip
        experiment = store.experiment(done.experiment_id)["name"]
    details = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in done.summary.items())
    print(f"run {done.run_id}: {done.n_metrics} {done.kind} metrics from {done.format} ({details}) "
          f"for candidate {done.candidate_id} of experiment '{experiment}'")  # fmt: skip
    print(f"raw file kept as {done.artifact.path} (sha256 {done.artifact.sha256[:16]}…, "
          f"{done.artifact.size} bytes)")  # fmt: skip
    return 0


def register(sub) -> None:
    evidence = sub.add_parser("evidence", help="import evidence made outside dse (RTL, FPGA cycles)")
    esub = evidence.add_subparsers(dest="action", required=True)
    imp = esub.add_parser(
        "import", help="RTL pmctrace NDJSON or a CSV of measurements, as metrics of a candidate",
        description="Record outside measurements for a candidate as one 'imported' run. The "
                    "figures keep their own kind (rtl_cycles, fpga_cycles) and are never merged "
                    "with emulator cycles; the raw file is kept beside the store.",
    )  # fmt: skip
    imp.add_argument("file", metavar="FILE", help="pmctrace NDJSON (bdb.ndjson) or CSV: name,value[,unit,scope,scope_key]")
    imp.add_argument("--kind", required=True, help="rtl_cycles or fpga_cycles")
    imp.add_argument("--candidate", required=True, metavar="ID", help="candidate id the evidence is of")
    imp.add_argument("--format", default="auto", help="auto (default: by extension, then content), pmctrace or csv")
    imp.add_argument("--note", help="where the evidence came from (tool, version, board), kept with the run")
    add_db_argument(imp)
    imp.set_defaults(func=cmd_evidence_import)
