import os
import sys

try:
    from .cli import EXIT_INTERRUPT, main
except KeyboardInterrupt:  # a Ctrl-C while the CLI itself is being imported
    print("dse: interrupted; rerun to resume (what finished is recorded)", file=sys.stderr)
    sys.exit(130)

code = main()
if code == EXIT_INTERRUPT:
    # A Ctrl-C that landed in code run through PyRun_* (pybind11's py::exec, as torch's
    # import runs it) leaves CPython's "unhandled KeyboardInterrupt" flag set even though
    # dse handled it, and the interpreter would then end by SIGINT instead of this exit
    # code; what finished is recorded and the pools are closed: leave with 130 now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
