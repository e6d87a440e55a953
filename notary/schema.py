"""What the OpenAPI schema says beyond each view's own annotations: the bearer API key scheme,
the refusals every operation of a kind can answer (so no view copies them), who may call each
operation, and the webhook receiver, a plain Django view that drf-spectacular does not see; and
the examples the views show, one refund made by the code's own constructors.

Every refusal is the one error shape (ledger.api.schema.ErrorOutput), documented as an example
of the answer the exception handler writes for what the code raises (ledger.api.schema.refusal):
its code and status are the ones sent. Which ones an operation gets here, from what it is:

- authenticated (has a security requirement): 401 `not_authenticated` (no key) and
  `authentication_failed` (an invalid or revoked one), 429 `throttled` (too many failed
  authentications from the client's address this minute);
- with a permission beyond "authenticated" (a role): 403 `permission_denied`, its message the
  permission's own;
- with a request body: 400 `parse_error` (not JSON, nested too deep, a lone surrogate) and
  `invalid` (what the view's serializer answers to an empty object), 413 `too_large` (over
  DATA_UPLOAD_MAX_MEMORY_SIZE), 415 `unsupported_media_type` (not application/json);
- with query parameters: 400 `invalid`; with path parameters: 404 `not_found`.

A view's own refusals (`error_responses(...)` in its `extend_schema(responses=...)`) are merged
in: one of the same name (its error code, unless named otherwise) replaces the kind's. Each
error response's description lists its refusals; each operation's description ends with who may
call it (the roles whose keys its permission checks admit, found by asking them) and its error
codes by status."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.plumbing import build_examples_list
from drf_spectacular.utils import OpenApiExample, OpenApiResponse
from rest_framework.exceptions import (
    AuthenticationFailed,
    NotAuthenticated,
    NotFound,
    ParseError,
    PermissionDenied,
    Throttled,
    UnsupportedMediaType,
    ValidationError,
)
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.serializers import BaseSerializer, ListSerializer

from gate_client.authorization import DispatchRequest
from gate_client.leases import Lease as LeaseTerms
from gate_client.money import Money, MoneyDeclaration
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.protocol import TargetDeclaration, sent_body
from gate_client.reconciliation import AdmittedEffect, ProviderRecord, Window, compare
from gate_client.targets import Tier
from ledger.api.schema import ErrorOutput, refusal, refusal_lines, status_of
from ledger.core.canonical import canonical_json
from ledger.core.entries import Entry, EntryKind, format_timestamp, genesis_hash, seal_entry
from notary.authentication import ApiKeyPrincipal
from notary.models import (
    ApiKey,
    Effect,
    Lease,
    LeaseRequest,
    ReconciliationFinding,
    Role,
    Target,
    Tenant,
)
from notary.parsers import BoundedJSONParser
from notary.projection import effect_fields, finding_fields
from notary.reconciliation import Reconciliation
from webhooks.views import OPENAPI_PATH, openapi_path_item


class BearerApiKeyScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "notary.authentication.BearerApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "ik_<key id>_<secret>"}


THROTTLED = (
    "too many failed authentications from this client address this minute; a valid key "
    "still gets through"
)
QUERY_REFUSED = "a query parameter refused as given; `detail` says which and why"
NOT_FOUND = (
    "no such record for this key's tenant (another tenant's do not exist), or an id no "
    "record can have (a control character)"
)
BODY_REFUSED = (
    "refused as given, by field (`detail` says why); what the operation's serializer answers "
    "to an empty object is shown; nothing was written"
)
ROLES_LABEL = "**Roles:**"
ERRORS_LABEL = "**Errors:**"


def _parse_error(raw: bytes) -> ParseError:
    """What the API's JSON parser raises for `raw`."""
    try:
        BoundedJSONParser().parse(io.BytesIO(raw), "application/json", {})
    except ParseError as exc:
        return exc
    raise ValueError(f"{raw!r} parses")


