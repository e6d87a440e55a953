"""The Go reference verifier (golang.org/x/mod's sumdb/note and sumdb/tlog), built once per
session for the tests that check our output with code no one here wrote."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

GOPATH = Path("/usr/share/gocode")
SOURCE = REPO_ROOT / "tests" / "ledger" / "goverify"


@pytest.fixture(scope="session")
def goverify(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("go") is None or not (GOPATH / "src/golang.org/x/mod/sumdb/note").is_dir():
        if os.environ.get("CI"):
            pytest.fail("CI must have golang-go and golang-golang-x-mod-dev (see .ci/run)")
        pytest.skip("needs Debian's golang-go and golang-golang-x-mod-dev")
    out = tmp_path_factory.mktemp("go")
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": str(GOPATH),
        "GOCACHE": str(out / "cache"),
    }
    subprocess.run(
        ["go", "build", "-o", str(out / "goverify"), "."], cwd=SOURCE, env=env, check=True
    )
    return out / "goverify"


def run_goverify(binary: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=60)
