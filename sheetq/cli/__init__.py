"""The command-line interface: a thin layer over the library (one module per command group)."""
