"""Bank lifetimes of a lowered program: which virtual bank holds which tensor, from when to
when, in program order. One function (`bank_lifetimes`) gives the rows every view shows:
`dse show c<ID> --banks` (text), the report and the UI candidate page (a chart).

A private virtual bank lives from its MSET (alloc) to its MSET free on its core (or to
the end of the program); what it holds is read off the instructions between: the DRAM
buffers its MVINs load (graph tensors, Bt tiles, packed operands, im2col buffers) and the
ones its MVOUTs store. A shared-memory bank (ids from the chip's first shared bank) is
never allocated: it lives from its first MVIN to its last use.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from emulator.isa import Mset, Mvin, Mvout

BANK_OPERANDS = ("a", "b", "c", "src", "dst", "scales")  # the fields of a Ball op that name banks


@dataclass
class BankLife:
    core: int
    bank: int  # the virtual bank id
    op: str  # the graph op that allocated it (or loaded a shared bank first)
    start: int  # program counter of its MSET (a shared bank: its first MVIN)
    end: int  # program counter of its free (exclusive: the program's length when never freed)
    banks: int  # physical banks it spans (MSET col)
    shared: bool = False
    loads: list[str] = field(default_factory=list)  # DRAM buffers its MVINs read, in order of first load
    stores: list[str] = field(default_factory=list)  # DRAM buffers its MVOUTs write
    transfers: int = 0  # MVINs and MVOUTs
    used: bool = False  # read or written by a Ball op

    @property
    def holds(self) -> str:
        """What it holds, in a few words: its loads and stores (`in` and `out`)."""
        parts = []
        if self.loads:
            parts.append("in " + ", ".join(self.loads))
        if self.stores:
            parts.append("out " + ", ".join(self.stores))
        return "; ".join(parts) or ("(computed in place)" if self.used else "(not used: a spare buffer)")

    def to_dict(self) -> dict:
        return {"core": self.core, "bank": self.bank, "op": self.op, "start": self.start, "end": self.end,
                "banks": self.banks, "shared": self.shared, "loads": self.loads, "stores": self.stores,
                "transfers": self.transfers, "holds": self.holds}


class _Buffers:
    """DRAM address -> the name of the buffer holding it (the nearest buffer at or below)."""

    def __init__(self, buffers: list[tuple[int, int, str]]):
        self._items = sorted(buffers)
        self._starts = [a for a, _, _ in self._items]

    def name(self, addr: int) -> str:
        i = bisect.bisect_right(self._starts, addr) - 1
        while i >= 0:
            start, nbytes, name = self._items[i]
            if start <= addr < start + max(nbytes, 1):
                return name
            i -= 1
        return f"@{addr:#x}"


def bank_lifetimes(program, labels: dict[int, str], buffers: list[tuple[int, int, str]],
                   first_shared_bank: int | None = None) -> list[BankLife]:
    """Every virtual bank's lifetime in `program`, core by core in program order.
    `labels`: id of an instruction -> its op (`Lowered.labels`); `buffers`: the named DRAM
    buffers, (addr, bytes, name) (`Emitted.buffers`); `first_shared_bank`: the chip's first
    shared-memory bank id (None: no shared memory)."""
    names = _Buffers(buffers)
    out: list[BankLife] = []
    for core, instrs in enumerate(program.cores):
        live: dict[int, BankLife] = {}
        shared: dict[int, BankLife] = {}
        for pc, ins in enumerate(instrs):
            kind = type(ins)
            if kind is Mset:
                if ins.alloc:
                    live[ins.bank] = BankLife(core, ins.bank, labels.get(id(ins), "?"), pc, len(instrs), ins.col)
                elif ins.bank in live:
                    life = live.pop(ins.bank)
                    life.end = pc
                    out.append(life)
            elif kind is Mvin or kind is Mvout:
                life = live.get(ins.bank)
                if life is None and first_shared_bank is not None and ins.bank >= first_shared_bank:
                    life = shared.get(ins.bank)
                    if life is None:
                        life = shared[ins.bank] = BankLife(core, ins.bank, labels.get(id(ins), "?"), pc, pc + 1, 1,
                                                           shared=True)
                    life.end = pc + 1
                if life is None:
                    continue
                life.transfers += 1
                names_of = life.loads if kind is Mvin else life.stores
                name = names.name(ins.addr)
                if name not in names_of:
                    names_of.append(name)
            elif kind is not Mset:
                for attr in BANK_OPERANDS:
                    bank = getattr(ins, attr, None)
                    if type(bank) is int:
                        if bank in live:
                            live[bank].used = True
                        elif bank in shared:  # a shared operand lives until its last read
                            shared[bank].used, shared[bank].end = True, pc + 1
        out += live.values()  # never freed: to the end of the program
        out += shared.values()
    return sorted(out, key=lambda life: (life.core, life.start, life.bank))


def lifetimes_text(lives: list[BankLife]) -> str:
    """The lifetimes as text: per core, one line a bank with a bar over program order."""
    if not lives:
        return "(no bank is allocated: every op runs on the core)"
    lines = []
    for core in sorted({life.core for life in lives}):
        mine = [life for life in lives if life.core == core]
        span = max(life.end for life in mine) or 1
        width = 40
        lines.append(f"core {core}: {len(mine)} bank lifetime(s) over instructions 0..{span}")
        op_w = max(len(life.op) for life in mine)
        for life in mine:
            lo = int(life.start * width / span)
            hi = max(lo + 1, int(round(life.end * width / span)))
            bar = " " * lo + "#" * (hi - lo) + " " * (width - hi)
            what = ("shared " if life.shared else "") + f"bank {life.bank:>2} x{life.banks}"
            lines.append(f"  {what}  [{bar}]  pc {life.start:>6}-{life.end:<6}  {life.op:<{op_w}}  {life.holds}")
    return "\n".join(lines)


__all__ = ["BankLife", "bank_lifetimes", "lifetimes_text"]
