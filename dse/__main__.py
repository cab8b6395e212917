import sys

try:
    from .cli import main
except KeyboardInterrupt:  # a Ctrl-C while the CLI itself is being imported
    print("dse: interrupted; rerun to resume (what finished is recorded)", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
