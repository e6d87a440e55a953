"""The README's Layout section is the tree: every folder it names exists, and every folder of
the repository (and of experiments/) is named there. The README and the docs/ pages it links
hold together: every relative link resolves, every page is linked from the README and links
back, and the concepts table defines the tiers, the four facts and the final states before the
README uses them."""

from __future__ import annotations

import re
from pathlib import Path

from gate_client.protocol import State
from gate_client.receipts import Receipt
from gate_client.targets import Tier
from testkit.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
FENCED = re.compile(r"^```.*?^```[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#* *$", re.MULTILINE)
EXTERNAL = ("http://", "https://", "mailto:")
FOUR_FACTS = ("happened", "authorized_when_fired", "assumptions_held", "recorded")
NOT_FINAL = {State.PROPOSED, State.DISPATCHED}


def layout_folders() -> set[str]:
    readme = README.read_text()
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


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(text: str) -> str:
    """The text without its code: no link is read out of a code block or a code span."""
    return INLINE_CODE.sub("", FENCED.sub("", text))


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCED.sub("", page.read_text())):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    return [link for link in LINK.findall(prose(page.read_text())) if not link.startswith(EXTERNAL)]


def broken_links(page: Path) -> list[str]:
    broken = []
    for link in relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link} (no such heading)")
    return broken


def test_the_docs_pages_exist() -> None:
    assert len(pages()) > 1, "no docs/*.md page"


def test_every_relative_link_resolves() -> None:
    broken = {
        str(page.relative_to(REPO_ROOT)): links for page in pages() if (links := broken_links(page))
    }
    assert not broken, f"links to files or headings that do not exist: {broken}"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(README.parent / link.partition("#")[0]).resolve() for link in relative_links(README)}
    unlinked = sorted(page.name for page in DOCS.glob("*.md") if page.resolve() not in linked)
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_every_docs_page_has_a_title_and_links_back_to_the_readme() -> None:
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        assert text.startswith("# "), f"{page.name} does not open with its title"
        back = {(page.parent / link.partition("#")[0]).resolve() for link in relative_links(page)}
        assert README.resolve() in back, f"{page.name} does not link back to the README"


def concepts_table() -> tuple[int, str]:
    """Where the README's concepts table starts, and the table."""
    readme = README.read_text()
    section = readme.index("\n## Concepts\n")
    start = readme.index("\n|", section) + 1
    end = readme.find("\n\n", start)
    return start, readme[start:end]


def test_tier_is_first_mentioned_in_the_concepts_table() -> None:
    readme = README.read_text()
    start, _ = concepts_table()
    first = re.search(r"\btier", readme, re.IGNORECASE)
    assert first is not None
    line = readme.count("\n", 0, first.start()) + 1
    assert first.start() >= start, f"'tier' used at line {line}, before the concepts table"


def test_the_concepts_table_defines_the_tiers_the_facts_and_the_final_states() -> None:
    _, table = concepts_table()
    terms = [row.split("|")[1].strip() for row in table.splitlines()[2:]]
    named = {name for term in terms for name in re.findall(r"`([^`]+)`", term) or [term]}
    tiers = {f"tier {tier.value}" for tier in Tier}
    facts = set(FOUR_FACTS)
    assert facts <= set(Receipt.__dataclass_fields__), "a fact the receipt does not state"
    finals = {str(state) for state in State if state not in NOT_FINAL}
    stated = {name.partition(":")[0] for name in named}
    missing = sorted((tiers | facts | finals) - stated)
    assert not missing, f"the concepts table does not define: {missing}"
    unknown = sorted(stated - tiers - facts - finals)
    assert not unknown, f"the concepts table defines what the code does not have: {unknown}"
