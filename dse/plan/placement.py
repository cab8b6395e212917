"""Where a workload's stages run on the chip's cores, and with which hardware: decided here
for the lowering (`dse.lower.lower_placed`) and the model (`dse.analytical.placed`) alike.

A workload is one or more *stages* (an LLM's phases: prefill, decode), each a graph named
by its role. ``mapping.placement``:

* None (SPMD, the default): every stage on cores ``0 .. workers - 1``, one after another,
  each split across all of them. The program is built once with those cores' parameters:
  the chip's, or their core group's (`ChipConfig.group_chip`) when they all belong to one
  group that overrides the chip's hardware; workers that span groups whose hardware
  differs cannot share one program (infeasible, with that reason).
* ``"phase"``: each stage on every core of the group whose role names it, all stages at
  once (`dse.lower.lower_stages`: the cores of a tile meet at every BARRIER, so the stages
  advance op by op in lock step); each stage's program is built from the same source with
  its group's own parameters (banks, Balls, core-op costs).
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.chip import ChipConfig

from .units import too_many_workers

PLACEMENTS = ("phase",)


@dataclass(frozen=True)
class Placed:
    """One stage's place: its role, its cores and the chip it is built and costed with."""

    role: str
    cores: tuple[int, ...]
    chip: ChipConfig


def cores_chip(chip: ChipConfig, cores) -> tuple[ChipConfig, str]:
    """The chip one program split across `cores` is built with, and '' (or the chip and
    the reason no one program fits them): the chip's own parameters, or their core group's
    when they all belong to one group that overrides the chip's hardware."""
    cores = list(cores)
    groups = sorted({chip.cores.group_of(c) for c in cores} - {None})
    if not any(chip.cores.groups[g].overrides for g in groups):
        return chip, ""
    if len(groups) == 1:
        return chip.group_chip(groups[0]), ""
    roles = ", ".join(chip.cores.groups[g].role for g in groups)
    first = chip.cores.groups[0].count
    return chip, (f"{len(cores)} workers span core groups {roles} of chip {chip.name}, whose hardware differs: "
                  f"one SPMD program is built for one group's parameters; allowed: at most {first} workers, "
                  f"or mapping.placement = \"phase\"")


def spmd_chip(chip: ChipConfig, workers: int) -> tuple[ChipConfig, str]:
    """`cores_chip` of cores ``0 .. workers - 1``."""
    if workers > chip.cores.count:
        return chip, too_many_workers(workers, chip.name, chip.cores.count)
    return cores_chip(chip, range(workers))


def place(chip: ChipConfig, placement: str | None, workers: int, roles: list[str]) -> tuple[list[Placed], str]:
    """Each stage's place (`roles`: the stages' roles, in order), and '' (or the reason the
    placement cannot be made, with no places)."""
    if placement is None:
        spmd, reason = spmd_chip(chip, workers)
        if reason:
            return [], reason
        return [Placed(role, tuple(range(workers)), spmd) for role in roles], ""
    if placement != "phase":
        raise ValueError(f"placement must be None or one of {PLACEMENTS}, got {placement!r}")
    have = [g.role for g in chip.cores.groups]
    places = []
    for role in roles:
        i = chip.group_index(role)
        if i is None:
            return [], (f"placement \"phase\" puts stage {role!r} on the core group of that role, but chip "
                        f"{chip.name} has " + (f"groups {', '.join(have)}" if have else "no core groups"))
        places.append(Placed(role, tuple(chip.cores.group_cores(i)), chip.group_chip(i)))
    return places, ""


def stage_reason(placed: Placed, reason: str) -> str:
    """A stage's infeasible reason, naming the stage, its cores and its chip."""
    cores = placed.cores
    span = f"{cores[0]}" if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"
    return f"stage {placed.role} on cores {span} ({placed.chip.name}): {reason}"


__all__ = ["PLACEMENTS", "Placed", "cores_chip", "place", "spmd_chip", "stage_reason"]
