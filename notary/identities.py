"""Who holds a key, as one comparable string. A holder is written once, when its key is issued,
and every identity check (an approver is not the requester) compares these forms, never what a
caller typed.

The canonical form is NFKC, case-folded, NFKC again (so full-width letters, ligatures and case
make no difference), without a `mailto:` scheme. Refused outright rather than guessed at:
invisible and control characters (a zero-width space), mixed scripts (a Cyrillic "a", U+0430,
among Latin letters) and letters of another script that look like Latin or common ones (a wholly
Cyrillic word that reads as a Latin one). The look-alike data is Unicode's confusables table, as the
`confusable_homoglyphs` library ships it. Two holders are the same person when their
*skeletons* (Unicode TR39's idea: every character replaced by its look-alike prototype, so "1"
and "l" are one) are equal."""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from confusable_homoglyphs import confusables

from notary.errors import NotaryInputError

MAX_HOLDER_LENGTH = 200
_SCHEMES = ("mailto:",)
# Letters and digits of these scripts may stand together; anything confusable with them from
# another script is refused.
_HOME_SCRIPTS = ["latin", "common"]


def canonical_holder(raw: str) -> str:
    """The holder as stored and compared; NotaryInputError for one that cannot be told apart
    from another by reading it."""
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", raw).casefold()).strip()
    for scheme in _SCHEMES:
        if text.startswith(scheme):
            text = text[len(scheme) :].strip()
    if not text:
        raise NotaryInputError("a key needs a holder: the person or system that uses it")
    if len(text) > MAX_HOLDER_LENGTH:
        raise NotaryInputError(f"a holder is at most {MAX_HOLDER_LENGTH} characters")
    hidden = [ch for ch in text if _invisible(ch)]
    if hidden:
        names = ", ".join(sorted({f"U+{ord(ch):04X}" for ch in hidden}))
        raise NotaryInputError(f"holder {raw!r} has invisible or control characters ({names})")
    if confusables.is_mixed_script(text, allowed_aliases=["COMMON", "INHERITED"]):
        raise NotaryInputError(f"holder {raw!r} mixes scripts: write it in one")
    look_alikes = confusables.is_confusable(text, greedy=True, preferred_aliases=_HOME_SCRIPTS)
    if look_alikes:
        found = ", ".join(sorted({str(c["character"]) for c in look_alikes}))
        raise NotaryInputError(
            f"holder {raw!r} has letters that look like Latin ones ({found}): spell it in Latin"
        )
    return text


def same_holder(first: str, second: str) -> bool:
    """Whether two holders name the same person or system, as a reader would see it. Also for
    holders stored before they were made canonical: this never raises."""
    return skeleton(first) == skeleton(second)


def skeleton(holder: str) -> str:
    """TR39's skeleton of a holder: its loose canonical form (no invisible characters), every
    character replaced by its look-alike prototype, case-folded."""
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", holder).casefold())
    text = "".join(ch for ch in text if not _invisible(ch)).strip()
    for scheme in _SCHEMES:
        if text.startswith(scheme):
            text = text[len(scheme) :].strip()
    return "".join(_prototype(ch) for ch in text).casefold()


def _invisible(ch: str) -> bool:
    category = unicodedata.category(ch)
    return ch != " " and (category[0] in "CZ")


@lru_cache(maxsize=4096)
def _prototype(ch: str) -> str:
    """The character a reader takes `ch` for. The table lists a character's prototype for a
    source character and every source for a prototype, so a one-entry list is the prototype,
    and a pair that lists only each other is settled by the smaller."""
    found = confusables.confusables_data.get(ch)
    if not found or len(found) != 1:
        return ch
    prototype = str(found[0]["c"]).strip("\u200e")
    back = confusables.confusables_data.get(prototype) or []
    if len(back) == 1 and str(back[0]["c"]).strip("\u200e") == ch:
        return min(ch, prototype)
    return unicodedata.normalize("NFKC", prototype).casefold()
