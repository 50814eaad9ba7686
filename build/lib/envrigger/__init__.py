"""envrigger: record agents, diagnose their weaknesses, and reshape environments to target them."""

__version__ = "0.1.0"
