"""Write-ahead attestation end to end (DESIGN §3): a tier-3 service that neither dedupes nor can
be looked up, but attests each request to a live notary before acting and acts only on its 201.
Real agent processes SIGKILL themselves at crash points; the truth is the service's own store.

Because the notary acknowledges at most one attestation per effect, and only while the last
dispatch is younger than the target's max in-flight, "no attestation by then" means the service
never acted: recovery resends (or refuses) instead of asking a person, and a request that
arrives after that is refused by the service itself. Only an intent with nothing after it stays
AMBIGUOUS."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from gate_client.authorization import DispatchRequest
from gate_client.faults import CrashPoint
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Proposal
from gate_client.receipts import Receipt, derive_receipt, verify_receipt
from ledger.core.entries import Entry, EntryKind
from ledger.selectors import iter_entries
from notary import services
from notary.models import WAITING_FOR_A_PERSON, Effect, Tenant
from testkit.agents import AGENT_PROCESS
from testkit.agents.agent_process import ACTION, TARGET, effect_id, payload, refund_premise
from testkit.crash_matrix import receipts, set_refund_status
from testkit.factories import leased
from testkit.notary_server import running_notary
from testkit.paths import child_database_url
from testkit.peers.reference_service import RunningServer, running_server
from testkit.processes import spawn_armed

pytestmark = pytest.mark.slow

# Generous: the service's acknowledgement must come back within it on a busy machine. Recovery
# waits it out after the last dispatch, so each test takes a few of these.
MAX_INFLIGHT_SECONDS = 4.0
TEXT = "Your refund of $20 is on the way"
DEADLINE_SECONDS = 60.0


@dataclass(frozen=True)
class Live:
    notary: str
    service: RunningServer
    tenant: Tenant
    agent_token: str
    service_token: str
    directory: Path


@dataclass(frozen=True)
class Case:
    """One effect of the attesting target, and the flags its agent processes are given."""

    live: Live
    case_id: str
    lease_id: str
    world: Path

    @property
    def effect_id(self) -> str:
        return effect_id(self.case_id, self.live.tenant.slug)

    def agent(self, role: str, *extra: str) -> list[str]:
        live = self.live
        args = [role, str(live.directory / "unused.journal"), str(self.world)]
        args += ["--url", live.service.url, "--case", self.case_id, "--tier", "3"]
        args += ["--max-inflight", str(MAX_INFLIGHT_SECONDS), "--attests-before-acting"]
        args += ["--notary", live.notary, "--notary-token", live.agent_token]
        args += ["--tenant", live.tenant.slug, "--lease", self.lease_id]
        return [*args, *extra]

    def acts(self) -> list[dict[str, Any]]:
        return self.live.service.acts(self.effect_id)

    def entries(self) -> list[Entry]:
        return [e for e in iter_entries(log=self.live.tenant.log) if e.effect_id == self.effect_id]

    def kinds(self) -> list[str]:
        return [str(e.kind) for e in self.entries()]

    def observed(self) -> list[str]:
        return [e.body_value()["outcome"] for e in self.entries() if e.kind == EntryKind.OBSERVED]

    def receipt(self) -> Receipt:
        """The effect's receipt from the tenant's whole log, verified against it."""
        log = list(iter_entries(log=self.live.tenant.log))
        receipt = derive_receipt(log, self.effect_id)
        verify_receipt(receipt, log, origin=self.live.tenant.log.origin)
        return receipt

    def dispatch_first_attempt(self) -> Entry:
        """PROPOSED and DISPATCHED attempt 1 at the notary, as an agent's gate records them; the
        request itself is left to the test (late, twice, or never)."""
        proposal = Proposal(
            case_id=self.case_id,
            target=TARGET,
            action=ACTION,
            payload=payload(TEXT),
            lease_id=self.lease_id,
            premises=[refund_premise(self.world)],
            tenant=self.live.tenant.slug,
        )
        premises = [p.evaluate() for p in proposal.premises]
        body = proposal.proposed_body(premises)
        request = DispatchRequest.of_proposal(self.effect_id, body, 1, premises, False)
        with NotaryJournal(self.live.notary, self.live.agent_token) as journal:
            started = journal.propose_and_dispatch(
                effect_id=self.effect_id, body=body, request=request
            )
        assert started is not None and started[1] is not None
        return started[1]

    def send_directly(self, url: str | None = None) -> tuple[int, dict[str, Any]]:
        """The request HttpTarget sends, as it reaches the service (or the one at `url`), with
        the service's answer."""
        request = urllib.request.Request(
            f"{url or self.live.service.url}/effects",
            data=json.dumps({"effect_id": self.effect_id, "payload": payload(TEXT)}).encode(),
            headers={"Content-Type": "application/json", "Idempotency-Key": self.effect_id},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=DEADLINE_SECONDS) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())


