"""API input and output shapes; validation only, the rules live in services."""

from __future__ import annotations

import base64
import functools
import math
from datetime import timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.utils.serializer_helpers import BindingDict

from gate_client.budgets import MAX_WINDOW_SECONDS, BudgetPer
from gate_client.mandates import MAX_TOKEN
from gate_client.protocol import AGENT_VERDICT_KINDS, COMMITTED_STATES
from gate_client.reconciliation import FindingKind
from ledger.api.schema import ErrorOutput
from ledger.core.canonical import MAX_SAFE_INTEGER, CanonicalJSONError, check_depth
from ledger.core.entries import MAX_EFFECT_ID_LENGTH, format_timestamp
from ledger.core.entries import Entry as LedgerEntry
from notary.models import DEFAULT_REVIEW_SLA, Effect, Lease, LeaseRequest, Target
from notary.services import (
    MAX_ACTION,
    MAX_CASE_ID,
    MAX_FAILURE_CODE,
    MAX_LEASE_ID,
    MAX_LIMIT_NAME,
    MAX_LIMITS,
    MAX_PREMISE_NAME,
    MAX_PREMISES,
    MAX_RESULT_REF,
    MAX_REVOCATION_REASON,
    MAX_TARGET_NAME,
)

# What the ids and names the ledger stores may hold: no control character (PostgreSQL text
# holds no NUL); the services refuse one too.
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
PAYLOAD_HASH = r"^[0-9a-f]{64}$"  # SHA-256 of the canonical payload, lowercase hex
CURRENCY = r"^[A-Za-z]{3}$"  # ISO 4217; stored upper case
CASE_CLASS_HELP = "a standing lease: every case the proposal says is of this class"
CASE_PATTERN_HELP = 'a standing lease: every case id matching this pattern ("RF-*")'
HASH_MESSAGE = "payload_hash must be 64 lowercase hex digits (SHA-256)"
TARGET_NAME = r"^[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?$"  # notary.services._TARGET_NAME
MONEY_FIELD = r"^[A-Za-z_][A-Za-z0-9_]{0,99}$"  # a payload key (gate_client.money)
FINDING_KINDS = [str(kind) for kind in FindingKind]  # SPECTACULAR_SETTINGS' FindingKindEnum
OUTCOME_KINDS = sorted(AGENT_VERDICT_KINDS)  # and its KindEnum


# JSON bodies are typed: a field the schema declares a string, integer, number or boolean takes
# only that JSON type, not DRF's coercions ("1" as 1, 1 as "1", "yes" as true), so what the
# schema refuses the API refuses too. (Query parameters, always strings, keep DRF's fields.)


