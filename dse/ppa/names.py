"""The names of what a candidate costs: its components and what one instance of each is. Plain data, no import of the emulator or CACTI: the report, `dse compare` and the
record store read them without loading the cost model."""

from __future__ import annotations

# The components, in the order every view lists them.
# The Balls: the arrays, priced a MAC, and the lane Balls, priced a busy cycle.
ARRAY_BALLS = ("matrix", "vecmatmul")
LANE_BALLS = ("im2col", "transpose", "relu", "fp2int", "int2fp", "mxfp2int")
BALLS = ARRAY_BALLS + LANE_BALLS
COMPONENTS = ("private_sram", "shared_sram", "cache", *BALLS, "cores", "dma", "dram")
# What one instance of each component is.
INSTANCE = {
    "private_sram": "one private bank", "shared_sram": "one shared-memory bank a tile holds",
    "cache": "a tile's cache", **{kind: "one core's Ball" for kind in BALLS}, "cores": "one scalar core",
    "dma": "one core's DMA engine (the system bus once a chip)", "dram": "the DRAM interface (once a chip)",
}


__all__ = ["ARRAY_BALLS", "BALLS", "COMPONENTS", "INSTANCE", "LANE_BALLS"]