@pytest.fixture
def live(transactional_db: None, tmp_path: Path) -> Iterator[Live]:
    tenant = services.tenant_create(slug="attested", name="Attested")
    services.target_register(
        tenant=tenant,
        name=TARGET,
        tier=3,
        queryable=False,
        max_inflight=timedelta(seconds=MAX_INFLIGHT_SECONDS),
        attests_before_acting=True,
    )
    _, agent_token = services.api_key_issue(tenant=tenant, role="agent", holder="bot")
    _, service_token = services.api_key_issue(
        tenant=tenant, role="service", holder="mailer", targets=[TARGET]
    )
    with (
        running_notary(child_database_url(), tmp_path) as notary,
        running_server(
            tmp_path / "store",
            dedupe=False,  # a duplicate would be a second line in the store
            lookup=False,
            attest=notary,
            attest_token=service_token,
        ) as service,
    ):
        yield Live(notary, service, tenant, agent_token, service_token, tmp_path)


def new_case(live: Live, case_id: str) -> Case:
    world = live.directory / f"{case_id}.world.json"
    set_refund_status(world, "succeeded")
    return Case(live, case_id, leased(live.tenant, case_id, ACTION).lease_id, world)


def wait_past_max_inflight(dispatched: Entry) -> None:
    """Until the attempt can no longer be in flight: the notary acknowledges nothing for it
    now, and recovery may count it as never sent."""
    until = dispatched.created_at.timestamp() + MAX_INFLIGHT_SECONDS
    while (remaining := until - time.time()) > 0:
        time.sleep(min(remaining, 0.2))


def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait for `condition`, with a deadline generous enough for a busy machine."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"not within {DEADLINE_SECONDS} s: {what}"
        time.sleep(0.1)


def only(printed: str, step: str) -> dict[str, Any]:
    [receipt] = [r for s, r in receipts(printed) if s == step]
    return receipt


def committed_by_the_resend(receipt: dict[str, Any]) -> None:
    """The resend's own answer (COMMITTED_BY_RETRY, saying why it resent), unless the service's
    `performed` attestation reached the notary first: then the notary settled it
    COMMITTED_ON_EVIDENCE, the first verdict stands, and the gate's answer was not recorded."""
    if receipt["final_state"] == "COMMITTED_BY_RETRY":
        assert receipt["recheck_at_recovery"]["lookup"] == "not_attested"
    else:
        assert receipt["final_state"] == "COMMITTED_ON_EVIDENCE", receipt
    assert receipt["happened"] is True


def test_killed_before_the_request_left_recovery_resends_once(live: Live) -> None:
    case = new_case(live, "case-dispatched")
    worker = spawn_armed(
        AGENT_PROCESS, case.agent("submit", "--text", TEXT), CrashPoint.AFTER_DISPATCHED
    )
    assert worker.returncode == -9, worker.stderr
    assert case.acts() == []

    restarted = spawn_armed(AGENT_PROCESS, case.agent("recover"), None)
    assert restarted.returncode == 0, restarted.stderr
    receipt = only(restarted.stdout, "recover")
    committed_by_the_resend(receipt)
    assert len(case.acts()) == 1
    # Attempt 1 was never attested; attempt 2, sent after max in-flight, was, and acted.
    dispatches = [e for e in case.entries() if e.kind == EntryKind.DISPATCHED]
    assert [d.body_value()["attempt"] for d in dispatches] == [1, 2]
    assert dispatches[1].created_at - dispatches[0].created_at >= timedelta(
        seconds=MAX_INFLIGHT_SECONDS
    )
    # The service says it performed after answering: it may land after the gate's verdict.
    eventually(lambda: "performed" in case.observed(), "the performed attestation")
    assert case.observed() == ["intent", "performed"]
    assert case.receipt().final_state == receipt["final_state"]


