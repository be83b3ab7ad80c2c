"""One test body, two sizes: the fast size runs in ``make test``, the long one (marked
``reliability``) in ``make test-reliability``."""

from __future__ import annotations

from typing import Any

import pytest


def scales(fast: Any, long: Any, *, fast_timeout: int = 120, long_timeout: int = 1500) -> Any:
    """Parameters ``fast`` and ``long`` for ``@pytest.mark.parametrize``, each bounded by
    pytest-timeout; the long one carries the ``reliability`` marker."""
    return [
        pytest.param(fast, id="fast", marks=pytest.mark.timeout(fast_timeout)),
        pytest.param(
            long, id="long", marks=[pytest.mark.reliability, pytest.mark.timeout(long_timeout)]
        ),
    ]
