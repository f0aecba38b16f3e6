"""Shared fixtures: a temporary workspace and hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# CI gets a fixed, derandomised budget so runs are repeatable and bounded;
# locally, HYPOTHESIS_PROFILE=long explores more.
settings.register_profile(
    "ci",
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace directory inside the test's temporary directory."""
    root = tmp_path / "ws"
    root.mkdir()
    return root
