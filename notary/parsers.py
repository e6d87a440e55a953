"""The API's JSON parser: DRF's, bounded. A body nested deeper than the ledger's one depth limit
(ledger.core.canonical.MAX_DEPTH) or holding a string that is not Unicode (a lone surrogate
escape such as ``"\\ud800"``, which JSON allows and UTF-8 cannot hold) is a 400 before any view
sees it, so nothing past the parser meets such a value."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from ledger.core.canonical import MAX_DEPTH, CanonicalJSONError, check_depth


class BoundedJSONParser(JSONParser):
    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:  # the C scanner's guard, far past MAX_DEPTH
            raise ParseError(
                f"JSON parse error - nests deeper than {MAX_DEPTH} arrays and objects"
            ) from exc
        try:
            check_depth(data)
        except CanonicalJSONError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ParseError("JSON parse error - a string holds a lone surrogate") from exc
        return data
