"""Khuluma: a Vulavula-compatible language, search and speech API on Ray Serve."""

__version__ = "0.1.0"
RELEASE_NAME = "Ubuntu"
RELEASE_DATE = "2026-11-22"