class _JsonString(serializers.Field):  # type: ignore[type-arg]
    """Takes a JSON string only, then validates as the string field it is mixed into."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class _JsonText(_JsonString):
    """A JSON string taken as given, not trimmed: a trimmed string is another string than the
    one sent (and than the one the schema's maxLength bounds), and trimming would first strip
    the control characters at its ends that a pattern refuses."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(*args, **kwargs)


class _JsonNumber(serializers.Field):  # type: ignore[type-arg]
    """Takes a JSON number only (not a string, not true or false), then validates as the
    number field it is mixed into."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool | str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharField(_JsonText, serializers.CharField):
    """Free text: white space alone is blank, as the empty string is (unless allow_blank)."""

    def run_validation(self, data: Any = serializers.empty) -> Any:
        if isinstance(data, str) and data and not data.strip() and not self.allow_blank:
            self.fail("blank")
        return super().run_validation(data)


class StrictRegexField(_JsonText, serializers.RegexField):
    pass


class StrictURLField(_JsonText, serializers.URLField):
    pass


class StrictIntegerField(_JsonNumber, serializers.IntegerField):
    pass


class StrictFloatField(_JsonNumber, serializers.FloatField):
    pass


class AwareDateTimeField(_JsonString, serializers.DateTimeField):
    """A date-time with its offset (RFC 3339's): one without is refused, not read as UTC."""

    default_error_messages = {
        **serializers.DateTimeField.default_error_messages,
        "invalid": "an RFC 3339 date-time with its offset, e.g. 2026-12-01T09:00:00Z",
        "naive": "a date-time with its offset (Z for UTC)",
    }

    def enforce_timezone(self, value: Any) -> Any:
        if timezone.is_naive(value):
            self.fail("naive")
        return super().enforce_timezone(value)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


def text(max_length: int, **kwargs: Any) -> StrictRegexField:
    """An id or name the ledger stores: a non-empty JSON string of at most `max_length`
    characters, no control character."""
    return StrictRegexField(
        PRINTABLE,
        max_length=max_length,
        error_messages={"invalid": "a string with no control character"},
        **kwargs,
    )


def bounded_depth(value: Any) -> None:
    """A JSON value nested no deeper than the ledger's one limit (canonical.MAX_DEPTH)."""
    try:
        check_depth(value)
    except CanonicalJSONError as exc:
        raise serializers.ValidationError(str(exc)) from exc


@extend_schema_field(
    {
        "type": "object",
        "maxProperties": MAX_LIMITS,
        "additionalProperties": {"type": "integer", "minimum": 1, "maximum": MAX_SAFE_INTEGER},
        "description": f"payload field name (1-{MAX_LIMIT_NAME} characters, no control "
        f"character) to its maximum, a positive integer of at most 2^53 - 1; at most "
        f"{MAX_LIMITS} of them. A payload's amount under it must be from 1 to the maximum.",
    }
)
class LimitsField(serializers.DictField):
    """Numeric payload fields and their maxima: amounts, so positive integers that a double
    holds exactly (the ledger's canonical JSON); the names are checked by the service."""

    child = StrictIntegerField(min_value=1, max_value=MAX_SAFE_INTEGER)


class BudgetInput(serializers.Serializer):  # type: ignore[type-arg]
    """A rolling budget (gate_client.budgets.Budget): at most `max_amount` (minor units of the
    lease's currency) and `max_count` effects per `window_seconds`, for every agent key
    together (`tenant`) or each agent key on its own (`agent_key`)."""

    per = serializers.ChoiceField(choices=[str(p) for p in BudgetPer])
    window_seconds = StrictIntegerField(min_value=1, max_value=MAX_WINDOW_SECONDS)
    max_amount = StrictIntegerField(
        min_value=1, max_value=MAX_SAFE_INTEGER, required=False, allow_null=True
    )
    max_count = StrictIntegerField(
        min_value=1, max_value=MAX_SAFE_INTEGER, required=False, allow_null=True
    )


BUDGETS_HELP = (
    "rolling budgets, spent at each effect's first dispatch and given back when it ends not "
    "performed; one per `per` at most; an amount budget needs the lease's currency"
)


class LeaseRequestInput(serializers.Serializer):  # type: ignore[type-arg]
    """What an agent asks for; the requester is its key's holder. One case, or for a standing
    lease a class of cases or a pattern of case ids: exactly one of the three."""

    case_id = text(MAX_CASE_ID, required=False)
    case_class = text(MAX_CASE_ID, required=False, help_text=CASE_CLASS_HELP)
    case_pattern = text(MAX_CASE_ID, required=False, help_text=CASE_PATTERN_HELP)
    action = text(MAX_ACTION)
    expires_at = serializers.DateTimeField(help_text="in the future")
    limits = LimitsField(required=False)
    payload_hash = StrictRegexField(
        PAYLOAD_HASH,
        required=False,
        allow_null=True,
        error_messages={"invalid": HASH_MESSAGE},
        help_text="pin the lease to this exact payload (SHA-256 of its canonical JSON)",
    )
    currency = StrictRegexField(
        CURRENCY,
        required=False,
        allow_null=True,
        error_messages={"invalid": "currency: three letters of ISO 4217, e.g. USD"},
        help_text="approve only payloads in this currency; the limits count in it",
    )
    budgets = BudgetInput(many=True, required=False, help_text=BUDGETS_HELP)


class LeaseGrantInput(serializers.Serializer):  # type: ignore[type-arg]
    """Either `request_id` alone (grant that request on its terms), or the terms with
    `requested_by`, the holder of an agent key of the tenant: `case_id`, `action`, `expires_at`
    and `requested_by` are then required."""

    request_id = text(40, required=False, help_text="a lease request, granted on its own terms")
    case_id = text(MAX_CASE_ID, required=False)
    case_class = text(MAX_CASE_ID, required=False, help_text=CASE_CLASS_HELP)
    case_pattern = text(MAX_CASE_ID, required=False, help_text=CASE_PATTERN_HELP)
    action = text(MAX_ACTION, required=False)
    expires_at = serializers.DateTimeField(required=False, help_text="in the future")
    requested_by = StrictCharField(
        max_length=200, required=False, help_text="the holder of an agent key of this tenant"
    )
    limits = LimitsField(required=False)
    payload_hash = StrictRegexField(
        PAYLOAD_HASH,
        required=False,
        allow_null=True,
        error_messages={"invalid": HASH_MESSAGE},
        help_text="pin the lease to this exact payload (SHA-256 of its canonical JSON)",
    )
    currency = StrictRegexField(
        CURRENCY,
        required=False,
        allow_null=True,
        error_messages={"invalid": "currency: three letters of ISO 4217, e.g. USD"},
        help_text="approve only payloads in this currency; the limits count in it",
    )
    budgets = BudgetInput(many=True, required=False, help_text=BUDGETS_HELP)

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        if "request_id" in data:
            if len(data) > 1:
                raise serializers.ValidationError(
                    "a grant of a request_id takes its terms from the request: give nothing else"
                )
            return data
        missing = [f for f in ("action", "expires_at", "requested_by") if f not in data]
        if missing:
            raise serializers.ValidationError({name: "This field is required." for name in missing})
        return data


class LeaseFromMandateInput(serializers.Serializer):  # type: ignore[type-arg]
    """An AP2 mandate and what it does not say: the action, the cases and the agent."""

    mandate = StrictCharField(
        max_length=MAX_TOKEN,
        trim_whitespace=False,
        help_text="the AP2 v0.2 mandate as its signer issued it: an SD-JWT (compact, ending "
        "in '~') delegating an open Payment Mandate or a closed Checkout Mandate",
    )
    case_id = text(MAX_CASE_ID, required=False)
    case_class = text(MAX_CASE_ID, required=False, help_text=CASE_CLASS_HELP)
    case_pattern = text(MAX_CASE_ID, required=False, help_text=CASE_PATTERN_HELP)
    action = text(MAX_ACTION)
    requested_by = StrictCharField(
        max_length=200, help_text="the holder of an agent key of this tenant"
    )
    expires_at = serializers.DateTimeField(
        required=False, help_text="end the lease before the mandate ends (required if it never)"
    )
    amount_field = StrictRegexField(
        MONEY_FIELD,
        max_length=100,
        required=False,
        help_text="the payload field the mandate's amount range bounds (default amount): the "
        "amount field its target declares, or every dispatch under the lease is refused",
    )


class LeaseRequestOutput(serializers.ModelSerializer):  # type: ignore[type-arg]
    requested_key = serializers.CharField(source="requested_key.key_id", read_only=True)
    lease_id = serializers.SerializerMethodField()

    class Meta:
        model = LeaseRequest
        fields = [
            "request_id",
            "case_id",
            "case_class",
            "case_pattern",
            "action",
            "limits",
            "payload_hash",
            "currency",
            "budgets",
            "expires_at",
            "requested_by",
            "requested_key",
            "created_at",
            "lease_id",
        ]

    def get_lease_id(self, request: LeaseRequest) -> str | None:
        return request.lease.lease_id if request.lease is not None else None


_MAX_WINDOW_SECONDS = 10 * 365 * 24 * 3600


@extend_schema_field(
    {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": _MAX_WINDOW_SECONDS,
        "description": "seconds: positive, at most 10 years",
    }
)
class WindowSeconds(StrictFloatField):
    """A target's window, in seconds: positive (refused by the service), at most 10 years."""


class MoneyInput(serializers.Serializer):  # type: ignore[type-arg]
    """Where a target's payloads hold the money they move (gate_client.money)."""

    amount_field = StrictRegexField(
        MONEY_FIELD, max_length=100, help_text="the payload key of the amount, in minor units"
    )
    currency_field = StrictRegexField(
        MONEY_FIELD,
        max_length=100,
        required=False,
        allow_null=True,
        default=None,
        help_text="the payload key of its ISO 4217 currency",
    )
    currency = StrictRegexField(
        r"^[A-Z]{3}$",
        required=False,
        allow_null=True,
        default=None,
        help_text="or the one currency it always moves",
    )
    unit = serializers.ChoiceField(choices=["minor"], required=False, default="minor")


class TargetInput(serializers.Serializer):  # type: ignore[type-arg]
    """A target's declaration; the windows in seconds. Claims that contradict each other are
    refused by the service, not stored."""

    name = StrictRegexField(
        TARGET_NAME,
        max_length=MAX_TARGET_NAME,
        help_text="1-63 of a-z, 0-9, '_' and '-'",
        error_messages={"invalid": "target name: 1-63 of a-z, 0-9, '_' and '-'"},
    )
    tier = StrictIntegerField(
        min_value=1, max_value=3, help_text="1: dedupes on a key; 2: can be looked up; 3: neither"
    )
    queryable = StrictBooleanField(help_text="tier 2 must be")
    max_inflight_seconds = WindowSeconds(help_text="the longest a request may still be in flight")
    key_window_seconds = WindowSeconds(
        required=False, allow_null=True, default=None, help_text="tier 1 only"
    )
    evidence_window_seconds = WindowSeconds(required=False, allow_null=True, default=None)
    attests_before_acting = StrictBooleanField(required=False, default=False)
    lookup_needs_key = StrictBooleanField(
        required=False, default=False, help_text="for a queryable target with a key window"
    )
    lookup_url = StrictURLField(required=False, default="", allow_blank=True, max_length=200)
    review_sla_seconds = WindowSeconds(
        required=False,
        default=DEFAULT_REVIEW_SLA.total_seconds(),
        help_text="how long its effects may wait in the review queue before they are overdue",
    )
    money = MoneyInput(
        required=False,
        allow_null=True,
        default=None,
        help_text="which payload fields hold the money its effects move; null: none",
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        """Seconds in, durations out, as the service takes them."""
        windows = {}
        for name in ("max_inflight", "key_window", "evidence_window", "review_sla"):
            seconds = data.pop(f"{name}_seconds")
            if seconds is not None and not math.isfinite(seconds):
                raise serializers.ValidationError({f"{name}_seconds": "a finite number"})
            if seconds is not None and abs(seconds) > _MAX_WINDOW_SECONDS:
                raise serializers.ValidationError({f"{name}_seconds": "at most 10 years"})
            windows[name] = timedelta(seconds=seconds) if seconds is not None else None
        return {**data, **windows}


class TargetOutput(serializers.ModelSerializer):  # type: ignore[type-arg]
    max_inflight_seconds = serializers.SerializerMethodField()
    key_window_seconds = serializers.SerializerMethodField()
    evidence_window_seconds = serializers.SerializerMethodField()
    review_sla_seconds = serializers.SerializerMethodField()
    money = serializers.SerializerMethodField()

    class Meta:
        model = Target
        fields = [
            "name",
            "tier",
            "queryable",
            "max_inflight_seconds",
            "key_window_seconds",
            "evidence_window_seconds",
            "attests_before_acting",
            "lookup_needs_key",
            "lookup_url",
            "review_sla_seconds",
            "money",
            "created_at",
        ]

    def get_max_inflight_seconds(self, target: Target) -> float:
        return target.max_inflight.total_seconds()

    def get_key_window_seconds(self, target: Target) -> float | None:
        return target.key_window.total_seconds() if target.key_window is not None else None

    def get_evidence_window_seconds(self, target: Target) -> float | None:
        window = target.evidence_window
        return window.total_seconds() if window is not None else None

    def get_review_sla_seconds(self, target: Target) -> float:
        return target.review_sla.total_seconds()

    @extend_schema_field(MoneyInput(allow_null=True))
    def get_money(self, target: Target) -> dict[str, Any] | None:
        money = target.declaration().money
        return money.body() if money is not None else None


class LeaseRevokeInput(serializers.Serializer):  # type: ignore[type-arg]
    reason = StrictCharField(max_length=MAX_REVOCATION_REASON)


class LeaseOutput(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Lease
        fields = [
            "lease_id",
            "case_id",
            "case_class",
            "case_pattern",
            "action",
            "limits",
            "payload_hash",
            "currency",
            "budgets",
            "expires_at",
            "requested_by",
            "granted_by",
            "granted_seq",
            "revoked_at",
            "revoked_by",
            "revoked_seq",
        ]


class PremiseInput(serializers.Serializer):  # type: ignore[type-arg]
    name = text(MAX_PREMISE_NAME)
    holds = StrictBooleanField()
    observed = serializers.JSONField(
        allow_null=True, validators=[bounded_depth], help_text="any JSON value"
    )


class FirstDispatchInput(serializers.Serializer):  # type: ignore[type-arg]
    premises: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=PremiseInput(),
        max_length=MAX_PREMISES,
        help_text="as observed just now; every one must hold",
    )


class ProposedPremise(PremiseInput):
    """A premise as a proposal records it: exactly these keys."""

    class Meta:
        closed = True


class ProposalShape(serializers.Serializer):  # type: ignore[type-arg]
    """The PROPOSED entry's body, as the gate writes it: exactly these keys. Only its shape is
    documented here; the notary checks it (notary.services._check_proposal) and stores it as
    given: `tenant` is the key's tenant, `target` one of its targets, the effect id is the one of
    this case, target and action, and `payload_hash` the SHA-256 of the canonical `payload`."""

    case_id = text(MAX_CASE_ID)
    case_class = text(
        MAX_CASE_ID, required=False, help_text="the case's class, for a standing lease over it"
    )
    target = text(MAX_TARGET_NAME)
    action = text(MAX_ACTION)
    tenant = text(MAX_TARGET_NAME, help_text="the key's tenant (its slug)")
    lease_id = text(MAX_LEASE_ID)
    payload = serializers.DictField(help_text="a JSON object with a canonical JSON form")
    payload_hash = StrictRegexField(PAYLOAD_HASH, error_messages={"invalid": HASH_MESSAGE})
    premises: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=ProposedPremise(), max_length=MAX_PREMISES
    )
    declaration = serializers.DictField(
        required=False,
        help_text="the target's declaration the gate goes by (gate_client.protocol."
        "TargetDeclaration.body, money included): must be the notary's record of the target; "
        "without it the notary writes its record's into the PROPOSED",
    )

    class Meta:
        closed = True  # a proposal has exactly these keys


@extend_schema_field(ProposalShape)
class ProposalField(serializers.DictField):
    """Read as the JSON object it is (the ledger keeps it byte for byte); the schema shows its
    shape."""


class EffectProposeInput(serializers.Serializer):  # type: ignore[type-arg]
    effect_id = text(MAX_EFFECT_ID_LENGTH)
    proposal = ProposalField(
        help_text="The PROPOSED entry's body, as the gate writes it", validators=[bounded_depth]
    )
    dispatch = FirstDispatchInput(
        required=False,
        help_text="Also dispatch attempt 1 in the same transaction, if nothing was dispatched",
    )


class EffectDispatchInput(serializers.Serializer):  # type: ignore[type-arg]
    attempt = StrictIntegerField(
        min_value=1, max_value=1_000_000, help_text="the last recorded attempt + 1 (else 409)"
    )
    premises: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=PremiseInput(), max_length=MAX_PREMISES, help_text="every one must hold"
    )
    recovery = StrictBooleanField(default=False)


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {},
        "properties": {
            "attempt": {"type": "integer"},
            "result_ref": {"type": "string", "maxLength": MAX_RESULT_REF, "pattern": PRINTABLE},
            "code": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_FAILURE_CODE,
                "pattern": PRINTABLE,
            },
        },
        "description": "Whatever the kind: `attempt` an integer, `result_ref` and `code` text "
        "that fits the effect's columns. By kind: COMMITTED needs `state` (one of "
        + ", ".join(sorted(COMMITTED_STATES))
        + "), `attempt` and `result_ref`; FAILED `attempt` and `code`; REFUSED a `reason` of "
        "the protocol's. What only the notary writes (`by`, a COMMITTED_ON_EVIDENCE, evidence "
        "of another effect) is a 400. A verdict that already stands is answered 200 (recorded: "
        "false) as it stands.",
    }
)
class OutcomeBodyField(serializers.DictField):
    pass


