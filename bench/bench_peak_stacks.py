"""Where a command's memory peaks: an RSS sampler with stacks. The command runs in this
process (`-m module args...`, as `python -m` would run it); a thread reads VmRSS every
--interval seconds and, at each new high, the main thread's Python stack. At the end:
the peak, its stack, and the highest RSS seen under each of the run's phases (the
innermost frame of dse, emulator or a recipe, by function) in the order they first ran.

    .venv/bin/python bench/bench_peak_stacks.py [--interval 0.02] -m dse emulate --chip goban \
        --recipe llama_prefill --param seq=1024 ...

The sampler sees what the kernel sees (RSS, not Python objects); a peak between two samples
shows as the one before it. Not run by the tests.
"""

from __future__ import annotations

import argparse
import runpy
import sys
import threading
import time
import traceback
from pathlib import Path

OURS = ("/dse/", "/emulator/", "/recipes/", "/bench/")


def rss_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e9
    return 0.0


def our_frames(frame) -> list[str]:
    """The stack's frames in this repository's code, outermost first, as file:line function."""
    out = []
    for f in traceback.extract_stack(frame):
        if any(part in f.filename for part in OURS) and not f.filename.endswith("bench_peak_stacks.py"):
            out.append(f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno} {f.name}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=0.02)
    ap.add_argument("--depth", type=int, default=14, help="frames shown of the peak's stack")
    ap.add_argument("-m", dest="module", required=True)
    args, rest = ap.parse_known_args()
    main_id = threading.get_ident()
    state = {"peak": 0.0, "stack": [], "phases": {}, "done": False}
    start = time.perf_counter()

    def sample() -> None:
        while not state["done"]:
            rss = rss_gb()
            frame = sys._current_frames().get(main_id)
            if frame is not None:
                stack = our_frames(frame)
                phase = " > ".join(s.split(" ", 1)[1] for s in stack[-3:]) or "(outside)"
                seen = state["phases"].setdefault(phase, [rss, time.perf_counter() - start, 0.0])
                seen[0] = max(seen[0], rss)
                seen[2] += args.interval
                if rss > state["peak"]:
                    state["peak"], state["stack"], state["at"] = rss, stack, time.perf_counter() - start
            time.sleep(args.interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    sys.argv = [args.module, *rest]
    code = 0
    try:
        runpy.run_module(args.module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        state["done"] = True
        thread.join()
    print(f"\npeak RSS {state['peak']:.2f} GB at {state.get('at', 0):.1f} s (exit {code}); its stack:")
    for line in state["stack"][-args.depth:]:
        print(f"    {line}")
    print(f"{'highest RSS GB':>14} {'from s':>7} {'~s in':>6}  phase (innermost frames)")
    for phase, (high, first, spent) in sorted(state["phases"].items(), key=lambda kv: kv[1][1]):
        if spent >= 0.2 or high >= 0.8 * state["peak"]:
            print(f"{high:14.2f} {first:7.1f} {spent:6.1f}  {phase[-150:]}")
    sys.exit(code)


if __name__ == "__main__":
    main()
