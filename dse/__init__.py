"""dse: design-space exploration workbench for Buckyball-family accelerators."""

__version__ = "0.1.0"
