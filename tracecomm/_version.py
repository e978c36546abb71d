"""The version, below every layer (the package root sits above them all)."""

__version__ = "0.1.0"
