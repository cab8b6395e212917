"""The total metrics a spec may name in objectives and acceptance expressions, and the
scoped metrics the emulator stage keeps of its counters.

Apart from the spec so that reading them (the report's flags) imports no recipe, torch or
emulator.
"""

METRICS = (
    "latency_cycles", "compute_cycles", "dma_cycles", "core_cycles", "dma_bytes",
    "peak_sram_bytes", "shared_sram_bytes", "private_sram_bytes", "private_sram_per_core_bytes",
    "unaddressable_sram_bytes",
    # what the candidate costs (`dse.ppa`): area, energy and power beside cycles
    "area_mm2", "energy_uj", "leakage_energy_uj", "power_mw", "edp", "inferences_per_joule", "total_sram_bytes",
    "dram_footprint_bytes",
)

# The emulator's counters kept as metrics of each emulator run (kind emulator_cycles), by
# metric scope: (scope, counter names), read by the emulator stage and the report.
COUNTER_SCOPES = {
    "ball": ("ball_ops", "ball_busy_cycles", "ball_macs"),
    "bank": ("rows_read", "rows_written"),
    "dma": ("dma_transfers_in", "dma_transfers_out", "dma_bytes_in", "dma_bytes_out", "dma_bursts",
            "dma_busy_cycles"),
    "bus": ("dma_bus_wait_cycles", "bus_busy_cycles"),
}
# The emulator stage's host time by phase (kind emulator_host_time, scope phase, this name).
HOST_PHASES = ("lowering", "setup", "functional", "timing", "collect", "checks")
HOST_PHASE_METRIC = "host_seconds"