class EffectOutcomeInput(serializers.Serializer):  # type: ignore[type-arg]
    kind = serializers.ChoiceField(choices=OUTCOME_KINDS)
    body = OutcomeBodyField(validators=[bounded_depth])


@functools.cache
def _fields_of(serializer_class: type[serializers.Serializer]) -> BindingDict:  # type: ignore[type-arg]
    return serializers.Serializer.fields.func(serializer_class())  # type: ignore[attr-defined,no-any-return]


class FieldsBuiltOnce:
    """An output serializer's fields, built once for its class and shared by its instances.
    DRF builds them for every instance: it deep-copies the declared ones, nested serializers
    and theirs, and a ModelSerializer derives each from its model field again. For the answer
    to a proposal that was about 1 ms of the request. Only for serializers that write no
    input and read no context (their fields' state is then the same for every instance)."""

    @functools.cached_property
    def fields(self) -> BindingDict:
        return _fields_of(type(self))  # type: ignore[arg-type]


class EntryOutput(serializers.Serializer):  # type: ignore[type-arg]
    """One ledger entry. `leaf` is its exact bytes (base64): what the hash and proofs cover."""

    seq = serializers.IntegerField()
    kind = serializers.CharField()
    effect_id = serializers.CharField()
    created_at = serializers.DateTimeField()
    body = serializers.JSONField()
    leaf = serializers.CharField()
    entry_hash = serializers.CharField()

    def to_representation(self, instance: LedgerEntry) -> dict[str, Any]:
        return {
            "seq": instance.seq,
            "kind": instance.kind,
            "effect_id": instance.effect_id,
            "created_at": format_timestamp(instance.created_at),
            "body": instance.body_value(),
            "leaf": base64.b64encode(instance.leaf_bytes()).decode("ascii"),
            "entry_hash": instance.entry_hash.hex(),
        }


