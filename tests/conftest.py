"""Suite-wide fixtures."""
import multiprocessing.forkserver

import pytest


@pytest.fixture(scope="session", autouse=True)
def _stop_forkserver():
    """The local runtime's fork server (torch preloaded) would otherwise outlive pytest, holding its
    stdout open — a pipe such as `pytest | tee` then never sees EOF."""
    yield
    multiprocessing.forkserver._forkserver._stop()
