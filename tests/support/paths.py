"""Where things are, for every test module wherever it sits in ``tests/``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"
FAKE_AGENTS = TESTS / "support" / "fake_agents"
INTEROP = TESTS / "interop"
PACKAGE = ROOT / "permclient"
