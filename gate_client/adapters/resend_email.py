"""Email through Resend's official SDK, as a gate target.

Resend dedupes POST /emails on an Idempotency-Key for 24 hours, so inside that window the target
is tier 1 with the effect id as the key. The effect id also rides as the tag
``interlock_effect_id``, which Resend echoes in its delivery webhooks: with those posted to the
notary, the gate recovers from the notary's evidence past the key window (``evidence_window``)
instead of leaving every crash after a send to a person.

The lookup is the probe the seed found: Resend checks the key before the sender's domain, so
the same key from a sender on a domain it will not send from answers without sending. 409 says
an email went out under that key; 403 says none did. It is observed behaviour, not a contract,
so it is off unless ``probe_from`` names such a sender; if Resend ever sent from it, the lookup
reports that and stops trusting it. The probe answers only while Resend remembers the key, so
it is a tier-1 target's lookup (``lookup_needs_key``); Resend is never tier 2.

Configuration is the target's own. The SDK (resend 2.x) has no client object and no per-request
key: ``resend.Emails.send`` reads the module globals ``resend.api_key``, ``resend.api_url`` and
``resend.default_http_client`` at each request, so two targets configured through them would use
whichever was set last. The target never sets them. It sends with its own key, URL and
`resend.HTTPClient` (the SDK's HTTP client interface), the request built and its answer parsed
as the SDK's ``resend.Request`` does, its errors the SDK's ``ResendError``s. What it is not given
it takes from the SDK's defaults once, when constructed (``RESEND_API_KEY`` and
``RESEND_API_URL`` through them). ``max_inflight`` follows from that HTTP client's timeout
(`client_request_bound`). The payload is the SDK's send params."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

import resend
from resend.exceptions import ResendError, raise_for_code_and_type

from gate_client.adapters.declarations import (
    FROM_TIER,
    INFLIGHT_MARGIN,
    Derived,
    key_window_for,
    requests_timeouts,
)
from gate_client.faults import CrashPoint, crash_point
from gate_client.reconciliation import ProviderRecord, ReconciliationError, Window
from gate_client.targets import (
    FailedDefinitively,
    Found,
    InDoubt,
    LookupOutcome,
    NotFound,
    SendOutcome,
    Sent,
    Tier,
    Unknown,
)

TAG = "interlock_effect_id"
DEFAULT_NAME = "resend_email"  # a name the notary takes (notary.services._TARGET_NAME)
RESEND_KEY_WINDOW = timedelta(hours=24)
# Answers that mean another request is still at work, or Resend cannot say what it did.
_IN_DOUBT_TYPES = frozenset({"concurrent_idempotent_requests", "HttpClientError"})


class ResendEmail:
    """The email target, declared by its tier and its HTTP client."""

    name: str
    tier: Tier
    queryable: bool
    key_window: timedelta | None
    max_inflight: timedelta
    evidence_window: timedelta | None
    attests_before_acting: bool  # Resend sends without attesting to the notary first
    lookup_needs_key: bool  # the probe asks about the key, which Resend forgets after its window
    money: None  # an email moves no money
    probe_from: str | None
    api_key: str
    api_url: str
    http_client: resend.HTTPClient

    def __init__(
        self,
        *,
        name: str = DEFAULT_NAME,
        tier: Tier = Tier.DEDUPES,
        queryable: bool | None = None,
        key_window: timedelta | Derived | None = FROM_TIER,
        max_inflight: timedelta | None = None,
        evidence_window: timedelta | None = None,
        probe_from: str | None = None,
        api_key: str | None = None,
        api_url: str | None = None,
        http_client: resend.HTTPClient | None = None,
    ) -> None:
        """`tier` 1 (the default) has Resend's 24 h key window and, with `probe_from`, the
        probe as its lookup; tier 3 has neither. `queryable` and `key_window` default to that
        and must agree with it when given (a TypeError names the contradiction).
        `max_inflight` defaults to `client_request_bound(http_client)` plus `INFLIGHT_MARGIN`;
        give it for an HTTP client whose timeout the SDK does not expose. `api_key`, `api_url`,
        `http_client` default to the SDK's ``resend.api_key``, ``resend.api_url``,
        ``resend.default_http_client`` as they are now."""
        self.name = name
        self.tier = Tier(tier)
        self.probe_from = probe_from
        self.queryable = _queryable(self.tier, queryable, probe_from)
        self.key_window = key_window_for(
            self.tier, key_window, provider="Resend", window=RESEND_KEY_WINDOW
        )
        self.lookup_needs_key = self.queryable
        self.money = None
        self.evidence_window = evidence_window
        self.attests_before_acting = False
        key = resend.api_key if api_key is None else api_key
        if not key:
            raise TypeError("ResendEmail needs api_key= (or RESEND_API_KEY, resend.api_key)")
        self.api_key = key
        self.api_url = resend.api_url if api_url is None else api_url
        client = resend.default_http_client if http_client is None else http_client
        if not isinstance(client, resend.HTTPClient):
            raise TypeError(
                f"http_client {type(client).__name__} is not a resend.HTTPClient: the target "
                "sends synchronously"
            )
        self.http_client = client
        if max_inflight is None:
            max_inflight = client_request_bound(client) + INFLIGHT_MARGIN
        elif max_inflight <= timedelta(0):
            raise ValueError("max_inflight must be positive")
        self.max_inflight = max_inflight

    def __repr__(self) -> str:  # never the key
        return (
            f"ResendEmail(name={self.name!r}, tier={self.tier!r}, queryable={self.queryable}, "
            f"key_window={self.key_window!r}, max_inflight={self.max_inflight!r}, "
            f"evidence_window={self.evidence_window!r}, probe_from={self.probe_from!r}, "
            f"api_url={self.api_url!r})"
        )

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        try:
            email = self._post_email(email_params(effect_id, payload), idempotency_key=effect_id)
        except ResendError as error:
            crash_point(CrashPoint.AFTER_TARGET_ACTED)
            if _in_doubt(error):
                raise InDoubt(f"{error.code} {error.error_type}: {error.message}") from error
            return FailedDefinitively(error.error_type)
        crash_point(CrashPoint.AFTER_TARGET_ACTED)
        return Sent(str(email["id"]))

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        """Probe the key: never a replay of the real message, which past the key window (or
        with a key Resend lost) would send it again."""
        if self.probe_from is None:
            return Unknown("no probe sender configured")
        probe = {**email_params(effect_id, payload), "from": self.probe_from}
        try:
            self._post_email(probe, idempotency_key=effect_id)
        except ResendError as error:
            if error.error_type == "invalid_idempotent_request":
                return Found(f"idempotency-key:{effect_id}")
            if str(error.code) == "403" and error.error_type == "validation_error":
                return NotFound()
            return Unknown(f"{error.code} {error.error_type}: {error.message}")
        self.probe_from = None
        self.queryable = False
        return Unknown(f"the probe sender {probe['from']!r} is verified: the probe sent an email")

    def _post_email(self, params: Mapping[str, Any], *, idempotency_key: str) -> dict[str, Any]:
        """``POST /emails`` as `resend.Emails.send` makes it, with this target's key, URL and
        HTTP client."""
        return resend_call(
            self.http_client,
            self.api_key,
            "post",
            f"{self.api_url}/emails",
            params=params,
            idempotency_key=idempotency_key,
        )


def resend_call(
    http_client: resend.HTTPClient,
    api_key: str,
    method: str,
    url: str,
    *,
    params: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """One request as the SDK's ``resend.Request`` makes it (headers, the HTTP client's failure
    as ``HttpClientError``, the answer's status and body to a `ResendError`), with the key, URL
    and HTTP client given instead of the SDK's module globals."""
    headers = {
        "Accept": "application/json",
        "Authorization": f"Bearer {api_key}",
        "User-Agent": f"resend-python:{resend.get_version()}",
    }
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    try:
        content, status, answer_headers = http_client.request(
            method=method,
            url=url,
            headers=headers,
            json=dict(params) if params is not None else None,
        )
    except Exception as error:  # the SDK's safety net: the request may have arrived
        raise ResendError(
            code=500,
            error_type="HttpClientError",
            message=str(error),
            suggested_action="Request failed, please try again.",
        ) from error
    seen = dict(answer_headers)
    failing = status if status >= 400 else 500  # a body that is no answer: only the status
    content_type = {k.lower(): v for k, v in seen.items()}.get("content-type", "")
    if "application/json" not in content_type:
        raise_for_code_and_type(
            code=failing,
            error_type="application_error",
            message=f"Expected JSON response but got: {content_type}",
            headers=seen,
        )
    try:
        data = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):
        raise_for_code_and_type(
            code=failing,
            error_type="application_error",
            message="Failed to decode JSON response",
            headers=seen,
        )
    code = status if status >= 400 else data.get("statusCode")
    if code not in (None, 200):
        raise_for_code_and_type(
            code=code or 500,
            error_type=str(data.get("name", "InternalServerError")),
            message=str(data.get("message", "Unknown error")),
            headers=seen,
        )
    return data