class EffectOutput(FieldsBuiltOnce, serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Effect
        fields = [
            "effect_id",
            "case_id",
            "target",
            "action",
            "lease_id",
            "payload_hash",
            "state",
            "attempts",
            "proposed_seq",
            "last_seq",
            "proposed_at",
            "dispatched_at",
            "settled_at",
            "result_ref",
        ]


class EffectDetailOutput(FieldsBuiltOnce, serializers.Serializer):  # type: ignore[type-arg]
    effect = EffectOutput()
    entries = EntryOutput(many=True)
    lease_entries = EntryOutput(many=True, help_text="The lease's grant and revocation")


class DispatchRefusedOutput(serializers.Serializer):  # type: ignore[type-arg]
    reason = serializers.CharField()
    detail = serializers.CharField()


class ProposeOutput(FieldsBuiltOnce, serializers.Serializer):  # type: ignore[type-arg]
    created = serializers.BooleanField()
    effect = EffectOutput()
    entries = EntryOutput(many=True)
    dispatched = EntryOutput(allow_null=True, help_text="attempt 1, if this request recorded it")
    dispatch_refused = DispatchRefusedOutput(
        allow_null=True, help_text="the lease did not cover attempt 1: nothing was dispatched"
    )


class RecordedEntryOutput(FieldsBuiltOnce, serializers.Serializer):  # type: ignore[type-arg]
    recorded = serializers.BooleanField(help_text="false: an earlier verdict stands")
    entry = EntryOutput()
    receipt_entries = EntryOutput(
        many=True, help_text="the effect's entries and its lease's, as of this outcome"
    )


class ReceiptOutput(serializers.Serializer):  # type: ignore[type-arg]
    receipt = serializers.DictField()
    entries = EntryOutput(many=True)
    checkpoint = serializers.CharField(allow_null=True)
    proofs = serializers.DictField(
        child=serializers.CharField(allow_null=True),
        help_text="C2SP tlog-proof per entry seq against `checkpoint`; null until one covers it",
    )


class LimitInput(serializers.Serializer):  # type: ignore[type-arg]
    limit = serializers.IntegerField(
        min_value=1, max_value=10_000, default=1000, help_text="at most this many"
    )


class ReceiptQueryInput(serializers.Serializer):  # type: ignore[type-arg]
    payload_hash = serializers.RegexField(
        PAYLOAD_HASH,
        required=False,
        help_text="the receipt of a refused re-decided payload, by its payload_hash",
    )


class WhoAmIOutput(serializers.Serializer):  # type: ignore[type-arg]
    tenant = serializers.CharField()
    role = serializers.CharField()
    key_id = serializers.CharField()
    holder = serializers.CharField(help_text="who holds the key, in canonical form")
    log = serializers.CharField(help_text="the origin of the tenant's ledger log")


class AttestationInput(serializers.Serializer):  # type: ignore[type-arg]
    effect_id = text(MAX_EFFECT_ID_LENGTH)
    stage = serializers.ChoiceField(
        choices=["before_acting", "performed", "not_performed"],
        required=False,
        help_text="before_acting: the write-ahead attestation, acknowledged (201) or refused "
        "(409) before the service may act; default: from `performed`",
    )
    performed = StrictBooleanField(
        required=False, help_text="true: the service did it; false: it did not (give it or stage)"
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        if "stage" not in data and "performed" not in data:
            raise serializers.ValidationError("give stage, or performed")
        stage = data.pop("stage", None)
        performed = data.pop("performed", None)
        if stage is None:
            stage = "performed" if performed else "not_performed"
        elif performed is not None and stage != ("performed" if performed else "not_performed"):
            raise serializers.ValidationError("stage and performed disagree")
        return {**data, "stage": stage}

    reference = StrictCharField(max_length=255, required=False, default="")
    detail = StrictCharField(max_length=2000, required=False, default="")


class AttestationOutput(serializers.Serializer):  # type: ignore[type-arg]
    settled = serializers.CharField(
        help_text="acknowledged (before_acting: the service may act), committed_on_evidence, "
        "failed_on_evidence, contradicts (evidence at odds with the verdict that stands), or "
        "recorded (nothing to settle)"
    )
    entry = EntryOutput()


class EvidenceOutput(serializers.Serializer):  # type: ignore[type-arg]
    """What the notary holds, as facts; whether nothing seen counts is the protocol's call,
    by the target's declaration (silence is never "not sent" for webhooks)."""

    seen = serializers.ChoiceField(choices=["performed", "not_performed", "intent", "nothing"])
    result_ref = serializers.CharField(allow_blank=True)
    code = serializers.CharField(allow_blank=True, help_text="not_performed: evidence:<type>")
    evidence_seq = serializers.IntegerField(allow_null=True)


class ExportQueryInput(serializers.Serializer):  # type: ignore[type-arg]
    from_ = serializers.DateTimeField(required=False, help_text="proposed at or after")
    to = serializers.DateTimeField(required=False, help_text="proposed before")
    state = serializers.CharField(max_length=100, required=False, help_text="or a prefix + *")

    def to_internal_value(self, data: Any) -> Any:
        """`from` is a Python keyword: read it into from_."""
        renamed = {("from_" if key == "from" else key): value for key, value in data.items()}
        return super().to_internal_value(renamed)


class ConflictOutput(ErrorOutput):
    """A 409: well-formed, but the ledger's state refuses it now; nothing was written (but a
    refused 'performed', kept as a contradiction). Some carry what the caller needs next."""

    current = serializers.IntegerField(
        required=False, help_text="attempt_taken, already_settled: the last recorded attempt"
    )
    reason = serializers.CharField(
        required=False,
        help_text="lease_refused: lease_expired, lease_revoked, lease_scope, lease_budget",
    )
    lease_id = serializers.CharField(
        required=False, help_text="already_granted: the lease the request was granted as"
    )
    held_by = serializers.CharField(
        required=False, help_text="held: the effect waiting for a person that holds this one"
    )
    kept_as = serializers.IntegerField(
        required=False,
        help_text="not_acknowledged: the ledger entry a refused 'performed' is kept as, a "
        "contradiction for a person",
    )


class FindingsQueryInput(LimitInput):
    """Which of the tenant's findings, oldest first (by seq); a page ends at `limit`, and the
    next starts `after` the last seq it showed."""

    target = StrictRegexField(
        TARGET_NAME,
        max_length=MAX_TARGET_NAME,
        required=False,
        error_messages={"invalid": "target name: 1-63 of a-z, 0-9, '_' and '-'"},
    )
    kind = serializers.ChoiceField(choices=FINDING_KINDS, required=False)
    effect_id = text(MAX_EFFECT_ID_LENGTH, required=False, help_text="the findings of one effect")
    found_since = AwareDateTimeField(required=False, help_text="found at or after")
    found_until = AwareDateTimeField(required=False, help_text="found before")
    after = serializers.IntegerField(
        min_value=0,
        max_value=MAX_SAFE_INTEGER,
        required=False,
        help_text="only findings of a later seq: the last seq of the page before",
    )


class ReconcileInput(serializers.Serializer):  # type: ignore[type-arg]
    """The window [since, until): at most 31 days, ending now or before."""

    since = AwareDateTimeField(required=False, help_text="default: until minus 24 hours")
    until = AwareDateTimeField(required=False, help_text="default: now")


class FindingWindowOutput(serializers.Serializer):  # type: ignore[type-arg]
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()


class MoneyOutput(serializers.Serializer):  # type: ignore[type-arg]
    amount_minor = serializers.IntegerField(help_text="in the currency's minor unit (cents)")
    currency = serializers.CharField(help_text='ISO 4217, upper case; "" when none is named')


class FindingAmountsOutput(serializers.Serializer):  # type: ignore[type-arg]
    admitted = MoneyOutput(help_text="what the effect's payload says it moves")
    provider = MoneyOutput(help_text="what the provider's object moved")


class FindingOutput(serializers.Serializer):  # type: ignore[type-arg]
    """A reconciliation finding, from its RECONCILED ledger entry: evidence for a person,
    never a verdict."""

    seq = serializers.IntegerField(
        help_text="its RECONCILED ledger entry (proved by GET /v1/proofs/inclusion?index=seq)"
    )
    found_at = serializers.DateTimeField()
    target = serializers.CharField()
    kind = serializers.ChoiceField(choices=FINDING_KINDS)
    window = FindingWindowOutput(source="*", help_text="the window it was found in")
    effect_id = serializers.CharField(
        help_text='the admitted effect it is about; "" for an object no admitted effect asked for'
    )
    state = serializers.CharField(
        source="body.state", default="", help_text='the effect\'s final state when found; "": none'
    )
    claimed_effect_id = serializers.CharField(
        source="body.claimed_effect_id",
        allow_null=True,
        help_text="not_admitted: the effect id the object names, one the tenant never admitted",
    )
    provider_ref = serializers.CharField(help_text='the provider\'s object; "" for not_shown')
    provider_created_at = serializers.DateTimeField(
        source="body.provider_created_at", allow_null=True
    )
    evidence = serializers.DictField(
        source="body.evidence",
        allow_null=True,
        help_text="the provider's record, as it showed it; null for not_shown",
    )
    amounts = FindingAmountsOutput(
        source="body.amounts", allow_null=True, help_text="amount_differs: both sides"
    )


class ReconcileTotalsOutput(serializers.Serializer):  # type: ignore[type-arg]
    found = serializers.IntegerField(help_text="every finding the comparison made")
    written = serializers.IntegerField(help_text="the ones this run recorded")
    recorded_before = serializers.IntegerField(help_text="the ones an earlier run recorded")
    by_kind = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="the findings made, by kind: " + ", ".join(FINDING_KINDS),
    )


class ReconcileOutput(serializers.Serializer):  # type: ignore[type-arg]
    target = serializers.CharField()
    window = FindingWindowOutput()
    listed = serializers.IntegerField(
        help_text="the objects the provider listed (over the window, from the source's "
        "lookback before it to five minutes after it)"
    )
    totals = ReconcileTotalsOutput()
    findings = FindingOutput(many=True, help_text="the findings this run wrote")
