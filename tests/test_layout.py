"""The README's Layout section is the tree: every folder it names exists, and every folder of
the repository (and of experiments/) is named there."""

from __future__ import annotations

import re

from testkit.paths import REPO_ROOT


def layout_folders() -> set[str]:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## Layout\n", 1)[1].split("\n## ", 1)[0]
    return {match.rstrip("/") for match in re.findall(r"^- `([\w/]+/)`", section, re.MULTILINE)}


def folders(parent: str = "") -> set[str]:
    root = REPO_ROOT / parent
    return {
        f"{parent}{path.name}"
        for path in root.iterdir()
        if path.is_dir()
        and not path.name.startswith((".", "_"))
        and path.name != "var"
        and not path.name.endswith(".egg-info")
    }


def test_every_folder_the_readme_names_exists() -> None:
    missing = sorted(name for name in layout_folders() if not (REPO_ROOT / name).is_dir())
    assert not missing, f"README's Layout names folders that do not exist: {missing}"


def test_every_folder_of_the_repository_is_named_in_the_readme() -> None:
    named = layout_folders()
    top = folders() - {"experiments"}
    unnamed = sorted((top | folders("experiments/")) - named)
    assert not unnamed, f"folders the README's Layout does not name: {unnamed}"
