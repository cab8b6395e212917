"""Temporal convolution recipe: a dilated conv1d stack (an audio front end)."""
