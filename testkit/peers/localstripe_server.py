"""localstripe as the refund adapter's peer, with Stripe's ``created`` filter on the refund list.

    python -m testkit.peers.localstripe_server --port PORT --from-scratch

localstripe 1.15 lists refunds by charge or payment only; Stripe also filters them by creation
time (``created[gt|gte|lt|lte]``, Unix seconds), which reconciliation lists a window with. This
runs localstripe's own server with that filter added to its refund list, and nothing else
changed: a list without ``created`` is localstripe's as it was."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from localstripe import resources, server  # type: ignore[import-untyped]
from localstripe.errors import UserError  # type: ignore[import-untyped]

_BOUNDS: dict[str, Callable[[int, int], bool]] = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}
_list_refunds = resources.Refund._api_list_all.__func__


def _refunds_created(cls: Any, /, url: str, created: Any = None, **kwargs: Any) -> Any:
    listed = _list_refunds(cls, url, **kwargs)
    if created is None:
        return listed
    if not isinstance(created, dict) or not set(created) <= set(_BOUNDS):
        raise UserError(400, "created: an object of gt, gte, lt, lte")
    try:
        bounds = [(_BOUNDS[name], int(value)) for name, value in created.items()]
    except (TypeError, ValueError) as error:
        raise UserError(400, "created: whole Unix seconds") from error
    listed._list = [r for r in listed._list if all(op(r.created, b) for op, b in bounds)]
    return listed


resources.Refund._api_list_all = classmethod(_refunds_created)

if __name__ == "__main__":
    server.start()
