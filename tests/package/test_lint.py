"""Lint and import order: ``ruff check`` (configured in pyproject.toml's ``[tool.ruff]``) reports
nothing on the repository. Skips, saying so, where ruff is not installed (``pip install ruff``;
the ``test`` extra pins it)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (pip install ruff)")
def test_ruff_reports_nothing():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