def test_killed_after_the_service_acted_it_is_settled_on_its_attestation_never_resent(
    live: Live,
) -> None:
    case = new_case(live, "case-acted")
    worker = spawn_armed(
        AGENT_PROCESS, case.agent("submit", "--text", TEXT), CrashPoint.AFTER_TARGET_ACTED
    )
    assert worker.returncode == -9, worker.stderr
    [act] = case.acts()

    # Whether recover() still finds it in flight depends on how soon the service's `performed`
    # attestation lands; either way the resubmitted case gets the standing receipt.
    restarted = spawn_armed(AGENT_PROCESS, case.agent("recover", "--resubmit", TEXT), None)
    assert restarted.returncode == 0, restarted.stderr
    printed = [r["final_state"] for _, r in receipts(restarted.stdout)]
    assert printed and set(printed) == {"COMMITTED_ON_EVIDENCE"}, printed
    assert len(case.acts()) == 1, "nothing was resent"
    assert case.kinds().count("DISPATCHED") == 1
    assert case.observed() == ["intent", "performed"]
    receipt = case.receipt()
    assert (receipt.final_state, receipt.happened) == ("COMMITTED_ON_EVIDENCE", True)
    assert receipt.recheck_at_recovery is not None
    assert receipt.recheck_at_recovery["evidence"] == "found"
    [performed] = [e for e in case.entries() if e.body_value().get("outcome") == "performed"]
    assert performed.body_value()["result_ref"] == act["result_ref"]


@pytest.mark.parametrize("change", ["none", "lease_revoked"])
def test_a_request_arriving_after_max_inflight_is_refused_by_the_service(
    live: Live, change: str
) -> None:
    """The agent's request was delayed on the wire past max in-flight. The service asks first,
    the notary refuses, the service does not act; recovery counted the attempt as never sent
    and resends it, or refuses it at recovery, and a late duplicate after that is refused too."""
    case = new_case(live, f"case-late-{change}")
    dispatched = case.dispatch_first_attempt()
    if change == "lease_revoked":
        services.lease_revoke(
            tenant=live.tenant, lease_id=case.lease_id, by="finance", reason="disputed"
        )
    wait_past_max_inflight(dispatched)

    status, answer = case.send_directly()  # the late request
    assert (status, answer["error"]) == (409, "not_acknowledged"), answer
    assert "max in-flight" in answer["detail"]
    assert case.acts() == []
    assert case.kinds() == ["PROPOSED", "DISPATCHED"], "a refused attestation records nothing"

    restarted = spawn_armed(AGENT_PROCESS, case.agent("recover"), None)
    assert restarted.returncode == 0, restarted.stderr
    receipt = only(restarted.stdout, "recover")
    if change == "none":
        committed_by_the_resend(receipt)
        assert len(case.acts()) == 1
    else:
        assert receipt["final_state"] == "REFUSED:lease_revoked_at_recovery"
        assert receipt["recheck_at_recovery"]["lookup"] == "not_attested"
        assert receipt["happened"] is False
        assert case.acts() == []

    status, answer = case.send_directly()  # a duplicate, later still
    assert (status, answer["error"]) == (409, "not_acknowledged"), answer
    assert len(case.acts()) == (1 if change == "none" else 0)
    assert case.receipt().final_state == receipt["final_state"]


def test_two_replicas_each_given_the_request_only_one_acts(live: Live) -> None:
    """Two requests for one effect in flight at once, at two replicas of the service that share
    nothing but the notary: it acknowledges one, and the other replica does not act."""
    case = new_case(live, "case-twice")
    case.dispatch_first_attempt()
    with (
        running_server(
            live.directory / "replica.store",
            dedupe=False,
            lookup=False,
            attest=live.notary,
            attest_token=live.service_token,
        ) as replica,
        ThreadPoolExecutor(2) as pool,
    ):
        answers = list(pool.map(case.send_directly, [live.service.url, replica.url]))
        acts = case.acts() + replica.acts(case.effect_id)
    assert sorted(status for status, _ in answers) == [200, 409], answers
    [refused] = [answer for status, answer in answers if status == 409]
    assert refused["error"] == "not_acknowledged"
    # Refused as attested already, or, if the other's `performed` landed first, as settled.
    assert "attested already" in refused["detail"] or "COMMITTED" in refused["detail"], refused
    [act] = acts
    # The one that acted said so after answering; its attestation settles the effect.
    eventually(lambda: case.receipt().final_state == "COMMITTED_ON_EVIDENCE", "settled on evidence")
    [performed] = [e for e in case.entries() if e.body_value().get("outcome") == "performed"]
    assert performed.body_value()["result_ref"] == act["result_ref"]


