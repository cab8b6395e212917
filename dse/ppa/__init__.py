"""What a candidate costs: area, energy and power beside its cycles.

`cacti` prices SRAM (CACTI 7 from zigzag-dse, cached by content), `components` builds a
chip's component table (every figure with its source), `holdings` says what a candidate
holds of its chip, `energy` and `assess` price its activity (the model's or the emulator's:
one function), `calibration` fits per-component factors to synthesis and power reports,
`agreement` checks the model against the emulator. `names` is the plain data the views
read without loading any of it.
"""