def _body_kind_refusals() -> list[OpenApiExample]:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return [
        refusal(_parse_error(b'{"effect_id": '), "not JSON", name="parse_error"),
        refusal(
            _parse_error(b"[" * 65 + b"]" * 65),
            "nested deeper than 64 arrays and objects (or holding a lone surrogate)",
            name="parse_error_depth",
        ),
        refusal(RequestDataTooBig(), f"the body is larger than {limit} bytes"),
        refusal(UnsupportedMediaType("text/plain"), "the body must be application/json"),
    ]


def _probe(role: str, method: str) -> Request:
    """A request as a key of `role` makes it, to ask a permission class (nothing is stored)."""
    http = HttpRequest()
    http.method = method
    request = Request(http)
    api_key = ApiKey(role=role, tenant=Tenant(slug="probe"), key_id="probe", holder="probe")
    request.user = ApiKeyPrincipal(api_key)  # type: ignore[assignment]  # the API's user
    return request


class AutoSchema(SpectacularAutoSchema):
    """The project's schema class (REST_FRAMEWORK's DEFAULT_SCHEMA_CLASS): drf-spectacular's,
    with the refusals an operation answers by its kind merged into what its view declares, and
    its roles and error codes at the end of its description."""

    def get_operation(
        self,
        path: str,
        path_regex: str,
        path_prefix: str,
        method: str,
        registry: Any,
    ) -> dict[str, Any] | None:
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        responses: dict[str, Any] = operation["responses"]
        by_status: dict[str, list[OpenApiExample]] = {}
        for example in self._refusals(operation):
            by_status.setdefault(status_of(example), []).append(example)
        for status, examples in by_status.items():
            if status not in responses:
                answer = OpenApiResponse(response=ErrorOutput, examples=examples)
                responses[status] = self._get_response_for_code(  # type: ignore[no-untyped-call]
                    answer, status
                )
                continue
            for media in responses[status].get("content", {}).values():
                # The kind's first, the view's after; one of the same name is the view's.
                media["examples"] = {**build_examples_list(examples), **media.get("examples", {})}
        for status, answer in responses.items():
            if status.startswith("4"):
                describe_refusals(answer)
        if "401" in responses:
            responses["401"].setdefault("headers", {})["WWW-Authenticate"] = {
                "schema": {"type": "string"},
                "description": 'Bearer realm="notary"',
            }
        if "429" in responses and "security" in operation:
            responses["429"].setdefault("headers", {})["Retry-After"] = {
                "schema": {"type": "integer"},
                "description": "seconds until the address may try again",
            }
        operation["responses"] = dict(sorted(responses.items()))
        complete_description(operation, self._roles_line(operation))
        return operation

    def _map_serializer_field(
        self, field: Any, direction: str, bypass_extensions: bool = False
    ) -> dict[str, Any]:
        """Also a nested list's bounds (drf-spectacular renders a ListField's, not a
        ListSerializer's)."""
        schema: dict[str, Any] = super()._map_serializer_field(  # type: ignore[no-untyped-call]
            field, direction, bypass_extensions
        )
        if isinstance(field, ListSerializer) and schema.get("type") == "array":
            bounds = {"maxItems": getattr(field, "max_length", None)}
            bounds["minItems"] = getattr(field, "min_length", None)
            schema.update({key: n for key, n in bounds.items() if n is not None})
        return schema

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        """A serializer whose Meta says `closed = True` takes exactly its fields: the schema
        says so (additionalProperties: false)."""
        schema: dict[str, Any] = super()._map_basic_serializer(  # type: ignore[no-untyped-call]
            serializer, direction
        )
        if getattr(getattr(serializer, "Meta", None), "closed", False):
            schema["additionalProperties"] = False
        return schema

    def _role_permissions(self) -> list[Any]:
        return [
            permission
            for permission in self.view.get_permissions()
            if not isinstance(permission, (AllowAny, IsAuthenticated))
        ]

    def _roles_line(self, operation: dict[str, Any]) -> str:
        """Who may call: the roles whose keys every permission of the view admits, asked of the
        permission classes themselves."""
        if not any(requirement for requirement in operation.get("security", [])):
            return f"{ROLES_LABEL} none needed: public, no API key."
        permissions = self.view.get_permissions()
        admitted = [
            role
            for role in Role.values
            if all(p.has_permission(_probe(role, self.method), self.view) for p in permissions)
        ]
        names = ", ".join(f"`{role}`" for role in admitted)
        if set(admitted) == set(Role.values):
            return f"{ROLES_LABEL} any API key ({names})."
        return (
            f"{ROLES_LABEL} {names}." if admitted else f"{ROLES_LABEL} none (every key is refused)."
        )

    def _refusals(self, operation: dict[str, Any]) -> list[OpenApiExample]:
        refusals: list[OpenApiExample] = []
        if any(requirement for requirement in operation.get("security", [])):
            refusals += [
                refusal(NotAuthenticated(), "no bearer key"),
                refusal(
                    AuthenticationFailed("invalid or revoked API key"),
                    "an invalid or revoked key",
                ),
                refusal(
                    Throttled(wait=60, detail="too many failed authentications from this address"),
                    THROTTLED,
                ),
            ]
        for permission in self._role_permissions():
            message = str(getattr(permission, "message", "not permitted"))
            refusals.append(refusal(PermissionDenied(message), "a key of another role"))
        if "requestBody" in operation:
            body = _body_kind_refusals()
            refusals += [*body[:2], refusal(self._body_invalid(), BODY_REFUSED), *body[2:]]
        where = {parameter["in"]: parameter for parameter in operation.get("parameters", [])}
        if "query" in where:
            refusals.append(refusal(self._query_invalid(where["query"]["name"]), QUERY_REFUSED))
        if "path" in where:
            name = where["path"]["name"]
            refusals.append(refusal(NotFound(f"no such {name} for this tenant"), NOT_FOUND))
        return refusals

    def _body_invalid(self) -> ValidationError:
        """What the view's request serializer answers to `{}`."""
        serializer = self.get_request_serializer()
        given = serializer.__class__ if isinstance(serializer, BaseSerializer) else serializer
        if isinstance(given, type) and issubclass(given, BaseSerializer):
            checked = given(data={})
            if not checked.is_valid():
                return ValidationError(checked.errors)
        return ValidationError({"non_field_errors": ["refused as given"]})

    def _query_invalid(self, first: str) -> ValidationError:
        """What the view's query serializer answers to its parameters given empty."""
        for parameter in self.get_override_parameters():
            if isinstance(parameter, type) and issubclass(parameter, BaseSerializer):
                checked = parameter(data={name: "" for name in parameter().fields})
                if not checked.is_valid():
                    return ValidationError(checked.errors)
        return ValidationError({first: ["refused as given"]})


