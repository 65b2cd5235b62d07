"""exo: run a team of AI coding agents on one git repository."""

__version__ = "0.1.0"