def test_an_intent_with_nothing_after_it_is_ambiguous_until_the_service_says_it_acted(
    live: Live,
) -> None:
    """The service acted under an acknowledgement and never said so (it died, or the notary
    was unreachable). Intent is not evidence either way: past max in-flight recovery says
    AMBIGUOUS and resends nothing; the late `performed` attestation settles it, no person."""
    case = new_case(live, "case-intent")
    live.service.skip_next_performed(case.effect_id)
    worker = spawn_armed(
        AGENT_PROCESS, case.agent("submit", "--text", TEXT), CrashPoint.AFTER_TARGET_ACTED
    )
    assert worker.returncode == -9, worker.stderr
    [act] = case.acts()
    assert case.observed() == ["intent"]

    restarted = spawn_armed(AGENT_PROCESS, case.agent("recover"), None)
    assert restarted.returncode == 0, restarted.stderr
    receipt = only(restarted.stdout, "recover")
    assert (receipt["final_state"], receipt["happened"]) == ("AMBIGUOUS", "unknown")
    assert receipt["recheck_at_recovery"]["lookup"] == "unknown"
    assert "about to act" in receipt["recheck_at_recovery"]["detail"]
    assert len(case.acts()) == 1 and case.kinds().count("DISPATCHED") == 1

    late = httpx.post(
        f"{live.notary}/v1/attestations",
        json={"effect_id": case.effect_id, "stage": "performed", "reference": act["result_ref"]},
        headers={"Authorization": f"Bearer {live.service_token}"},
        timeout=DEADLINE_SECONDS,
    )
    assert (late.status_code, late.json()["settled"]) == (201, "committed_on_evidence")
    settled = case.receipt()
    assert (settled.final_state, settled.happened) == ("COMMITTED_ON_EVIDENCE", True)


def test_performed_attested_before_any_dispatch_is_refused_and_the_effect_never_sent(
    live: Live,
) -> None:
    """The agent is SIGKILLed after PROPOSED; the service's key says the effect was performed,
    with no request ever acknowledged. The notary refuses it (409) and keeps it as a
    contradiction; the restarted agent's recover() dispatches nothing, the receipt says HELD and
    unknown, and the effect waits for a person, whose decision settles it. The service, which
    never dedupes, acted 0 times and the receipt never says it happened."""
    case = new_case(live, "case-early")
    worker = spawn_armed(
        AGENT_PROCESS,
        case.agent("submit", "--text", TEXT, "--separate-steps"),
        CrashPoint.AFTER_PROPOSED,
    )
    assert worker.returncode == -9, worker.stderr
    assert case.kinds() == ["PROPOSED"]

    early = httpx.post(
        f"{live.notary}/v1/attestations",
        json={"effect_id": case.effect_id, "stage": "performed", "reference": "doc_forged"},
        headers={"Authorization": f"Bearer {live.service_token}"},
        timeout=DEADLINE_SECONDS,
    )
    restarted = spawn_armed(AGENT_PROCESS, case.agent("recover"), None)
    assert restarted.returncode == 0, restarted.stderr
    receipt = only(restarted.stdout, "recover")
    assert case.acts() == []
    assert receipt["happened"] is not True, f"a wrong answer: {receipt}"
    assert "DISPATCHED" not in case.kinds()
    assert (receipt["final_state"], receipt.get("held_by")) == ("HELD", case.effect_id)
    assert (receipt["happened"], receipt["contradicted"]) == ("unknown", True)
    assert early.status_code == 409, early.text
    assert early.json()["error"] == "not_acknowledged"
    assert early.json()["kept_as"] == case.entries()[1].seq
    assert case.kinds()[:2] == ["PROPOSED", "OBSERVED"]
    waiting = Effect.objects.filter(WAITING_FOR_A_PERSON, tenant=live.tenant)
    assert waiting.filter(effect_id=case.effect_id).exists(), "queued for a person"

    services.effect_resolve(
        tenant=live.tenant,
        effect_id=case.effect_id,
        happened=False,
        reason="the service's own records show no such document",
        by="finance",
    )
    again = spawn_armed(AGENT_PROCESS, case.agent("recover"), None)
    assert again.returncode == 0, again.stderr
    assert receipts(again.stdout) == []
    settled = case.receipt()
    assert (settled.final_state, settled.happened) == ("RESOLVED_NOT_HAPPENED", False)
    assert case.acts() == [] and "DISPATCHED" not in case.kinds()