def describe_refusals(answer: dict[str, Any]) -> None:
    """An error response described by its refusals (its examples), one line each."""
    for media in answer.get("content", {}).values():
        if media.get("examples"):
            answer["description"] = refusal_lines(media["examples"])
            return


def error_codes(operation: dict[str, Any]) -> dict[str, list[str]]:
    """The `error` codes of the operation's refusals, by status."""
    found: dict[str, list[str]] = {}
    for status, answer in operation["responses"].items():
        if not status.startswith("4"):
            continue
        for media in answer.get("content", {}).values():
            for example in media.get("examples", {}).values():
                code = example["value"]["error"]
                if code not in found.setdefault(status, []):
                    found[status].append(code)
    return found


def complete_description(operation: dict[str, Any], roles_line: str) -> None:
    """The operation's own description, then who may call it and its error codes by status."""
    codes = error_codes(operation)
    listed = "; ".join(
        f"{status} " + ", ".join(f"`{code}`" for code in names) for status, names in codes.items()
    )
    parts = [operation.get("description", "").strip(), roles_line]
    if listed:
        parts.append(f"{ERRORS_LABEL} {listed} (each described under Responses).")
    operation["description"] = "\n\n".join(part for part in parts if part)


def add_webhook_receiver(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A drf-spectacular postprocessing hook (SPECTACULAR_SETTINGS' POSTPROCESSING_HOOKS):
    the webhook receiver's path, as webhooks.views describes it. Its errors name the
    ErrorOutput component, which every authenticated operation's refusals register."""
    item = openapi_path_item()
    body = item["post"]["requestBody"]["content"]["application/json"]
    body["examples"] = build_examples_list(
        [request_example("stripe_refund", STRIPE_REFUND_CREATED, "Stripe: the demo's refund")]
    )
    for operation in item.values():
        for status, answer in operation["responses"].items():
            if status.startswith("4"):
                describe_refusals(answer)
        complete_description(
            operation,
            f"{ROLES_LABEL} none needed: no API key; the provider's signature over the body is "
            "the credential.",
        )
    result.setdefault("paths", {})[OPENAPI_PATH] = item
    return result


# --- examples ------------------------------------------------------------------------------
# One refund, as `manage.py demo` walks it (notary/management/commands/demo.py): tenant `shop`,
# its tier-1 target `payments`, the agent key of refund-bot and the approver key of
# maria@shop.example. Each value is made by the code's own constructors, so it cannot drift
# from them: the proposal and the dispatch by the gate's (gate_client.proposal, .journal), the
# verdict by the protocol's, the entries sealed as the ledger seals them, every answer by the
# view's own serializer. tests/notary/test_openapi.py validates them against the schema and
# posts the requests to a live notary.

EXAMPLE_AT = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)  # when the lease is granted
EXAMPLE_TENANT = "shop"
EXAMPLE_TARGET = "payments"
EXAMPLE_AGENT = "refund-bot"
EXAMPLE_APPROVER = "maria@shop.example"
EXAMPLE_AGENT_KEY = "3f9c2a7e1b5d8c40"  # a key id: 16 hex digits
EXAMPLE_REQUEST_ID = "lreq_9b1e4c7a2d5f8e0b3a6c9d2e"
EXAMPLE_LEASE_ID = "lease_5f0c1e9a7b3d24c6e8a1f0b2"
EXAMPLE_EXPIRES_AT = EXAMPLE_AT + timedelta(hours=1)  # the demo's hour-long lease
EXAMPLE_RESULT_REF = "re_3Pq9xK2eZvKYlo2C1a"  # the payment service's refund id
EXAMPLE_LIMITS = {"amount_cents": 2000}
EXAMPLE_ORIGIN = f"{settings.NOTARY_ORIGIN}/{EXAMPLE_TENANT}"


def _payment_settled() -> PremiseResult:
    return PremiseResult(True, {"status": "succeeded"})


REFUND = Proposal(
    case_id="case_4711",
    target=EXAMPLE_TARGET,
    action="refund",
    payload={"payment": "pay_100", "amount_cents": 2000},
    lease_id=EXAMPLE_LEASE_ID,
    premises=[Premise("payment_settled", _payment_settled)],
    tenant=EXAMPLE_TENANT,
)
PREMISES = [premise.evaluate() for premise in REFUND.premises]  # as the gate observes them
# The demo's payments target, as its gate declares it (example_target is its record).
EXAMPLE_MONEY = MoneyDeclaration(amount_field="amount_cents", currency_field="currency")
EXAMPLE_DECLARATION = TargetDeclaration(
    tier=Tier.DEDUPES,
    queryable=True,
    max_inflight=timedelta(seconds=2),
    key_window=timedelta(hours=24),
    money=EXAMPLE_MONEY,
)
PROPOSED_BODY = REFUND.proposed_body(PREMISES, EXAMPLE_DECLARATION)
FIRST_DISPATCH = DispatchRequest.of_proposal(REFUND.effect_id, PROPOSED_BODY, 1, PREMISES, False)
RESEND = DispatchRequest.of_proposal(REFUND.effect_id, PROPOSED_BODY, 2, PREMISES, True)
REFUND_TERMS = LeaseTerms(
    lease_id=EXAMPLE_LEASE_ID,
    case_id=REFUND.case_id,
    action=REFUND.action,
    expires_at=EXAMPLE_EXPIRES_AT,
    granted_by=EXAMPLE_APPROVER,
    limits=EXAMPLE_LIMITS,
)
PROPOSED_AT = EXAMPLE_AT + timedelta(minutes=2)


def _sealed(
    *items: tuple[str, str, dict[str, Any], datetime], after: Entry | None = None
) -> list[Entry]:
    """The example log's entries from its first (or the one `after`), chained as the ledger
    chains them."""
    entries: list[Entry] = []
    previous = after.entry_hash if after is not None else genesis_hash(EXAMPLE_ORIGIN)
    first = after.seq + 1 if after is not None else 0
    for seq, (kind, effect_id, body, at) in enumerate(items, start=first):
        entry = seal_entry(
            seq=seq,
            kind=kind,
            effect_id=effect_id,
            body=canonical_json(body),
            created_at=at,
            prev_hash=previous,
        )
        entries.append(entry)
        previous = entry.entry_hash
    return entries


GRANTED, PROPOSED, DISPATCHED, COMMITTED = _sealed(
    (
        EntryKind.LEASE_GRANTED,
        "",
        {
            **REFUND_TERMS.body(),
            "requested_by": EXAMPLE_AGENT,
            "request_id": EXAMPLE_REQUEST_ID,
            "requested_key": EXAMPLE_AGENT_KEY,
        },
        EXAMPLE_AT,
    ),
    (EntryKind.PROPOSED, REFUND.effect_id, PROPOSED_BODY, PROPOSED_AT),
    (EntryKind.DISPATCHED, REFUND.effect_id, FIRST_DISPATCH.entry_body(), PROPOSED_AT),
    (
        EntryKind.COMMITTED,
        REFUND.effect_id,
        sent_body(1, EXAMPLE_RESULT_REF, None),
        PROPOSED_AT + timedelta(seconds=1.2),
    ),
)


def example_effect(history: list[Entry]) -> Effect:
    """The Effect row these entries project (unsaved)."""
    return Effect(effect_id=REFUND.effect_id, **effect_fields(history))


def example_lease(*, revoked: bool = False) -> Lease:
    """The Lease row the grant writes (unsaved); revoked a minute after the refund."""
    lease = Lease(
        lease_id=EXAMPLE_LEASE_ID,
        case_id=REFUND_TERMS.case_id,
        action=REFUND_TERMS.action,
        limits=dict(REFUND_TERMS.limits),
        payload_hash="",
        expires_at=EXAMPLE_EXPIRES_AT,
        requested_by=EXAMPLE_AGENT,
        granted_by=EXAMPLE_APPROVER,
        granted_seq=GRANTED.seq,
    )
    if revoked:
        lease.revoked_at = COMMITTED.created_at + timedelta(minutes=1)
        lease.revoked_by, lease.revoked_seq = EXAMPLE_APPROVER, COMMITTED.seq + 1
    return lease


def example_lease_request() -> LeaseRequest:
    """The LeaseRequest row the agent's request writes (unsaved), not granted yet."""
    asker = ApiKey(key_id=EXAMPLE_AGENT_KEY, role=Role.AGENT, holder=EXAMPLE_AGENT)
    return LeaseRequest(
        request_id=EXAMPLE_REQUEST_ID,
        case_id=REFUND.case_id,
        action=REFUND.action,
        limits=dict(EXAMPLE_LIMITS),
        payload_hash="",
        expires_at=EXAMPLE_EXPIRES_AT,
        requested_key=asker,
        requested_by=EXAMPLE_AGENT,
        created_at=EXAMPLE_AT - timedelta(minutes=5),
    )


def example_target() -> Target:
    """The demo's payments target (unsaved): dedupes on a key for 24 hours, can be looked up."""
    return Target(
        name=EXAMPLE_TARGET,
        tier=1,
        queryable=True,
        key_window=timedelta(hours=24),
        max_inflight=timedelta(seconds=2),
        evidence_window=None,
        attests_before_acting=False,
        lookup_needs_key=False,
        lookup_url="",
        money_amount_field=EXAMPLE_MONEY.amount_field,
        money_currency_field=EXAMPLE_MONEY.currency_field or "",
        created_at=EXAMPLE_AT - timedelta(days=1),
    )


def timestamp(moment: datetime) -> str:
    """A time as a client writes it (RFC 3339, UTC)."""
    return format_timestamp(moment)


# The request bodies, as the clients send them.
PROPOSE_AND_DISPATCH = {  # gate_client.notary_journal.NotaryJournal.propose_and_dispatch
    "effect_id": REFUND.effect_id,
    "proposal": PROPOSED_BODY,
    "dispatch": {"premises": [dict(p) for p in FIRST_DISPATCH.premises]},
}
PROPOSE_ONLY = {"effect_id": REFUND.effect_id, "proposal": PROPOSED_BODY}  # NotaryJournal.propose
DISPATCH_FIRST = {  # NotaryJournal.dispatch, after a propose without a dispatch
    "attempt": FIRST_DISPATCH.attempt,
    "premises": [dict(p) for p in FIRST_DISPATCH.premises],
    "recovery": FIRST_DISPATCH.recovery,
}
DISPATCH_RESEND = {  # NotaryJournal.dispatch, as the gate's recover() resends
    "attempt": RESEND.attempt,
    "premises": [dict(p) for p in RESEND.premises],
    "recovery": RESEND.recovery,
}
OUTCOME_COMMITTED = {"kind": str(COMMITTED.kind), "body": COMMITTED.body_value()}
OUTCOME_FAILED = {"kind": str(EntryKind.FAILED), "body": {"attempt": 1, "code": "card_declined"}}
LEASE_REQUEST = {  # what the agent asks for: the demo's lease, under its own key
    "case_id": REFUND.case_id,
    "action": REFUND.action,
    "expires_at": timestamp(EXAMPLE_EXPIRES_AT),
    "limits": dict(EXAMPLE_LIMITS),
}
GRANT_REQUEST = {"request_id": EXAMPLE_REQUEST_ID}
GRANT_TERMS = {  # notary.management.commands.demo._grant
    "case_id": REFUND.case_id,
    "action": REFUND.action,
    "expires_at": timestamp(EXAMPLE_EXPIRES_AT),
    "requested_by": EXAMPLE_AGENT,
    "limits": dict(EXAMPLE_LIMITS),
}
TARGET_PAYMENTS: dict[str, Any] = {  # the demo's target_register
    "name": EXAMPLE_TARGET,
    "tier": 1,
    "queryable": True,
    "max_inflight_seconds": 2.0,
    "key_window_seconds": 24 * 3600.0,
    "money": {"amount_field": "amount_cents", "currency_field": "currency"},
}
ATTEST_BEFORE = {"effect_id": REFUND.effect_id, "stage": "before_acting"}  # testkit Attestor
ATTEST_PERFORMED = {
    "effect_id": REFUND.effect_id,
    "stage": "performed",
    "reference": EXAMPLE_RESULT_REF,
}


STRIPE_REFUND_CREATED = {  # Stripe's refund.created for the demo's refund (webhooks.providers)
    "id": "evt_3Pq9xK2eZvKYlo2C0b7sWq1m",
    "object": "event",
    "type": "refund.created",
    "created": int(COMMITTED.created_at.timestamp()),
    "data": {
        "object": {
            "id": EXAMPLE_RESULT_REF,
            "object": "refund",
            "amount": REFUND.payload["amount_cents"],
            "status": "succeeded",
            "metadata": {"interlock_effect_id": REFUND.effect_id},  # as the gate's adapter sets
        }
    },
}


# Reconciling the payments target over the day after the lease's grant, as the rule finds it:
# the demo's refund matched; a refund made by hand in the provider's dashboard (no effect id);
# and a second, smaller refund made by hand with the demo refund's metadata.
EXAMPLE_WINDOW = Window(EXAMPLE_AT, EXAMPLE_AT + timedelta(days=1))
EXAMPLE_PAYMENT_INTENT = "pi_3Pq9xK2eZvKYlo2C0m4Qb8Lh"


def _refund_record(ref: str, at: datetime, amount: int, effect_id: str | None) -> ProviderRecord:
    """A refund as the Stripe provider's list shows it (gate_client.adapters.stripe_refunds)."""
    evidence = {
        "id": ref,
        "amount": amount,
        "currency": "usd",
        "status": "succeeded",
        "created": int(at.timestamp()),
        "payment_intent": EXAMPLE_PAYMENT_INTENT,
        "metadata": {"interlock_effect_id": effect_id} if effect_id else {},
    }
    return ProviderRecord(ref, at, effect_id, evidence, Money(amount, "USD"))


EXAMPLE_FINDINGS = compare(
    [
        _refund_record(
            EXAMPLE_RESULT_REF,
            COMMITTED.created_at,
            REFUND.payload["amount_cents"],
            REFUND.effect_id,
        ),
        _refund_record("re_3PqA1nd0eZvKYlo2C9x", EXAMPLE_AT + timedelta(hours=3), 1200, None),
        _refund_record(
            "re_3PqB7rT2eZvKYlo2C4k", EXAMPLE_AT + timedelta(hours=4), 500, REFUND.effect_id
        ),
    ],
    {
        REFUND.effect_id: AdmittedEffect(
            REFUND.effect_id,
            "COMMITTED",
            EXAMPLE_RESULT_REF,
            COMMITTED.created_at,
            Money(REFUND.payload["amount_cents"], ""),
        )
    },
    EXAMPLE_WINDOW,
)
EXAMPLE_FOUND_AT = EXAMPLE_WINDOW.until + timedelta(minutes=10)
RECONCILED_ENTRIES = _sealed(
    *(
        (
            EntryKind.RECONCILED,
            finding.effect_id,
            finding.body(target=EXAMPLE_TARGET, window=EXAMPLE_WINDOW),
            EXAMPLE_FOUND_AT,
        )
        for finding in EXAMPLE_FINDINGS
    ),
    after=COMMITTED,
)


def example_findings() -> list[ReconciliationFinding]:
    """The ReconciliationFinding rows the example's RECONCILED entries project (unsaved)."""
    return [ReconciliationFinding(**finding_fields(entry)) for entry in RECONCILED_ENTRIES]


def example_reconciliation() -> Reconciliation:
    """What reconciling the example's window did: three refunds listed, every finding new."""
    return Reconciliation(example_target(), EXAMPLE_WINDOW, 3, EXAMPLE_FINDINGS, example_findings())


RECONCILE_DAY = {"since": timestamp(EXAMPLE_WINDOW.since), "until": timestamp(EXAMPLE_WINDOW.until)}


def request_example(name: str, value: dict[str, Any], summary: str) -> OpenApiExample:
    return OpenApiExample(name, value=value, summary=summary, request_only=True)


def response_example(name: str, value: Any, summary: str, status: int) -> OpenApiExample:
    return OpenApiExample(
        name, value=value, summary=summary, status_codes=[str(status)], response_only=True
    )


__all__ = [
    "AutoSchema",
    "BearerApiKeyScheme",
    "add_webhook_receiver",
    "complete_description",
    "error_codes",
]
