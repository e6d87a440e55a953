"""The Go reference verifier (golang.org/x/mod's sumdb/note and sumdb/tlog): our checkpoints,
proofs and notes checked with code no one here wrote. `main.go` beside this file is its source."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

GOPATH = Path("/usr/share/gocode")
SOURCE = Path(__file__).resolve().parent


def available() -> bool:
    """Debian's golang-go and golang-golang-x-mod-dev are installed."""
    return shutil.which("go") is not None and (GOPATH / "src/golang.org/x/mod/sumdb/note").is_dir()


def build(out: Path) -> Path:
    """Build the verifier into `out` and return the binary."""
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": str(GOPATH), "GOCACHE": str(out / "cache")}
    subprocess.run(
        ["go", "build", "-o", str(out / "goverify"), "."], cwd=SOURCE, env=env, check=True
    )
    return out / "goverify"


def run_goverify(binary: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=60)
