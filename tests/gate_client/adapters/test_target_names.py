"""The adapters' default target names are names the notary registers.

The rule is the notary's own (``notary.services._TARGET_NAME``, used by ``target_register``).
That module cannot be imported without Django set up, and gate_client has no Django, so the
pattern is read from its source, not copied: the test follows the notary if the rule changes."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import stripe

from gate_client.adapters import declarations, resend_email, stripe_refunds
from gate_client.adapters.decorator import GatedFunctions, default_target_name
from gate_client.adapters.resend_email import ResendEmail
from gate_client.adapters.stripe_refunds import StripeRefunds
from gate_client.journal import LocalJournal
from testkit.paths import REPO_ROOT


def notary_target_name() -> re.Pattern[str]:
    """The pattern `notary.services` compiles as ``_TARGET_NAME``."""
    source = (REPO_ROOT / "notary" / "services.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["_TARGET_NAME"]
            and isinstance(node.value, ast.Call)
            and isinstance(pattern := node.value.args[0], ast.Constant)
            and isinstance(pattern.value, str)
        ):
            return re.compile(pattern.value)
    raise AssertionError("notary/services.py no longer defines _TARGET_NAME")


TARGET_NAME = notary_target_name()


def test_the_rule_is_the_one_the_notary_documents() -> None:
    """As its refusal says: 1-63 of a-z, 0-9, '_' and '-' (here: not starting or ending in one
    of the last two)."""
    assert TARGET_NAME.fullmatch("stripe-refunds") and TARGET_NAME.fullmatch("a" * 63)
    for refused in ("stripe.refunds", "stripe/refunds", "Stripe", "-a", "a_", "a" * 64, ""):
        assert not TARGET_NAME.fullmatch(refused), refused


def test_the_stripe_and_resend_defaults_are_valid_names() -> None:
    client = stripe.StripeClient("sk_test_interlock", max_network_retries=0)
    names = [
        stripe_refunds.DEFAULT_NAME,
        StripeRefunds(client).name,
        resend_email.DEFAULT_NAME,
        ResendEmail(api_key="re_test").name,
    ]
    assert names == ["stripe_refunds"] * 2 + ["resend_email"] * 2
    assert all(TARGET_NAME.fullmatch(name) for name in names)


def module_level_refund(order: str) -> None:
    """A function at a module's top level."""


class Payments:
    def refund(self, order: str) -> None:
        """A method."""


def nested() -> Callable[..., None]:
    def refund(order: str) -> None:
        """A function defined inside another: its qualname has <locals>."""

    return refund


def as_if(function: Callable[..., Any], module: str, qualname: str) -> Callable[..., Any]:
    function.__module__, function.__qualname__ = module, qualname
    return function


def test_the_decorators_default_names_are_valid_and_distinct(tmp_path: Path) -> None:
    long = "Reconciliation.<locals>." + "_".join(["refund_every_order_of_the_day"] * 4)
    functions: list[Callable[..., Any]] = [
        module_level_refund,
        Payments.refund,
        nested(),
        lambda order: None,
        as_if(lambda order: None, "__main__", "close_ticket"),  # a script, like the README's
        as_if(lambda order: None, "shop.Payments", "CamelCase.Refund"),
        as_if(lambda order: None, "a.b", long),
        as_if(lambda order: None, "a.c", long),  # the same tail: the digest keeps them apart
    ]
    names = [default_target_name(function) for function in functions]
    assert all(TARGET_NAME.fullmatch(name) for name in names), names
    assert len(set(names)) == len(names)
    assert names[4:6] == ["main-close_ticket", "shop-payments-camelcase-refund"]
    # One longer than 63 keeps its most specific end and a digest of the whole dotted name,
    # so two that share that end stay apart.
    owns = ["module_level_refund", "payments-refund", "nested-refund"]
    for name, own in zip(names[:3], owns, strict=True):
        assert own in name and name.startswith(("tests-", "client-")), name
    assert re.fullmatch(r".*_day-[0-9a-f]{8}", names[6]) and names[6] != names[7]
    assert all(len(name) <= declarations.MAX_TARGET_NAME for name in names)

    gated = GatedFunctions(LocalJournal(tmp_path / "journal"))
    gated.gated(case_id=lambda order, **_: order, lease_id="lease")(nested())
    [name] = gated.gate.targets
    assert TARGET_NAME.fullmatch(name), name
