"""The names of what a candidate costs: its components and what one instance of each is.
Plain data, no import of the emulator's models or CACTI (the Balls are `emulator.ball_kinds`'
kinds, plain data too): the report, `dse compare` and the record store read them without
loading the cost model."""

from __future__ import annotations

from emulator import ball_kinds

# The Balls, the emulator's kinds: the arrays, priced a MAC, and the stream Balls, priced a busy cycle.
ARRAY_BALLS = tuple(ball_kinds.ARRAY_BALLS)
STREAM_BALLS = tuple(ball_kinds.STREAM_BALLS)
BALLS = ARRAY_BALLS + STREAM_BALLS
# The components, in the order every view lists them.
COMPONENTS = ("private_sram", "shared_sram", "cache", *BALLS, "cores", "dma", "dram")
# What one instance of each component is.
INSTANCE = {
    "private_sram": "one private bank", "shared_sram": "one shared-memory bank a tile holds",
    "cache": "a tile's cache", **{kind: "one core's Ball" for kind in BALLS}, "cores": "one scalar core",
    "dma": "one core's DMA engine (the system bus once a chip)", "dram": "the DRAM interface (once a chip)",
}


__all__ = ["ARRAY_BALLS", "BALLS", "COMPONENTS", "INSTANCE", "STREAM_BALLS"]
