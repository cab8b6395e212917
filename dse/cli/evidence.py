"""`dse evidence import`: measurements made outside dse (RTL simulation, FPGA, a synthesis
or power report by component) into the store; `dse evidence get`: one stored evidence file,
re-hashed as it is read; `dse evidence verify`: every file of the store re-hashed; `dse
evidence gc`: the files no record names any more (those of deleted experiments)."""

from __future__ import annotations

import shlex

from ..errors import InputError
from .common import add_db_argument, evidence_verdict, open_store


def cmd_evidence_import(args) -> int:
    from ..records import IMPORTED_METRIC_KINDS
    from ..records.evidence import formats_for

    if args.kind not in IMPORTED_METRIC_KINDS:
        raise InputError(args.file, "--kind", args.kind,
                         f"{', '.join(IMPORTED_METRIC_KINDS)} (evidence from outside dse)")  # fmt: skip
    formats = formats_for(args.kind)
    if args.format not in formats:
        raise InputError(args.file, "--format", args.format, f"{', '.join(formats)} (for --kind {args.kind})")
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


def cmd_evidence_get(args) -> int:
    import shutil
    import sys
    from pathlib import Path

    digits = str(args.artifact).strip().lstrip("aA").lstrip(":#")
    if not digits.isdigit():
        raise InputError("dse evidence get", "ARTIFACT", args.artifact, "an artifact id (as `dse show r<ID>` lists)")
    from ..records.blobs import open_verified

    with open_store(args.db) as store:
        row = store.artifact(int(digits))
        if store.evidence_dir is None:
            raise InputError(store.url, "--db", store.url, "a store with an evidence folder")
        source = open_verified(store.evidence_dir, row["sha256"])  # re-hashed: an EvidenceError names a bad file
    with source:
        if args.out is None:
            sys.stdout.flush()
            shutil.copyfileobj(source, sys.stdout.buffer)
            sys.stdout.buffer.flush()
            return 0
        out = Path(args.out)
        if out.is_dir():
            out = out / Path(row["name"] or row["sha256"]).name
        temp = out.with_name(f".{out.name}.incoming")
        try:
            with open(temp, "wb") as sink:
                shutil.copyfileobj(source, sink)
            temp.replace(out)  # nothing half-written under the name asked for
        except OSError as error:
            temp.unlink(missing_ok=True)
            raise InputError(args.out, "--out", args.out, f"a writable file or folder ({error.strerror or error})") from None
    print(f"artifact {digits} ({row['role']}, {row['size']} bytes, sha256 {row['sha256'][:16]}…) -> {out}")
    return 0


def cmd_evidence_gc(args) -> int:
    with open_store(args.db) as store:
        done = store.collect_evidence_garbage(dry_run=args.dry_run)
        where = store.evidence_dir
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {done.files} evidence files ({done.bytes:,} bytes) no record names, in {where}")
    if done.recovered:
        print(f"{'would put' if args.dry_run else 'put'} {done.recovered} files of interrupted writes in place "
              "(their rows name them)")
    if done.foreign:
        print(f"left {done.foreign} files and folders dse did not write (not named by their sha256)")
    return 0


def cmd_evidence_verify(args) -> int:
    with open_store(args.db) as store:
        check = store.check_evidence()
        where = store.evidence_dir
    for line in check.lines():
        print(line)
    print(f"{check.summary()} (named by {sum(map(len, check.artifacts.values()))} artifact rows, in {where})")
    return evidence_verdict(check)


def register(sub) -> None:
    evidence = sub.add_parser("evidence", help="evidence files: import outside measurements, fetch one, verify all, collect garbage")
    esub = evidence.add_subparsers(dest="action", required=True)
    imp = esub.add_parser(
        "import", help="RTL pmctrace NDJSON, a CSV of measurements, or a component table (area, power), "
                       "as metrics of a candidate",
        description="Record outside measurements for a candidate as one 'imported' run. The "
                    "figures keep their own kind (rtl_cycles, fpga_cycles, synth_area, power) and are "
                    "never merged with dse's own; the raw file is kept beside the store. synth_area "
                    "and power take a table by component (`dse chips costs` names them): a CSV "
                    "component,value[,unit] or a JSON object {component: value}, in mm2 (synth_area) "
                    "or the average power over the candidate's run in mW (power); a 'total' row may "
                    "give the whole design's.",
    )  # fmt: skip
    imp.add_argument("file", metavar="FILE", help="pmctrace NDJSON (bdb.ndjson) or CSV: name,value[,unit,scope,scope_key]; "
                                                  "synth_area / power: CSV component,value[,unit] or JSON {component: value}")
    imp.add_argument("--kind", required=True, help="rtl_cycles, fpga_cycles, synth_area (mm2 by component) or "
                                                   "power (mW by component)")
    imp.add_argument("--candidate", required=True, metavar="ID", help="candidate id the evidence is of")
    imp.add_argument("--format", default="auto", help="auto (default: by extension, then content), pmctrace or csv; "
                                                      "csv or json for synth_area and power")
    imp.add_argument("--note", help="where the evidence came from (tool, version, board), kept with the run")
    add_db_argument(imp)
    imp.set_defaults(func=cmd_evidence_import)

    get = esub.add_parser("get", help="one stored evidence file (`dse show r<ID>` lists a run's), to stdout or --out")
    get.add_argument("artifact", metavar="ARTIFACT", help="artifact id")
    get.add_argument("--out", help="a file or folder to write it to (default: stdout)")
    add_db_argument(get)
    get.set_defaults(func=cmd_evidence_get)

    verify = esub.add_parser("verify", help="re-hash every evidence file the store names: ok, missing, altered, "
                                             "refused (a link); exit code 2 if any is not ok")
    add_db_argument(verify)
    verify.set_defaults(func=cmd_evidence_verify)

    gc = esub.add_parser("gc", help="remove evidence files no record names (of deleted experiments)")
    gc.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    add_db_argument(gc)
    gc.set_defaults(func=cmd_evidence_gc)
