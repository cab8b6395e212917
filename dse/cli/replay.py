"""`dse replay r<ID>`: run a recorded emulator run again from its stored inputs and say
whether it reproduces bit for bit (`dse.runner.replay.replay`); exit 0 when it does, 1 when
it does not (naming what differs), 2 when the run stored no inputs."""

from __future__ import annotations

import json
import re

from ..errors import InputError
from .common import add_db_argument, open_store

_RUN = re.compile(r"r(?:un)?(\d+)|(\d+)", re.IGNORECASE)


def cmd_replay(args) -> int:
    from ..runner.replay import replay

    match = _RUN.fullmatch(args.run.strip())
    if not match:
        raise InputError("(command line)", "RUN", args.run, "a run id: r<ID> (as `dse show` lists them) or <ID>")
    run_id = int(match.group(1) or match.group(2))
    with open_store(args.db) as store:
        store.run_row(run_id)  # RecordNotFound (bad input) for a run the store lacks
        got = replay(store, run_id)
    if args.json:
        print(json.dumps({"run": got.run_id, "reproduced": got.reproduced, "differing": got.differing,
                          "digests": got.digests, "recorded": got.recorded, "outputs": got.outputs,
                          "cycles": got.cycles}, indent=2))
    else:
        print(got.line())
        for name in ("program_sha256", "dram_image_sha256", "weights_sha256"):
            was, now = got.recorded.get(name), got.digests.get(name)
            mark = "equal" if was == now else ("not recorded" if was is None else "DIFFERS")
            print(f"  {name:<18} {now}  ({mark}{'' if was in (None, now) else f'; recorded {was}'})")
    return 0 if got.reproduced else 1


def register(sub) -> None:
    rep = sub.add_parser("replay", help="re-emulate a recorded run from its stored inputs: bit for bit or not")
    rep.add_argument("run", metavar="RUN", help="the run: r<ID>")
    add_db_argument(rep)
    rep.add_argument("--json", action="store_true", help="print the result as JSON")
    rep.set_defaults(func=cmd_replay)
