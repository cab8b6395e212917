"""The total metrics a spec may name in objectives and acceptance expressions.

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