def emails_created(
    http_client: resend.HTTPClient, api_key: str, api_url: str, window: Window
) -> Iterator[ProviderRecord]:
    """Every email Resend shows created in `window`, each with the effect id its tag carries.

    Resend's list (``GET /emails``) is newest first, paged with ``after`` (the last id of a
    page), and has neither a time filter nor the tags: the list is read until an email older than
    the window, and each email in it is read (``GET /emails/{id}``) for its tags. Only a key with
    full access lists: a sending-only key is refused (401 ``restricted_api_key``), as is any
    other error, with a ReconciliationError naming Resend's error (never the key)."""
    after: str | None = None
    try:
        while True:
            query = f"?limit={_LIST_PAGE}" + (f"&after={after}" if after else "")
            page = resend_call(http_client, api_key, "get", f"{api_url}/emails{query}")
            listed = page.get("data")
            if not isinstance(listed, list):
                raise ReconciliationError("Resend's email list has no data")
            for item in listed:
                created = datetime.fromisoformat(str(item["created_at"]))
                if created < window.since:
                    return
                if created < window.until:
                    email = resend_call(
                        http_client, api_key, "get", f"{api_url}/emails/{item['id']}"
                    )
                    yield ProviderRecord(
                        ref=str(email["id"]),
                        created_at=created,
                        effect_id=_tagged_effect(email.get("tags")),
                        evidence=_email_evidence(email),
                    )
            if not page.get("has_more") or not listed:
                return
            after = str(listed[-1]["id"])
    except ResendError as error:
        raise ReconciliationError(
            f"Resend refused the email list: {error.code} {error.error_type}: {error.message}"
        ) from error
    except (KeyError, TypeError, ValueError) as error:
        raise ReconciliationError(f"Resend's email list is not as documented: {error!r}") from error


