"""Shared test setup: markers skip what the machine cannot run (Java for `tlc`,
CUDA for `gpu`), and a hypothesis profile sized for 2-core CI machines."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("KVSM_HYPOTHESIS_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("ci")


def _has_cuda() -> bool:
    try:
        import torch  # noqa: PLC0415

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    no_java = shutil.which("java") is None
    no_cuda = None
    for item in items:
        # markers, not keywords: keywords also hold folder names (this checkout may sit in
        # a folder named "gpu")
        if item.get_closest_marker("tlc") is not None and no_java:
            item.add_marker(pytest.mark.skip(reason="needs Java for TLC (apt-get install default-jre-headless)"))
        if item.get_closest_marker("gpu") is not None:
            if no_cuda is None:
                no_cuda = not _has_cuda()
            if no_cuda:
                item.add_marker(pytest.mark.skip(reason="needs CUDA"))


@pytest.fixture(scope="session")
def small_graph():
    """The Python model's whole graph of the `small` config (the `ci` TLC model's
    constants: 224,863 states), explored once with every invariant checked in each
    state: tests/test_explore.py reads it and tests/test_conform.py compares it with
    TLC's (about a minute and a half of exploring, shared)."""
    from kvsm.config import load_config
    from kvsm.explore import explore

    return explore(load_config("small"), check=True)
