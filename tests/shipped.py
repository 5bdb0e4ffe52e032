"""The packaged models as their wheels ship them: a test that needs one is skipped without its wheel."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcompile.errors import ModelError
from rlcompile.models.packaged import packaged_path


def shipped_model(name: str) -> Path:
    """The packaged model's file; skips the calling test when the wheel is not installed."""
    try:
        return packaged_path(name)
    except ModelError as error:
        pytest.skip(str(error))