_LIST_PAGE = 100  # Resend's largest page


def _tagged_effect(tags: Any) -> str | None:
    """The effect id of the email's interlock tag; Resend shows tags as a list of
    {"name", "value"} (or, in its webhooks, as an object)."""
    if isinstance(tags, dict):
        value = tags.get(TAG)
    elif isinstance(tags, list):
        value = next(
            (t.get("value") for t in tags if isinstance(t, dict) and t.get("name") == TAG), None
        )
    else:
        value = None
    return value if isinstance(value, str) else None


def _email_evidence(email: Mapping[str, Any]) -> dict[str, Any]:
    """What a reviewer needs of an email, as Resend shows it (not its body)."""
    fields = ("id", "from", "to", "cc", "bcc", "subject", "created_at", "last_event", "tags")
    return {f: email[f] for f in fields if email.get(f) is not None}


def client_request_bound(http_client: resend.HTTPClient) -> timedelta:
    """The longest `http_client` holds one request to Resend. The SDK sends once and never
    retries (``resend.Request.perform``); its `resend.RequestsClient` hands its ``_timeout``
    (default 30 s) to requests, which takes one number as both the connect and the read
    timeout, and a (connect, read) pair as each. Any other HTTP client exposes no timeout:
    a TypeError, and then the target needs ``max_inflight``."""
    if not isinstance(http_client, resend.RequestsClient):
        raise TypeError(
            f"the Resend HTTP client ({type(http_client).__name__}) has no timeout the SDK "
            "exposes, so how long an email request may be in flight cannot be derived: give "
            "max_inflight= (at least its connect and read timeouts)"
        )
    connect, read = requests_timeouts(http_client._timeout, "the Resend HTTP client's")
    return timedelta(seconds=connect + read)


def email_params(effect_id: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The send params with the effect id tagged, replacing any tag of that name."""
    tags = [t for t in payload.get("tags", []) if t.get("name") != TAG]
    return {**payload, "tags": [*tags, {"name": TAG, "value": effect_id}]}


def _in_doubt(error: ResendError) -> bool:
    try:
        status = int(error.code)
    except (TypeError, ValueError):
        return True
    return status >= 500 or status == 429 or error.error_type in _IN_DOUBT_TYPES


def _queryable(tier: Tier, queryable: bool | None, probe_from: str | None) -> bool:
    if tier == Tier.LOOKUP:
        raise TypeError(
            "Resend cannot be tier 2: its one lookup, the key probe, answers only inside the "
            "key window, which only a tier-1 target has. Declare tier 1 with probe_from= (or "
            "tier 3)"
        )
    if tier == Tier.NEITHER and (queryable or probe_from is not None):
        raise TypeError(
            "tier 3 is a target that cannot be looked up: it cannot have "
            + ("queryable=True" if queryable else f"probe_from={probe_from!r}")
        )
    probes = probe_from is not None
    if queryable is not None and queryable != probes:
        raise TypeError(
            f"queryable={queryable} with probe_from={probe_from!r}: Resend is looked up "
            "through the probe, so it is queryable exactly when probe_from names a sender"
        )
    return probes
