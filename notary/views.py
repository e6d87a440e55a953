"""The API's views: validate, call a service or selector, serialize."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gate_client.authorization import DispatchRequest, Refuse, authorize
from gate_client.budgets import Budget, BudgetPer, Spent
from gate_client.holds import Hold, HoldScope
from gate_client.ids import effect_id_for
from gate_client.leases import LeaseState
from gate_client.reconciliation import ReconciliationError, Window
from ledger.api.schema import error_responses, input_refusal, refusal
from ledger.core.entries import Entry as LedgerEntry
from notary import reconciliation, selectors, services
from notary.authentication import ApiKeyPrincipal, role_required
from notary.errors import (
    NotaryConflict,
    NotaryDependencyFailed,
    NotaryForbidden,
    NotaryInputError,
    NotaryNotFound,
)
from notary.exports import ExportDamaged, check_state_filter, export_receipts
from notary.mandates import lease_grant_from_mandate
from notary.models import DEFAULT_MAX_LEASE_AMOUNT_CENTS, DEFAULT_MAX_LEASE_DURATION, Role
from notary.schema import (
    ATTEST_BEFORE,
    ATTEST_PERFORMED,
    COMMITTED,
    DISPATCH_FIRST,
    DISPATCH_RESEND,
    DISPATCHED,
    EXAMPLE_AGENT,
    EXAMPLE_AGENT_KEY,
    EXAMPLE_APPROVER,
    EXAMPLE_AT,
    EXAMPLE_LEASE_ID,
    EXAMPLE_ORIGIN,
    EXAMPLE_REQUEST_ID,
    EXAMPLE_TARGET,
    EXAMPLE_TENANT,
    EXAMPLE_WINDOW,
    FIRST_DISPATCH,
    GRANT_REQUEST,
    GRANT_TERMS,
    GRANTED,
    LEASE_REQUEST,
    OUTCOME_COMMITTED,
    OUTCOME_FAILED,
    PREMISES,
    PROPOSE_AND_DISPATCH,
    PROPOSE_ONLY,
    PROPOSED,
    PROPOSED_BODY,
    RECONCILE_DAY,
    REFUND,
    REFUND_TERMS,
    TARGET_PAYMENTS,
    example_effect,
    example_findings,
    example_lease,
    example_lease_request,
    example_reconciliation,
    example_target,
    request_example,
    response_example,
)
from notary.selectors import Evidence
from notary.serializers import (
    AttestationInput,
    AttestationOutput,
    ConflictOutput,
    EffectDetailOutput,
    EffectDispatchInput,
    EffectOutcomeInput,
    EffectOutput,
    EffectProposeInput,
    EntryOutput,
    EvidenceOutput,
    ExportQueryInput,
    FindingOutput,
    FindingsQueryInput,
    LeaseFromMandateInput,
    LeaseGrantInput,
    LeaseOutput,
    LeaseRequestInput,
    LeaseRequestOutput,
    LeaseRevokeInput,
    LimitInput,
    ProposeOutput,
    ReceiptOutput,
    ReceiptQueryInput,
    ReconcileInput,
    ReconcileOutput,
    RecordedEntryOutput,
    TargetInput,
    TargetOutput,
    WhoAmIOutput,
)
from notary.services import PROPOSAL_KEYS_REFUSAL

# The refusals particular to an operation, as the code raises them; those of its kind (401, 403
# by role, 400/413/415 for a body, 400 for a query, 404 for a path's record, 429) come from
# notary.schema.AutoSchema, which merges these in (one of the same name replaces the kind's).
CONFLICT_SCHEMAS = {409: ConflictOutput}
EXPIRED = refusal(
    NotaryInputError("expires_at must be in the future"),
    "the lease would have ended already (a request too, granted after its expires_at)",
    name="expires_in_past",
)
BEYOND_AMOUNT = refusal(
    NotaryForbidden(
        "beyond_policy",
        f"amount_cents 2000000 is more than this tenant lets an approver grant "
        f"({DEFAULT_MAX_LEASE_AMOUNT_CENTS})",
    ),
    "`limits.amount_cents` above the tenant's max_lease_amount_cents",
    name="beyond_policy_amount",
)
BEYOND_DURATION = refusal(
    NotaryForbidden(
        "beyond_policy",
        f"a lease runs at most {DEFAULT_MAX_LEASE_DURATION.total_seconds():g} s under this "
        "tenant's policy",
    ),
    "`expires_at` further from now than the tenant's max_lease_duration",
    name="beyond_policy_duration",
)
GRANT_REFUSALS = [
    input_refusal(
        LeaseGrantInput,
        {"request_id": EXAMPLE_REQUEST_ID, "case_id": REFUND.case_id},
        "a `request_id` with terms: a request is granted on its own terms",
        name="request_with_terms",
    ),
    EXPIRED,
    refusal(
        NotaryInputError(
            "requested_by 'refund-robot' holds no live agent key of this tenant: the "
            "requester is the holder of the key that asks (POST /v1/lease-requests)"
        ),
        "`requested_by` is no holder of a live agent key of this tenant",
        name="unknown_requester",
    ),
    refusal(
        NotaryInputError(f"{EXAMPLE_APPROVER} requested this and cannot also approve it"),
        "the approver holds a key of the requester: no one approves their own request",
        name="self_approval",
    ),
    BEYOND_AMOUNT,
    BEYOND_DURATION,
    refusal(
        NotaryNotFound(f"no lease request {EXAMPLE_REQUEST_ID!r}"),
        "no such lease request for this tenant",
    ),
    refusal(
        NotaryConflict(
            "already_granted",
            f"{EXAMPLE_REQUEST_ID} was granted already",
            lease_id=EXAMPLE_LEASE_ID,
        ),
        "the request was granted already; `lease_id` names the lease",
    ),
]
# An SD-JWT as a trusted surface issues it (shortened): the issuer-signed JWT, then the
# disclosure of the mandate in its delegate_payload, each ending in '~'.
FROM_MANDATE = {
    "mandate": "eyJhbGciOiAiRVMyNTYiLCAidHlwIjogImRjK3NkLWp3dCJ9.eyJkZWxlZ2F0ZV9wYXlsb2FkIjogW3si"
    "Li4uIjogIjNZUnRaLWxCTmhJX1loZ2dTaHJkSGhyU3VEUFNwd012SjNWV2pVbmhEUU0ifV19.HvCGk7ye_c0LN2~"
    "WyJadEtTNUZTcklBWTZIbEdCNEhvN21nIiwgeyJ2Y3QiOiAibWFuZGF0ZS5wYXltZW50Lm9wZW4uMSJ9XQ~",
    "case_class": "refunds-queue",
    "action": "refund",
    "requested_by": EXAMPLE_AGENT,
}
MANDATE_REFUSALS = [
    refusal(
        NotaryInputError("mandate: not an SD-JWT: Invalid JWS Object"),
        "the mandate is not an AP2 SD-JWT mandate of an accepted type",
        name="invalid_mandate",
    ),
    refusal(
        NotaryForbidden(
            "untrusted_signature",
            "no user key this tenant trusts verifies the mandate's signature",
        ),
        "signed by no key the tenant trusts (or the signature is bad)",
    ),
    refusal(
        NotaryForbidden("mandate_expired", "the mandate expired at 2026-05-01T00:00:00.000000Z"),
        "the mandate's exp (or its execution_date not_after) has passed",
    ),
    refusal(
        NotaryForbidden(
            "unresolved_constraint",
            "constraint 'payment.budget' is not one a lease enforces (payment.amount_range "
            "and payment.execution_date are)",
        ),
        "a constraint or pre-set claim a lease cannot enforce: refused, never dropped",
    ),
    refusal(
        NotaryForbidden("mandate_binding", "checkout_hash is not the hash of checkout_jwt"),
        "the checkout mandate's hash does not bind its checkout, or the checkout's payload is "
        "not canonical JSON",
    ),
    refusal(
        NotaryConflict(
            "mandate_spent",
            "mandate 3f1c8e0b5d2a7f9c4e6b1a3d5f7c9e2b4a6d8f0c1e3b5a7d9f2c4e6a8b0d9a2e "
            "approves one payment and was granted already, to "
            f"{EXAMPLE_LEASE_ID}",
            lease_id=EXAMPLE_LEASE_ID,
        ),
        "a one-payment or Checkout Mandate grants one lease: it was granted already, to `lease_id`",
    ),
    EXPIRED,
    BEYOND_AMOUNT,
    BEYOND_DURATION,
]
LEASE_NOT_FOUND = refusal(
    NotaryNotFound(f"no lease {EXAMPLE_LEASE_ID!r}"), "no such lease for this tenant"
)
TARGET_REFUSALS = [
    refusal(
        NotaryInputError(f"target {EXAMPLE_TARGET!r} exists already"),
        "the tenant has a target of that name: a target is registered once (a 400, not a 409)",
        name="target_exists",
    ),
    refusal(
        NotaryInputError("only a tier-1 target dedupes on a key, so only it has a key window"),
        "claims that contradict each other: a key window off tier 1, tier 2 not queryable, "
        "lookup_needs_key without a queryable key window",
        name="contradicting_claims",
    ),
]
TARGET_NOT_FOUND = refusal(
    NotaryNotFound(f"no target {EXAMPLE_TARGET!r}: register it first"),
    "no target of that name for this tenant",
)
PREMISES_FAIL = refusal(
    NotaryInputError("premises do not hold (payment_settled): nothing to dispatch"),
    "a premise given with `holds: false`: nothing is dispatched on it",
    name="premises_do_not_hold",
)
PROPOSE_REFUSALS = [
    refusal(
        NotaryInputError(
            f"effect_id {'eff_' + 'x' * 27!r} is not the id of this case, target and action "
            f"({REFUND.effect_id})"
        ),
        "`effect_id` is not the one of the proposal's tenant, case, target and action "
        "(gate_client.ids.effect_id_for)",
        name="effect_id_mismatch",
    ),
    refusal(
        NotaryInputError(PROPOSAL_KEYS_REFUSAL),
        "the proposal has other keys than the PROPOSED body's",
        name="proposal_keys",
    ),
    refusal(
        NotaryInputError(f"proposal.tenant must be this key's tenant, {EXAMPLE_TENANT!r}"),
        "`proposal.tenant` is not the key's tenant",
        name="other_tenant",
    ),
    refusal(
        NotaryInputError("proposal.payload_hash is not the SHA-256 of the canonical payload"),
        "`proposal.payload_hash` is not the SHA-256 of the canonical JSON of `payload`",
        name="payload_hash_mismatch",
    ),
    refusal(
        NotaryInputError(f"no target {EXAMPLE_TARGET!r}: register it first"),
        "`proposal.target` is not one of the tenant's targets",
        name="unknown_target",
    ),
    PREMISES_FAIL,
]
EFFECT_NOT_FOUND = refusal(
    NotaryNotFound(f"no effect {REFUND.effect_id!r}"), "no such effect for this tenant"
)
_HOLDER = Hold(
    held_by=effect_id_for(REFUND.case_id, REFUND.target, "email", tenant=EXAMPLE_TENANT),
    since_seq=41,
    scope=HoldScope.CASE_TARGET,
    contradicted=False,
)
HELD = refusal(
    NotaryConflict("held", _HOLDER.detail, held_by=_HOLDER.held_by),
    "attempt 1 is held: an effect of the same case (on the same target, or any by the "
    "tenant's hold_scope) is AMBIGUOUS or contradicted and waits for a person, named in "
    "`held_by`. The PROPOSED and a HELD entry are recorded (HELD once per hold), nothing is "
    "dispatched, and no verdict is written: submit again once a person resolved `held_by`",
)


NOTHING_SPENT = Spent()


def _lease_refused(
    request: DispatchRequest, state: LeaseState, meaning: str, spent: Spent = NOTHING_SPENT
) -> OpenApiExample:
    """The 409 of a dispatch the lease does not cover, as the lease check words it (with
    `spent` of each of its budgets before it)."""
    decision = authorize(
        request=request,
        lease=state,
        now=EXAMPLE_AT + timedelta(minutes=30),
        spender=EXAMPLE_AGENT_KEY,
        spent_for=lambda budget: spent,
        hold=lambda: None,
    )
    if not isinstance(decision, Refuse):
        raise AssertionError("the example's lease covers its dispatch")
    reason, detail = decision.reason, decision.detail
    return refusal(
        NotaryConflict("lease_refused", detail, reason=reason),
        meaning,
        name=f"lease_refused_{reason}",
    )


_OVER_LIMIT = DispatchRequest.of_proposal(
    REFUND.effect_id,
    {**PROPOSED_BODY, "payload": {**REFUND.payload, "amount_cents": 5000}},
    1,
    PREMISES,
    False,
)
DISPATCH_REFUSALS = [
    PREMISES_FAIL,
    EFFECT_NOT_FOUND,
    refusal(
        NotaryConflict("attempt_taken", "attempt 1 asked, 1 recorded", current=1),
        "`attempt` is not the last recorded + 1: another process recorded it; `current` is "
        "the last recorded (recover the effect rather than retry)",
    ),
    refusal(
        NotaryConflict("already_settled", f"{REFUND.effect_id} has a verdict", current=1),
        "the effect has a verdict: nothing more is dispatched; `current` is the last attempt",
    ),
    HELD,
    _lease_refused(
        FIRST_DISPATCH,
        LeaseState(REFUND_TERMS, EXAMPLE_AT + timedelta(minutes=10), EXAMPLE_APPROVER),
        "the lease was revoked (`reason` lease_revoked)",
    ),
    _lease_refused(
        FIRST_DISPATCH,
        LeaseState(replace(REFUND_TERMS, expires_at=EXAMPLE_AT + timedelta(minutes=5))),
        "the lease has expired (`reason` lease_expired)",
    ),
    _lease_refused(
        _OVER_LIMIT,
        LeaseState(REFUND_TERMS),
        "the lease does not cover this case, action, payload or amount, or was requested by "
        "another holder than the caller's (`reason` lease_scope)",
    ),
    _lease_refused(
        FIRST_DISPATCH,
        LeaseState(
            replace(REFUND_TERMS, budgets=(Budget(BudgetPer.TENANT, 86400, max_count=100),))
        ),
        "a first dispatch under a budgeted lease would spend more than its budget has left in "
        "its window (`reason` lease_budget); effects that end not performed give theirs back",
        Spent(amount=184000, count=100),
    ),
]
OUTCOME_REFUSALS = [
    refusal(
        NotaryInputError("a COMMITTED entry needs result_ref (str)"),
        "the body lacks what its kind needs (COMMITTED: state, attempt, result_ref; FAILED: "
        "attempt, code; REFUSED: reason)",
        name="outcome_shape",
    ),
    refusal(
        NotaryInputError("COMMITTED names attempt 2, which was never made"),
        "a claim the effect's entries do not allow (an attempt never dispatched, what only "
        "the notary writes)",
        name="outcome_refused",
    ),
    EFFECT_NOT_FOUND,
    refusal(
        NotaryConflict(
            "evidence_arrived",
            "the service attested this effect after the evidence was read: ask again",
        ),
        "a refusal resting on the service's silence, but it attested meanwhile: read the "
        "evidence again (GET .../evidence) and decide again",
    ),
]
RECEIPT_REFUSALS = [
    input_refusal(
        ReceiptQueryInput, {"payload_hash": "ABC"}, "`payload_hash` is not 64 lowercase hex"
    ),
    EFFECT_NOT_FOUND,
    refusal(
        NotaryNotFound(f"{REFUND.effect_id}: payload {'0' * 64} was never submitted"),
        "`payload_hash` names no payload proposed for this effect",
        name="payload_not_found",
    ),
]
ATTESTATION_REFUSALS = [
    input_refusal(
        AttestationInput,
        {"effect_id": REFUND.effect_id},
        "neither `stage` nor `performed` (or the two disagree)",
        name="stage_missing",
    ),
    refusal(
        NotaryForbidden(
            "permission_denied",
            f"this service key attests for 'email', not for {EXAMPLE_TARGET!r}",
        ),
        "the effect's target is not one this service key attests for",
        name="permission_denied_scope",
    ),
    EFFECT_NOT_FOUND,
    refusal(
        NotaryConflict(
            "not_acknowledged",
            "a request for it was attested already: acting again could act twice",
        ),
        "a `before_acting` attestation refused (never dispatched, settled, attested already, "
        "contradicted, or its dispatch older than the target's max in-flight time): the service "
        "must not act",
    ),
    refusal(
        NotaryConflict(
            "not_acknowledged",
            "no intent to act on it was acknowledged: a write-ahead service acts only on an "
            "acknowledged request, so this answers none; kept as a contradiction for a person "
            "to see",
            kept_as=7,
        ),
        "a write-ahead service's `performed` or `not_performed` with no acknowledged "
        "`before_acting` before it: it answers nothing; a `performed` is kept (`kept_as`, its "
        "ledger entry) as a contradiction, and the effect waits for a person",
        name="not_acknowledged_outcome",
    ),
]


def _state_refused() -> OpenApiExample:
    try:
        check_state_filter("committed")
    except NotaryInputError as refused:
        meaning = "`state` is no receipt's final state (nor a prefix of one)"
        return refusal(refused, meaning, name="invalid_state")
    raise AssertionError("'committed' is no receipt's final state")


EXPORT_REFUSALS = [
    input_refusal(ExportQueryInput, {"from": "yesterday"}, "`from` or `to` is not a date-time"),
    _state_refused(),
    refusal(
        NotaryConflict(
            "no_checkpoint",
            f"log {EXAMPLE_ORIGIN} has no signed checkpoint yet: the notary's beat signs one "
            "every NOTARY_CHECKPOINT_INTERVAL_SECONDS, or its operator at once with "
            f"`manage.py sign_checkpoint --log {EXAMPLE_ORIGIN}`; export again once one is "
            "signed",
        ),
        "the tenant's log has no published checkpoint (signed, with the witness cosignatures "
        "it requires); `detail` says which and what gives it one",
    ),
    refusal(
        ExportDamaged("the checkpoint stored at size 12 signs 11"),
        "the ledger's rows do not prove what the export would say (the database was "
        "altered): run verify_ledger",
    ),
]


def _window_refused(since: datetime, until: datetime) -> OpenApiExample:
    try:
        Window(since, until)
    except ReconciliationError as refused:
        return refusal(
            NotaryInputError(str(refused)), "`since` is not before `until`", name="window_order"
        )
    raise AssertionError("the example's window is one")


RECONCILE_REFUSALS = [
    input_refusal(
        ReconcileInput,
        {"since": "2026-11-02T09:30:00"},
        "`since` or `until` is no date-time with its offset",
        name="invalid_time",
    ),
    _window_refused(EXAMPLE_WINDOW.until, EXAMPLE_WINDOW.since),
    refusal(
        NotaryInputError(f"a window is at most {reconciliation.MAX_WINDOW.days} days"),
        "the window is longer than one run lists",
        name="window_too_long",
    ),
    refusal(
        NotaryInputError("a window ends now or before: the provider has no future"),
        "`until` is in the future",
        name="window_in_future",
    ),
    TARGET_NOT_FOUND,
    refusal(
        NotaryConflict(
            "no_reconciliation_source",
            f"target {EXAMPLE_TARGET!r} has no reconciliation source: its operator sets one "
            "with `manage.py reconciliation_source`",
        ),
        "the target has no provider to list: nothing to reconcile it with",
    ),
    refusal(
        NotaryDependencyFailed(
            "provider_unavailable",
            f"{EXAMPLE_TARGET}: Stripe refused the refund list: AuthenticationError (HTTP 401, "
            "no code)",
        ),
        "the provider could not be listed (down, the key refused, an answer that is no list): "
        "nothing was recorded; the same request may succeed later",
    ),
]


def _principal(request: Request) -> ApiKeyPrincipal:
    principal = request.user
    assert isinstance(principal, ApiKeyPrincipal)  # the authentication class guarantees it
    return principal


def _entries(*entries: LedgerEntry) -> list[dict[str, Any]]:
    return [dict(EntryOutput(entry).data) for entry in entries]


_AFTER_DISPATCH = example_effect([PROPOSED, DISPATCHED])
_AFTER_COMMIT = example_effect([PROPOSED, DISPATCHED, COMMITTED])


class WhoAmIView(APIView):
    """Which tenant and role a key acts as: how a client checks its credentials."""

    @extend_schema(
        summary="Who this key is",
        description="The calling key's tenant, role, key id and holder, and the origin of the "
        "tenant's ledger log. Call it to check a key before relying on it, and to learn the "
        "log origin whose verifier keys (`GET /v1/logs/{origin}/vkey`) and checkpoints to "
        "trust.",
        responses=WhoAmIOutput,
        examples=[
            response_example(
                "agent",
                WhoAmIOutput(
                    {
                        "tenant": EXAMPLE_TENANT,
                        "role": Role.AGENT,
                        "key_id": EXAMPLE_AGENT_KEY,
                        "holder": EXAMPLE_AGENT,
                        "log": EXAMPLE_ORIGIN,
                    }
                ).data,
                "the demo's agent key",
                200,
            )
        ],
    )
    def get(self, request: Request) -> Response:
        principal = _principal(request)
        return Response(
            {
                "tenant": principal.tenant.slug,
                "role": principal.role,
                "key_id": principal.api_key.key_id,
                "holder": principal.api_key.holder,
                "log": principal.tenant.log.origin,
            }
        )


class LeaseGrantView(APIView):
    permission_classes = [role_required(Role.APPROVER)]

    @extend_schema(
        summary="Grant a lease",
        description="An approver authorizes an agent: the lease lets it dispatch `action` on "
        "`case_id` until `expires_at`, within `limits` (the payload's amounts) and, with "
        "`payload_hash`, that payload only. Grant a lease request by its `request_id` alone "
        "(the stronger way: the requester is the key that asked), or give the terms with "
        "`requested_by`, the holder of a live agent key of the tenant. Records LEASE_GRANTED "
        "in the tenant's ledger in the same transaction. No one approves their own request, "
        "and the tenant's grant policy bounds the amount and the duration.",
        request=LeaseGrantInput,
        responses={
            201: LeaseOutput,
            **error_responses(*GRANT_REFUSALS, schemas=CONFLICT_SCHEMAS),
        },
        examples=[
            request_example(
                "grant_request", GRANT_REQUEST, "grant the agent's lease request on its terms"
            ),
            request_example(
                "grant_terms", GRANT_TERMS, "the demo's grant: terms, for refund-bot's key"
            ),
            response_example(
                "granted", LeaseOutput(example_lease()).data, "the lease, granted", 201
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        given = LeaseGrantInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        if "request_id" in given.validated_data:
            lease = services.lease_request_grant(
                tenant=principal.tenant, approver=principal.api_key, **given.validated_data
            )
        else:
            lease = services.lease_grant(
                tenant=principal.tenant, approver=principal.api_key, **given.validated_data
            )
        return Response(LeaseOutput(lease).data, status=201)


class LeaseFromMandateView(APIView):
    permission_classes = [role_required(Role.APPROVER)]

    @extend_schema(
        summary="Grant a lease from an AP2 mandate",
        description="An approver grants a lease whose money terms are an AP2 v0.2 mandate's, "
        "verified against the public keys the tenant trusts (`manage.py trust_mandate_key`): "
        "an open Payment Mandate (`mandate.payment.open.1`) becomes a standing lease, each "
        "effect's `amount_field` at most its `payment.amount_range` max, in its currency; a "
        "closed Checkout Mandate (`mandate.checkout.1`) a lease for exactly the payload its "
        "merchant-signed `checkout_jwt` carries. The lease ends when the mandate does, or "
        "earlier at `expires_at`. The approver names the action, the cases and the agent. "
        "LEASE_GRANTED keeps the mandate as received, with the keys that verified it. A "
        "mandate that is unreadable (400), signed by no trusted key, expired, bound to "
        "another checkout, or has a constraint a lease cannot enforce (403) writes nothing. "
        "A mandate is spent in the ledger: a one-payment or Checkout Mandate grants once "
        "(409 `mandate_spent`); an open mandate's leases share its budget.",
        request=LeaseFromMandateInput,
        responses={201: LeaseOutput, **error_responses(*MANDATE_REFUSALS)},
        examples=[
            request_example(
                "intent",
                FROM_MANDATE,
                "a finance lead's open Payment Mandate, for refund-bot on refunds-queue",
            ),
            response_example(
                "granted", LeaseOutput(example_lease()).data, "the lease, granted", 201
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        given = LeaseFromMandateInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        lease = lease_grant_from_mandate(
            tenant=principal.tenant, approver=principal.api_key, **given.validated_data
        )
        return Response(LeaseOutput(lease).data, status=201)


class LeaseRequestView(APIView):
    """An agent asks for a lease; an approver who holds none of its holder's keys grants it."""

    permission_classes = [role_required(Role.AGENT)]

    @extend_schema(
        summary="Ask for a lease",
        description="An agent asks for the authority to act: the case, action, expiry and "
        "limits it needs (optionally the exact payload). The requester is the holder of the "
        "calling key, whatever the body says. Nothing is authorized until an approver who "
        "holds none of the requester's keys grants it (`POST /v1/leases` with its "
        "`request_id`); until then `lease_id` is null.",
        request=LeaseRequestInput,
        responses={201: LeaseRequestOutput, **error_responses(EXPIRED)},
        examples=[
            request_example("refund", LEASE_REQUEST, "the demo's refund, at most 2000 cents"),
            response_example(
                "asked",
                LeaseRequestOutput(example_lease_request()).data,
                "the request, waiting for an approver",
                201,
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        given = LeaseRequestInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        asked = services.lease_request(
            tenant=principal.tenant, requester=principal.api_key, **given.validated_data
        )
        return Response(LeaseRequestOutput(asked).data, status=201)


class LeaseDetailView(APIView):
    permission_classes = [role_required(Role.APPROVER, Role.AGENT, Role.AUDITOR)]

    @extend_schema(
        summary="Read a lease",
        description="A lease's terms, who requested and granted it, whether it was revoked, "
        "and the ledger seqs of its grant and revocation. The gate reads it when recovering an "
        "effect, to re-check that the lease still covers a resend.",
        responses={200: LeaseOutput, **error_responses(LEASE_NOT_FOUND)},
        examples=[response_example("live", LeaseOutput(example_lease()).data, "a live lease", 200)],
    )
    def get(self, request: Request, lease_id: str) -> Response:
        lease = selectors.lease_get(tenant=_principal(request).tenant, lease_id=lease_id)
        return Response(LeaseOutput(lease).data)


class LeaseRevokeView(APIView):
    permission_classes = [role_required(Role.APPROVER)]

    @extend_schema(
        summary="Revoke a lease",
        description="Ends a lease now, recording LEASE_REVOKED: a dispatch after it is "
        "refused (409 `lease_refused`, reason `lease_revoked`); what was dispatched before "
        "stands. Revoking a revoked lease changes nothing and answers it as it is.",
        request=LeaseRevokeInput,
        responses={200: LeaseOutput, **error_responses(LEASE_NOT_FOUND)},
        examples=[
            request_example(
                "withdrawn", {"reason": "the customer withdrew the refund request"}, "why"
            ),
            response_example(
                "revoked", LeaseOutput(example_lease(revoked=True)).data, "the lease, revoked", 200
            ),
        ],
    )
    def post(self, request: Request, lease_id: str) -> Response:
        given = LeaseRevokeInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        selectors.lease_get(tenant=principal.tenant, lease_id=lease_id)
        revocation = services.lease_revoke(
            tenant=principal.tenant,
            lease_id=lease_id,
            by=principal.api_key.holder,
            reason=given.validated_data["reason"],
        )
        return Response(LeaseOutput(revocation.lease).data)


class TargetListView(APIView):
    """The tenant's targets and what each declares: the one declaration the gate and the
    notary's recovery both go by. Approvers register; agents and auditors read."""

    def get_permissions(self) -> list[BasePermission]:
        if self.request.method == "POST":
            return [role_required(Role.APPROVER)()]
        return [role_required(Role.APPROVER, Role.AGENT, Role.AUDITOR)()]

    @extend_schema(
        summary="List the targets",
        description="The tenant's targets (the services its effects are sent to), each with "
        "what it declares: its tier, whether it can be looked up, its windows. The gate and "
        "the notary's recovery both go by this one declaration.",
        responses=TargetOutput(many=True),
        examples=[
            response_example(
                "payments", TargetOutput(example_target()).data, "the demo's one target", 200
            )
        ],
    )
    def get(self, request: Request) -> Response:
        targets = selectors.targets_of(tenant=_principal(request).tenant)
        return Response(TargetOutput(targets, many=True).data)

    @extend_schema(
        summary="Register a target",
        description="Declares a service effects are sent to. Its claims (tier 1 dedupes on an "
        "idempotency key for `key_window_seconds`, tier 2 can be looked up, tier 3 neither; "
        "the in-flight and evidence windows) are what recovery decides by, so claims that "
        "contradict each other are refused, not stored. A name is registered once; there is "
        "no update.",
        request=TargetInput,
        responses={201: TargetOutput, **error_responses(*TARGET_REFUSALS)},
        examples=[
            request_example(
                "payments", TARGET_PAYMENTS, "the demo's payment service: tier 1, 24 h key"
            ),
            response_example(
                "registered", TargetOutput(example_target()).data, "the target, registered", 201
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        given = TargetInput(data=request.data)
        given.is_valid(raise_exception=True)
        target = services.target_register(tenant=_principal(request).tenant, **given.validated_data)
        return Response(TargetOutput(target).data, status=201)


class TargetDetailView(APIView):
    permission_classes = [role_required(Role.APPROVER, Role.AGENT, Role.AUDITOR)]

    @extend_schema(
        summary="Read a target",
        description="One target's declaration: what the gate reads before recovering an "
        "effect sent to it (NotaryJournal.target_declaration).",
        responses={200: TargetOutput, **error_responses(TARGET_NOT_FOUND)},
        examples=[
            response_example(
                "payments", TargetOutput(example_target()).data, "the demo's target", 200
            )
        ],
    )
    def get(self, request: Request, name: str) -> Response:
        target = selectors.target_get(tenant=_principal(request).tenant, name=name)
        return Response(TargetOutput(target).data)


class EffectProposeView(APIView):
    permission_classes = [role_required(Role.AGENT)]

    @extend_schema(
        summary="Propose an effect (and dispatch attempt 1)",
        description="Records PROPOSED: the gate's decision to act (its payload, the premises "
        "as observed, the lease it acts under) before anything is sent. Idempotent on "
        "`effect_id`, a hash of the tenant, case, target and action: a retry, or a re-decided "
        "payload, is answered 200 with the proposal that stands. With `dispatch` (every "
        "premise holding) it also records DISPATCHED attempt 1 in the same transaction, when "
        "the standing proposal is this one and nothing was dispatched: the gate's one round "
        "trip before it calls the target. A lease that does not cover that dispatch is no "
        "error: the PROPOSED stands, nothing is dispatched and `dispatch_refused` says why "
        "(`reason` lease_expired, lease_revoked, lease_scope or lease_budget). A held one is "
        "a 409 `held`: the PROPOSED stands with a HELD entry naming the effect that holds it.",
        request=EffectProposeInput,
        responses={
            200: ProposeOutput,
            201: ProposeOutput,
            **error_responses(*PROPOSE_REFUSALS, HELD, schemas=CONFLICT_SCHEMAS),
        },
        examples=[
            request_example(
                "propose_and_dispatch",
                PROPOSE_AND_DISPATCH,
                "the demo's refund, as NotaryJournal.propose_and_dispatch sends it",
            ),
            request_example(
                "propose_only",
                PROPOSE_ONLY,
                "proposed alone (NotaryJournal.propose; dispatched by POST .../dispatch)",
            ),
            response_example(
                "proposed_and_dispatched",
                ProposeOutput(
                    {
                        "created": True,
                        "effect": _AFTER_DISPATCH,
                        "entries": [PROPOSED, DISPATCHED],
                        "dispatched": DISPATCHED,
                        "dispatch_refused": None,
                    }
                ).data,
                "PROPOSED and DISPATCHED attempt 1, recorded now",
                201,
            ),
            response_example(
                "standing",
                ProposeOutput(
                    {
                        "created": False,
                        "effect": _AFTER_DISPATCH,
                        "entries": [PROPOSED, DISPATCHED],
                        "dispatched": None,
                        "dispatch_refused": None,
                    }
                ).data,
                "a retry: the proposal stands, attempt 1 was dispatched before",
                200,
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        given = EffectProposeInput(data=request.data)
        given.is_valid(raise_exception=True)
        tenant = _principal(request).tenant
        dispatch = given.validated_data.get("dispatch")
        proposed = services.effect_propose(
            tenant=tenant,
            effect_id=given.validated_data["effect_id"],
            proposal=given.validated_data["proposal"],
            dispatch_premises=dispatch["premises"] if dispatch is not None else None,
            dispatcher=_principal(request).api_key,
        )
        refusal = proposed.refusal
        body = {
            "created": proposed.created,
            "effect": proposed.effect,
            "entries": proposed.entries,
            "dispatched": proposed.dispatched,
            "dispatch_refused": (
                {"reason": refusal.extra["reason"], "detail": refusal.detail} if refusal else None
            ),
        }
        return Response(ProposeOutput(body).data, status=201 if proposed.created else 200)


class EffectUnsettledView(APIView):
    permission_classes = [role_required(Role.AGENT, Role.AUDITOR)]

    @extend_schema(
        summary="List unsettled effects",
        description="The tenant's effects proposed or dispatched with no verdict yet, oldest "
        "first, at most `limit`: what the gate's recover() settles after a crash (it checks "
        "the log's history first), and what an auditor watches for effects left in flight.",
        parameters=[LimitInput],
        responses={
            200: EffectOutput(many=True),
            **error_responses(
                input_refusal(LimitInput, {"limit": "0"}, "`limit` is not from 1 to 10000")
            ),
        },
        examples=[
            response_example(
                "in_flight",
                EffectOutput(_AFTER_DISPATCH).data,
                "the demo's refund, dispatched and not settled",
                200,
            )
        ],
    )
    def get(self, request: Request) -> Response:
        given = LimitInput(data=request.query_params.dict())
        given.is_valid(raise_exception=True)
        effects = selectors.unsettled_effects(
            tenant=_principal(request).tenant, limit=given.validated_data["limit"]
        )
        return Response(EffectOutput(effects, many=True).data)


class EffectDetailView(APIView):
    permission_classes = [role_required(Role.AGENT, Role.AUDITOR)]

    @extend_schema(
        summary="Read an effect",
        description="The effect as the ledger has it: its projection (state, attempts, "
        "result), its entries, and its lease's grant and revocation entries, everything its "
        "receipt is derived from. The gate reads its history here before recovering it.",
        responses={200: EffectDetailOutput, **error_responses(EFFECT_NOT_FOUND)},
        examples=[
            response_example(
                "committed",
                EffectDetailOutput(
                    {
                        "effect": _AFTER_COMMIT,
                        "entries": [PROPOSED, DISPATCHED, COMMITTED],
                        "lease_entries": [GRANTED],
                    }
                ).data,
                "the demo's refund, committed",
                200,
            )
        ],
    )
    def get(self, request: Request, effect_id: str) -> Response:
        tenant = _principal(request).tenant
        effect = selectors.effect_get(tenant=tenant, effect_id=effect_id)
        history, lease_entries = selectors.effect_entries_for_receipt(tenant=tenant, effect=effect)
        body = {"effect": effect, "entries": history, "lease_entries": lease_entries}
        return Response(EffectDetailOutput(body).data)


class EffectDispatchView(APIView):
    permission_classes = [role_required(Role.AGENT)]

    @extend_schema(
        summary="Dispatch an attempt",
        description="Records DISPATCHED attempt `attempt` after checking, under the log's "
        "lock and at that one instant, that the effect's lease covers it and was requested "
        "by the caller's holder: the ledger's order alone then shows whether the lease was "
        "live when the effect fired. Call it right before sending to the target; attempt "
        "n + 1 after n is a recovery's resend (`recovery: true`). The gate never retries it: "
        "after a lost answer, recovery settles the effect. Attempt 1 of an effect whose case "
        "has another effect waiting for a person is held (409 `held`, a HELD entry, no "
        "verdict); a resend is never held.",
        request=EffectDispatchInput,
        responses={
            201: EntryOutput,
            **error_responses(*DISPATCH_REFUSALS, schemas=CONFLICT_SCHEMAS),
        },
        examples=[
            request_example(
                "first", DISPATCH_FIRST, "attempt 1, as NotaryJournal.dispatch sends it"
            ),
            request_example("resend", DISPATCH_RESEND, "attempt 2: recover()'s resend"),
            response_example(
                "dispatched", _entries(DISPATCHED)[0], "the DISPATCHED entry of attempt 1", 201
            ),
        ],
    )
    def post(self, request: Request, effect_id: str) -> Response:
        given = EffectDispatchInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        entry = services.effect_dispatch(
            tenant=principal.tenant,
            effect_id=effect_id,
            dispatcher=principal.api_key,
            **given.validated_data,
        )
        return Response(EntryOutput(entry).data, status=201)


class EffectOutcomeView(APIView):
    permission_classes = [role_required(Role.AGENT)]

    @extend_schema(
        summary="Record an outcome",
        description="Records how the effect ended, as the agent learned it: COMMITTED (the "
        "target's `result_ref`), FAILED (its `code`), REFUSED (a dispatch refused) or "
        "AMBIGUOUS (not known). The protocol's precedence decides: a verdict that already "
        "stands is answered 200 (`recorded: false`) as it stands, so a retry and two "
        "recovering agents converge on one; an answer that contradicts it is kept as "
        "evidence. The answer carries the entries the receipt is derived from.",
        request=EffectOutcomeInput,
        responses={
            200: RecordedEntryOutput,
            201: RecordedEntryOutput,
            **error_responses(*OUTCOME_REFUSALS, schemas=CONFLICT_SCHEMAS),
        },
        examples=[
            request_example(
                "committed", OUTCOME_COMMITTED, "the target refunded (protocol.sent_body)"
            ),
            request_example("failed", OUTCOME_FAILED, "the target declined"),
            response_example(
                "recorded",
                RecordedEntryOutput(
                    {
                        "recorded": True,
                        "entry": COMMITTED,
                        "receipt_entries": [GRANTED, PROPOSED, DISPATCHED, COMMITTED],
                    }
                ).data,
                "COMMITTED, recorded now",
                201,
            ),
        ],
    )
    def post(self, request: Request, effect_id: str) -> Response:
        given = EffectOutcomeInput(data=request.data)
        given.is_valid(raise_exception=True)
        tenant = _principal(request).tenant
        entry, recorded, history = services.effect_record_outcome(
            tenant=tenant, effect_id=effect_id, **given.validated_data
        )
        lease_id = next(e for e in history if e.kind == "PROPOSED").body_value()["lease_id"]
        lease_entries = selectors.lease_entries(tenant=tenant, lease_id=lease_id)
        receipt_entries = sorted([*history, *lease_entries], key=lambda e: e.seq)
        body = {"recorded": recorded, "entry": entry, "receipt_entries": receipt_entries}
        return Response(RecordedEntryOutput(body).data, status=201 if recorded else 200)


class EffectReceiptView(APIView):
    permission_classes = [role_required(Role.AGENT, Role.AUDITOR)]

    @extend_schema(
        summary="Fetch a proved receipt",
        description="The effect's receipt (its final state and what authorized it, derived "
        "from its entries) with those entries and a C2SP tlog-proof of each against the "
        "latest published checkpoint (null until one covers it): checkable offline with the "
        "log's public key alone (`python -m gate_client.verify`). With `payload_hash`, the "
        "receipt of a re-decided payload that was refused.",
        parameters=[ReceiptQueryInput],
        responses={200: ReceiptOutput, **error_responses(*RECEIPT_REFUSALS)},
    )
    def get(self, request: Request, effect_id: str) -> Response:
        given = ReceiptQueryInput(data=request.query_params.dict())
        given.is_valid(raise_exception=True)
        proved = selectors.effect_receipt(
            tenant=_principal(request).tenant,
            effect_id=effect_id,
            payload_hash=given.validated_data.get("payload_hash"),
        )
        body = {
            "receipt": proved.receipt.to_dict(),
            "entries": proved.entries,
            "checkpoint": proved.checkpoint,
            "proofs": {str(seq): proof for seq, proof in proved.proofs.items()},
        }
        return Response(ReceiptOutput(body).data)


class AttestationView(APIView):
    permission_classes = [role_required(Role.SERVICE)]

    @extend_schema(
        summary="Attest an effect (a cooperating service)",
        description="A cooperating service's word on an effect sent to a target its key "
        "attests for. `stage: before_acting` is the write-ahead attestation: acknowledged "
        "(201, `settled: acknowledged`) only when the service may act now; else 409 "
        "`not_acknowledged`, and the service must not act. `performed` and `not_performed` "
        "(or `performed: true/false`) are evidence, which settles a dispatched effect the way "
        "a provider's webhook does; `settled` says how. For a write-ahead target they count "
        "only after an acknowledged `before_acting`: else 409 `not_acknowledged`, a "
        "`performed` kept as a contradiction for a person.",
        request=AttestationInput,
        responses={
            201: AttestationOutput,
            **error_responses(*ATTESTATION_REFUSALS, schemas=CONFLICT_SCHEMAS),
        },
        examples=[
            request_example(
                "before_acting", ATTEST_BEFORE, "may the service act? (testkit's Attestor)"
            ),
            request_example(
                "performed", ATTEST_PERFORMED, "the service did it, under this reference"
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        given = AttestationInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        entry, settled = services.attestation_record(
            tenant=principal.tenant,
            by=principal.api_key.holder,
            service_key=principal.api_key,
            **given.validated_data,
        )
        return Response(AttestationOutput({"settled": settled, "entry": entry}).data, status=201)


class EffectEvidenceView(APIView):
    permission_classes = [role_required(Role.AGENT, Role.AUDITOR)]

    @extend_schema(
        summary="Read an effect's evidence",
        description="What the notary's evidence (providers' webhooks, services' attestations) "
        "says of the effect, as facts: performed (with its result_ref), not performed, an "
        "intent to act, or nothing. The gate's recovery asks it of targets it cannot look up; "
        "whether nothing seen counts is the protocol's call, by the target's declaration.",
        responses={200: EvidenceOutput, **error_responses(EFFECT_NOT_FOUND)},
        examples=[
            response_example(
                "nothing",
                EvidenceOutput(Evidence("nothing")).data,
                "no webhook or attestation yet",
                200,
            )
        ],
    )
    def get(self, request: Request, effect_id: str) -> Response:
        evidence = selectors.effect_evidence(tenant=_principal(request).tenant, effect_id=effect_id)
        return Response(EvidenceOutput(evidence).data)


class ExportReceiptsView(APIView):
    permission_classes = [role_required(Role.AUDITOR)]

    @extend_schema(
        summary="Export receipts",
        description="The tenant's receipts as an interlock-receipts-export/v1 stream (JSON "
        "Lines): a header with the published checkpoint and the log's verifier keys, a "
        "receipt line per effect proposed in [`from`, `to`) whose final state matches "
        "`state`, the entries and proofs they rest on, and a footer with the counts; "
        "checkable offline. Refused (409) before the header when the log has no published "
        "checkpoint or its rows do not prove what the export would say; damage found after "
        "the header ends the stream without its footer.",
        parameters=[
            OpenApiParameter("from", OpenApiTypes.DATETIME, description="proposed at or after"),
            OpenApiParameter("to", OpenApiTypes.DATETIME, description="proposed before"),
            OpenApiParameter(
                "state",
                {"type": "string", "maxLength": 100},
                description="final state (e.g. AMBIGUOUS, FAILED:card_declined), or a prefix "
                "ending in * (COMMITTED*); a state no receipt can have is refused (400)",
            ),
        ],
        responses={
            (200, "application/x-ndjson"): OpenApiTypes.STR,
            **error_responses(*EXPORT_REFUSALS, schemas=CONFLICT_SCHEMAS),
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        """The tenant's receipts as an interlock-receipts-export/v1 stream (JSON Lines)."""
        given = ExportQueryInput(data=request.query_params.dict())
        given.is_valid(raise_exception=True)
        lines = export_receipts(
            tenant=_principal(request).tenant,
            since=given.validated_data.get("from_"),
            until=given.validated_data.get("to"),
            state=given.validated_data.get("state"),
        )
        first = next(lines)  # the header: a bad state, or no checkpoint, is refused before it
        return StreamingHttpResponse(
            itertools.chain([first], lines), content_type="application/x-ndjson"
        )


def _reconciled(done: reconciliation.Reconciliation) -> dict[str, Any]:
    return {
        "target": done.target.name,
        "window": done.window,
        "listed": done.listed,
        "totals": done.totals(),
        "findings": done.written,
    }


class TargetReconcileView(APIView):
    permission_classes = [role_required(Role.APPROVER)]

    @extend_schema(
        summary="Reconcile a target with its provider",
        description="Lists what the target's provider did in [`since`, `until`) (by default "
        "the last 24 hours; at most 31 days, ending now or before), compares it with the "
        "tenant's admitted effects and records each new finding as a RECONCILED ledger entry: "
        "an object no admitted effect asked for, a happened effect the provider does not show, "
        "an object of an effect not committed, a duplicate, an amount that differs from the "
        "effect's payload. A finding is evidence for a person; it changes no effect's state. "
        "The answer holds the findings this run wrote (201; 200 when every one was recorded "
        "before) and the totals of all it made. A provider that cannot be listed is a 424 "
        "`provider_unavailable` and records nothing: a list that could not be read proves "
        "nothing. The target's provider and key are its reconciliation source, set by the "
        "notary's operator.",
        request=ReconcileInput,
        responses={
            200: ReconcileOutput,
            201: ReconcileOutput,
            **error_responses(*RECONCILE_REFUSALS, schemas=CONFLICT_SCHEMAS),
        },
        examples=[
            request_example("day", RECONCILE_DAY, "the day after the demo's lease was granted"),
            response_example(
                "found",
                ReconcileOutput(_reconciled(example_reconciliation())).data,
                "three refunds listed: the demo's matched, one made by hand, one made again "
                "by hand with the demo refund's metadata for 5.00",
                201,
            ),
        ],
    )
    def post(self, request: Request, name: str) -> Response:
        given = ReconcileInput(data=request.data)
        given.is_valid(raise_exception=True)
        tenant = _principal(request).tenant
        done = reconciliation.target_reconcile(
            tenant=tenant,
            target=selectors.target_get(tenant=tenant, name=name),
            since=given.validated_data.get("since"),
            until=given.validated_data.get("until"),
        )
        return Response(
            ReconcileOutput(_reconciled(done)).data, status=201 if done.written else 200
        )


class FindingListView(APIView):
    permission_classes = [role_required(Role.AUDITOR, Role.APPROVER)]

    @extend_schema(
        summary="List reconciliation findings",
        description="The tenant's reconciliation findings, oldest first (by the seq of their "
        "RECONCILED ledger entries), of one target, kind or effect and found in "
        "[`found_since`, `found_until`) when given: each with its seq, its window, the effect "
        "and its state when found, and the provider's record as the evidence (for "
        "`amount_differs`, both amounts). At most `limit` a page; the next page is `after` the "
        "last seq shown. A finding is evidence for a person, never a verdict.",
        parameters=[FindingsQueryInput],
        responses={
            200: FindingOutput(many=True),
            **error_responses(
                input_refusal(FindingsQueryInput, {"kind": "missing"}, "`kind` is no finding's")
            ),
        },
        examples=[
            response_example(
                finding.kind,
                FindingOutput(finding).data,
                f"reconciling the demo's target over a day found {summary}",
                200,
            )
            for finding, summary in zip(
                example_findings(),
                [
                    "a second refund for the demo's effect, for 5.00 where its payload says 20.00",
                    "that second refund: a duplicate of the demo's",
                    "a refund made by hand, naming no effect",
                ],
                strict=True,
            )
        ],
    )
    def get(self, request: Request) -> Response:
        given = FindingsQueryInput(data=request.query_params.dict())
        given.is_valid(raise_exception=True)
        findings = selectors.reconciliation_findings(
            tenant=_principal(request).tenant, **given.validated_data
        )
        return Response(FindingOutput(findings, many=True).data)
