"""The agent's browser page, shipped in the wheel as package data (`agent/server.py` serves it)."""

from pathlib import Path

WEB_DIR = Path(__file__).resolve().parent
