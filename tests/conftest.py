"""Make the repository root importable so tests use this checkout's packages (not PyPI namesakes)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_configure(config):
    # Fails the session, naming the leftover, if a test leaves a process pool, a worker process or
    # a non-daemon thread alive; SIGUSR1 prints every thread's stack (tests/hang_guard.py).
    import hang_guard

    if not config.pluginmanager.is_registered(hang_guard):
        config.pluginmanager.register(hang_guard, "hang_guard")
