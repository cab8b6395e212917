"""The values of the record store's enumerated columns (plain strings, checked in Python;
see schema.py), in a module of their own: the light reads (`dse.records.light`) need them
without SQLAlchemy."""

EXPERIMENT_STATUSES = ("proposed", "testing", "confirmed", "refuted")
CANDIDATE_ORIGINS = ("baseline", "grid", "sampler", "hand")
RUN_STAGES = ("analytical", "emulator", "numerics", "imported")
RUN_STATUSES = ("running", "ok", "infeasible", "pruned", "failed", "crashed")
METRIC_KINDS = (
    "source_counts",
    "analytical",
    "emulator_cycles",
    "emulator_host_time",
    "rtl_cycles",
    "fpga_cycles",
    "synth_area",
    "power",
    "numerics",
)
# "output": one graph output of the numerics check (its key the model's name: logits, k_cache)
# ball, bank, dma, bus: the emulator's counters by Ball, bank, DMA engine and system bus;
# phase: the emulator stage's host time by phase (lowering, the emulator's own passes, checks).
METRIC_SCOPES = ("total", "op", "core", "ball", "bank", "component", "dma", "bus", "phase", "output")
# Evidence that comes from outside dse (`dse evidence import`): always its own kind.
# synth_area and power: a synthesis / power report's figures by component (mm2, mW).
IMPORTED_METRIC_KINDS = ("rtl_cycles", "fpga_cycles", "synth_area", "power")
# 0007: a decision is a person's (it alone sets the hypothesis' status) or the sweep's
# proposal (a verdict the evidence suggests, which waits for a person).
DECISION_KINDS = ("decision", "proposal")
# What a note adds to an experiment after the fact (`dse note`). "lesson": a lesson or
# reusable method (`dse lesson TEXT --from EXP ...`), one row per experiment it came from,
# written together (one text, author and time: `dse.records.lessons` groups them).
NOTE_KINDS = ("limitation", "open_question", "note", "lesson")
# 0008: how an experiment builds on an earlier one (its spec's `follows` / `reopens`).
LINK_RELATIONS = ("follows", "reopens")
ARTIFACT_ROLES = ("graph_dump", "trace", "outputs", "report", "log", "inputs", "measurements")
# What a calibration is fitted to: cycles (the model's constants) or, per component, a
# synthesis report's area or a power report's power (area / energy scale factors).
CYCLE_CALIBRATION_SOURCES = ("emulator_cycles", "rtl_cycles", "fpga_cycles")
PPA_CALIBRATION_SOURCES = ("synth_area", "power")
CALIBRATION_SOURCES = CYCLE_CALIBRATION_SOURCES + PPA_CALIBRATION_SOURCES
