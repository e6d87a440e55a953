from __future__ import annotations

import os
from pathlib import Path

import pytest

from testkit import goverify as go


@pytest.fixture(scope="session")
def goverify(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go reference verifier, built once per session."""
    if not go.available():
        if os.environ.get("CI"):
            pytest.fail("CI must have golang-go and golang-golang-x-mod-dev (see .ci/run)")
        pytest.skip("needs Debian's golang-go and golang-golang-x-mod-dev")
    return go.build(tmp_path_factory.mktemp("go"))
