"""Fixtures for the dashboard tests: the app built by `make_app` over `RecordedBackend`.

The recording (tests/dashboard/recorded, provenance in its README) replaces the network; nothing of
our own code is mocked.
"""

from __future__ import annotations

import pytest

from launcher.dashboard import DashboardApp, make_app
from launcher.dashboard.recorded import RecordedBackend
from tests.dashboard.helpers import RECORDED_NOW, RECORDING


@pytest.fixture
def backend() -> RecordedBackend:
    return RecordedBackend(RECORDING)


@pytest.fixture
def app(backend: RecordedBackend) -> DashboardApp:
    return make_app(backend, refresh_s=0.1, max_backoff_s=0.2, clock=lambda: RECORDED_NOW)
