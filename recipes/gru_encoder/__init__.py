"""GRU encoder recipe: a recurrence over 32 steps, one scan op on the chip."""
