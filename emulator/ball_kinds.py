"""The Ball kinds, each with the variables its latency formula may use (HARDWARE.md, the
emulator's own table), in the order every view lists them: the arrays (priced a MAC), then
the stream Balls (priced a busy cycle). Plain data, no import: the chip schema
(`emulator.chip`) and the cost names (`dse.ppa.names`) both read it, so a new Ball's kind is
one entry here."""

ARRAY_BALLS: dict[str, frozenset[str]] = {
    "matrix": frozenset({"M", "N", "K", "rows", "cols"}),
    "vecmatmul": frozenset({"K", "rows", "cols"}),
}
STREAM_BALLS: dict[str, frozenset[str]] = {
    "im2col": frozenset({"out", "k"}),
    "transpose": frozenset({"iter", "bits"}),
    "relu": frozenset({"iter"}),
    "fp2int": frozenset({"iter"}),
    "int2fp": frozenset({"iter"}),
    "mxfp2int": frozenset({"iter"}),
}
LATENCY_VARIABLES: dict[str, frozenset[str]] = {**ARRAY_BALLS, **STREAM_BALLS}

__all__ = ["ARRAY_BALLS", "LATENCY_VARIABLES", "STREAM_BALLS"]
