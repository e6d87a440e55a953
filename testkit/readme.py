"""The README's examples, as the tests run them: each Python block marked
``<!-- example: NAME -->`` and each shell block marked ``<!-- example-shell: NAME -->``, run as
written, so a README that no longer runs fails its test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from testkit.paths import REPO_ROOT

EXAMPLE = re.compile(r"<!-- example: (\w+) -->\n```python\n(.*?)```", re.DOTALL)
SHELL = re.compile(r"<!-- example-shell: (\w+) -->\n```sh\n(.*?)```", re.DOTALL)


def examples() -> dict[str, str]:
    return dict(EXAMPLE.findall((REPO_ROOT / "README.md").read_text()))


def shell_examples() -> dict[str, str]:
    return dict(SHELL.findall((REPO_ROOT / "README.md").read_text()))


def run(code: str, work_dir: Path, env: dict[str, str]) -> list[str]:
    """Run a Python example in `work_dir` with `env` added; its output lines (it must exit 0)."""
    script = work_dir / "example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=work_dir,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()
