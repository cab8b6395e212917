"""The names of what a candidate costs: its components and the actions each is charged
for. Plain data, no import of the emulator or CACTI: the report, `dse compare` and the
record store read them without loading the cost model."""

from __future__ import annotations

# The components, in the order every view lists them.
COMPONENTS = ("private_sram", "shared_sram", "cache", "matrix", "vecmatmul", "im2col", "transpose", "relu", "fp2int",
              "int2fp", "mxfp2int", "cores", "dma", "dram")
BALLS = ("matrix", "vecmatmul", "im2col", "transpose", "relu", "fp2int", "int2fp", "mxfp2int")
# The actions each component is charged for, and the unit one action is counted in.
ACTIONS: dict[str, dict[str, str]] = {
    "private_sram": {"read": "row", "write": "row"},
    "shared_sram": {"read": "row", "write": "row"},
    "cache": {},
    "matrix": {"mac": "MAC"},
    "vecmatmul": {"mac": "MAC"},
    **{kind: {"busy_cycle": "cycle"} for kind in ("im2col", "transpose", "relu", "fp2int", "int2fp", "mxfp2int")},
    "cores": {"active_cycle": "cycle", "idle_cycle": "cycle"},
    "dma": {"byte": "byte"},
    "dram": {"byte": "byte"},
}
# What one instance of each component is.
INSTANCE = {
    "private_sram": "one private bank", "shared_sram": "one shared-memory bank a tile holds",
    "cache": "a tile's cache", **{kind: "one core's Ball" for kind in BALLS}, "cores": "one scalar core",
    "dma": "one core's DMA engine (the system bus once a chip)", "dram": "the DRAM interface (once a chip)",
}


__all__ = ["ACTIONS", "BALLS", "COMPONENTS", "INSTANCE"]
