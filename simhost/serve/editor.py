"""Editor rules, batch answers and the audit trail of ``simhost serve``.

The rule engine answers in front of the relay, in every session's handler
(:attr:`EditorDesk.handler`): a question a rule answers as it arrives never
reaches a view, and every view gets a :class:`RuleReceipt`. A question that
reaches the views comes with the rules its card may save (:class:`RuleOffers`);
a saved rule answers that question and every pending one it covers, through the
relay (``by``: ``rule N``). A batch answers exactly the questions its preview
listed that are still pending and still covered. Every ending of a question is
appended to the audit trail (the relay's ``on_event`` hook: it never falls behind).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final, TypeVar

import msgspec

from permclient import (
    Deferred,
    PermissionRequest,
    Question,
    Selected,
    ToolCallContent,
    ToolCallLocation,
    ToolCallUpdate,
    ToolKind,
    deferred,
)
from permclient.relay import Relay, RelayEvent, RelayQuestion, Requested, Resolved, Withdrawn
from permclient.rules import (
    TOOL_KINDS,
    EditorRule,
    Effect,
    RuleAnswer,
    RuleEngine,
    suggested_rules,
)
from simhost.audit import AnsweredBy, AuditLog, AuditRecord, Outcome, record_for
from simhost.rulebook import RuleBook

from .protocol import (
    BatchAnswered,
    BatchItem,
    BatchPreview,
    Error,
    RuleOffer,
    RuleOffers,
    RuleReceipt,
    RuleRevoked,
    RuleRow,
    Rules,
    RuleSaved,
    ServerMessage,
)

__all__ = ["EditorDesk"]

MAX_OFFERS: Final = 4
_WITHDRAWN_BY: Final[dict[str, AnsweredBy]] = {
    "peer": "runtime",
    "turn": "turn",
    "timeout": "timeout",
    "teardown": "teardown",
    "shutdown": "teardown",
    "answered elsewhere": "elsewhere",
}


class _ToolCallFields(msgspec.Struct, rename="camel"):
    """A tool call's fields that rules read, each kept undecoded: one value this
    version does not know must not hide the others."""

    kind: msgspec.Raw = msgspec.Raw()
    content: msgspec.Raw = msgspec.Raw()
    locations: msgspec.Raw = msgspec.Raw()
    raw_input: msgspec.Raw = msgspec.Raw()


class _RequestFields(msgspec.Struct, rename="camel"):
    tool_call: _ToolCallFields


_T = TypeVar("_T")
_READ_ERRORS: Final = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)
_fields_decoder: Final = msgspec.json.Decoder(_RequestFields)
_kind_decoder: Final = msgspec.json.Decoder(ToolKind)
_locations_decoder: Final = msgspec.json.Decoder(list[ToolCallLocation])
_items_decoder: Final = msgspec.json.Decoder(list[msgspec.Raw])
_item_decoder: Final = msgspec.json.Decoder(ToolCallContent)


def _read(decoder: msgspec.json.Decoder[_T], raw: msgspec.Raw) -> _T | None:
    """``raw`` decoded, or ``None`` if absent, null or not what this version reads."""
    if not raw:
        return None
    try:
        return decoder.decode(raw)
    except _READ_ERRORS:
        return None


def _readable_part(question: Question) -> PermissionRequest | None:
    """What can be read of a request typed only in part (its raw params): the typed
    session, title and options, with the kind if it is a known one, the locations,
    the content items of known types and the raw input. What cannot be read is left
    out, so only a deny rule may use this (for it, reading less is asking a person)."""
    if question.raw_params is None:
        return None
    try:
        fields = _fields_decoder.decode(question.raw_params).tool_call
    except _READ_ERRORS:
        return None
    items = [_read(_item_decoder, item) for item in _read(_items_decoder, fields.content) or ()]
    raw_input = fields.raw_input
    try:
        msgspec.json.decode(raw_input or b"null")
    except _READ_ERRORS:  # (nested too deep for a rule to read)
        raw_input = msgspec.Raw()
    known = question.request
    return PermissionRequest(
        known.session_id,
        ToolCallUpdate(
            known.tool_call.tool_call_id,
            title=known.tool_call.title,
            kind=_read(_kind_decoder, fields.kind),
            content=[item for item in items if item is not None] or None,
            locations=_read(_locations_decoder, fields.locations),
            raw_input_json=raw_input,
        ),
        question.offered,
    )


def _request_of(question: RelayQuestion) -> PermissionRequest | None:
    if not question.understood:
        return None
    try:
        return PermissionRequest.from_json(question.request)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


class EditorDesk:
    """The rules, offers, batches and audit trail behind the views of one relay."""

    def __init__(
        self,
        relay: Relay,
        rulebook: RuleBook,
        audit: AuditLog | None,
        broadcast: Callable[[ServerMessage], None],
    ) -> None:
        self.relay = relay
        self.rulebook = rulebook
        self.audit = audit
        self._broadcast = broadcast
        self._pending: dict[str, tuple[RelayQuestion, PermissionRequest | None]] = {}
        self._offers: dict[str, tuple[EditorRule, ...]] = {}
        self._answering = ""  # the question a saved rule is answering now, if any
        # Who is answering through the relay now, when it is this desk (a rule, a
        # batch): never read from ``by``, which names a view and views name themselves.
        self._answerer: tuple[AnsweredBy, str] | None = None
        rulebook.engine.on_answer = self._rule_answered
        relay.on_event = self.on_event
        self.handler: Deferred = deferred(self._ask, raw_params=True)
        """Every session's permission handler (in place of the relay's)."""

    @property
    def engine(self) -> RuleEngine:
        return self.rulebook.engine

    def _ask(self, question: Question) -> None:
        """A rule answers what it decides; the rest goes to the relay's views. One
        handler rather than the engine stacked above the relay's: permclient gives a
        request it types only in part (a newer agent's) to the session's latest
        handler alone, and only if that one keeps the raw params, as the relay's does
        (only a deny rule may answer such a request: the views show it as it arrived)."""
        if question.understood:
            decision = self.engine.decide(question.request)
        else:
            decision = self._denied_in_part(question)
        if decision is not None:
            question.answer(decision)
            return
        self.relay.handler.function(question)

    def _denied_in_part(self, question: Question) -> Selected | None:
        """A deny rule's answer to a request typed only in part, from what of it can be
        read (:func:`_readable_part`); never an allow: what cannot be read may be anything."""
        request = _readable_part(question)
        found = self.engine.match(request) if request is not None else None
        if request is None or found is None or found.rule.effect != "deny":
            return None
        if not self._option_kind(request, found.decision).startswith("reject"):
            return None
        self.engine.record(found)  # (the hit; the receipt and the audit line)
        return found.decision

    # ------------------------------------------------------------- relay events

    def on_event(self, event: RelayEvent) -> None:
        """Remember each question while it is pending; audit how it ended."""
        if isinstance(event, Requested):
            question = event.question
            request = _request_of(question)
            self._pending[question.question_id] = (question, request)
            if request is not None:
                self._offers[question.question_id] = self._suggest(request)
            return
        entry = self._pending.pop(event.question_id, None)
        self._offers.pop(event.question_id, None)
        if entry is None:
            return
        question, request = entry
        if isinstance(event, Resolved):
            by, detail = self._answerer or ("person", f"view {event.by}")
            decision = Selected(event.option_id) if event.option_id is not None else None
            self._audit(question, request, decision, by, detail, event.reason)
        elif isinstance(event, Withdrawn):
            self._audit(question, request, None, _WITHDRAWN_BY[event.reason], event.reason, None)

    def _answer(
        self, question_id: str, decision: Selected, view: str, by: AnsweredBy, detail: str
    ) -> bool:
        """Answer a pending question through the relay as this desk (``view``: what the
        views are told); whether it was answered."""
        self._answerer = (by, detail)
        try:
            return isinstance(self.relay.answer(question_id, decision, view=view), Resolved)
        finally:
            self._answerer = None

    def _suggest(self, request: PermissionRequest) -> tuple[EditorRule, ...]:
        found: list[EditorRule] = []
        now = datetime.now(UTC)
        for effect in ("allow", "deny"):
            found += suggested_rules(
                request, workspace=self.engine.workspace, effect=effect, created=now
            )
        return tuple(found[:MAX_OFFERS])

    def offers_for(self, question_id: str) -> RuleOffers | None:
        """The rules a view's card for ``question_id`` may save (``None``: none)."""
        offers = self._offers.get(question_id)
        if not offers:
            return None
        workspace = self.engine.workspace
        return RuleOffers(
            question_id,
            [
                RuleOffer(index, rule.effect, f"Always {rule.describe(workspace)}")
                for index, rule in enumerate(offers)
            ],
        )

    # ------------------------------------------------------------------ rules

    def _rule_answered(self, answer: RuleAnswer) -> None:
        request = answer.request
        option = request.option(answer.decision.option_id)
        allowed = option is not None and option.kind.startswith("allow")
        described = answer.rule.describe(self.engine.workspace)
        call = request.tool_call
        self._broadcast(
            RuleReceipt(
                request.session_id,
                call.tool_call_id,
                call.title or call.tool_call_id,
                answer.number,
                described,
                "allowed" if allowed else "denied",
                self.engine.hits(answer.rule),  # (counted before it is told)
                self._answering,
            )
        )
        if not self._answering:  # (one answered through the relay is audited as it ends)
            detail = f"rule {answer.number}: {described}"
            record = record_for(
                request, answer.decision, by="rule", workspace=self.engine.workspace, detail=detail
            )
            self._write(record)

    def rules(self) -> Rules:
        engine = self.engine
        rows = []
        for number, rule in enumerate(engine.rules, 1):
            where = self.rulebook.file_of(rule)
            rows.append(
                RuleRow(
                    number,
                    rule.effect,
                    rule.describe(engine.workspace),
                    engine.hits(rule),
                    str(where) if where else "memory",
                )
            )
        return Rules(rows)

    def save_rule(self, question_id: str, session_id: str, index: int) -> RuleSaved | Error:
        """Keep the offered rule; it answers the question and every pending one it covers.
        An :class:`Error` if it is not kept, or kept but cannot answer the question."""
        offers = self._offers.get(question_id)
        entry = self._pending.get(question_id)
        if offers is None or entry is None or entry[0].session_id != session_id:
            return Error("no such question pending: it was answered or withdrawn")
        if not 0 <= index < len(offers):
            return Error("no such rule offered for that question")
        rule = offers[index]
        try:
            number = self.rulebook.add(rule)
        except OSError as exc:
            return Error(f"the rule was not saved: {exc.strerror or exc}")
        self._broadcast(self.rules())
        described = rule.describe(self.engine.workspace)
        detail = f"rule {number}: {described}"
        for pending_id, (_question, request) in list(self._pending.items()):
            found = self.engine.match(request) if request is not None else None
            if found is None or found.rule is not rule:
                continue
            if not self._answer(pending_id, found.decision, f"rule {number}", "rule", detail):
                continue
            self._answering = pending_id
            try:
                self.engine.record(found)  # (the hit, and the receipt)
            finally:
                self._answering = ""
        if question_id in self._pending:
            return Error(
                "the rule is saved, but it does not answer this card (no option of the kind "
                "it needs): choose an option"
            )
        return RuleSaved(number, described)

    def revoke(self, number: int, words: str) -> RuleRevoked | Error:
        rules = self.engine.rules
        if (
            not 1 <= number <= len(rules)
            or rules[number - 1].describe(self.engine.workspace) != words
        ):
            return Error("that rule changed or is gone: the list is sent again")
        try:
            self.rulebook.revoke(number)
        except OSError as exc:
            return Error(f"the rule was not revoked: {exc.strerror or exc}")
        self._broadcast(self.rules())
        return RuleRevoked(number, words)

    # ---------------------------------------------------------------- batches

    def _batch_engine(self, session_id: str, effect: Effect, what: str) -> RuleEngine | Error:
        kind = what[:-1] if what.endswith("s") and what[:-1] in TOOL_KINDS else what
        try:
            rule = EditorRule(
                effect=effect,
                scope="session",
                lifetime="session",
                session_id=session_id,
                kinds=(kind,) if kind in TOOL_KINDS else (),
                paths=() if kind in TOOL_KINDS else (what,),
            )
        except ValueError as exc:
            return Error(f"not a kind or a path glob: {exc}")
        return RuleEngine([rule], workspace=self.engine.workspace, resolve=os.path.realpath)

    def _covered(
        self, engine: RuleEngine, session_id: str
    ) -> list[tuple[RelayQuestion, PermissionRequest, Selected]]:
        found = []
        for question, request in self._pending.values():
            if question.session_id == session_id and request is not None:
                answer = engine.match(request)
                if answer is None:
                    continue
                allows = self._option_kind(request, answer.decision).startswith("allow")
                if allows and self.engine.denies(request):
                    continue  # a batch never allows what a deny rule covers
                found.append((question, request, answer.decision))
        return found

    @staticmethod
    def _option_kind(request: PermissionRequest, decision: Selected) -> str:
        option = request.option(decision.option_id)
        return option.kind if option is not None else ""

    def preview_batch(self, session_id: str, effect: Effect, what: str) -> BatchPreview | Error:
        engine = self._batch_engine(session_id, effect, what)
        if isinstance(engine, Error):
            return engine
        items = []
        for question, request, decision in self._covered(engine, session_id):
            option = request.option(decision.option_id)
            items.append(
                BatchItem(
                    question.question_id,
                    question.title or question.tool_call_id,
                    option.name if option is not None else "",
                )
            )
        return BatchPreview(session_id, effect, what, items)

    def answer_batch(
        self, session_id: str, effect: Effect, what: str, question_ids: list[str], view: str
    ) -> BatchAnswered | Error:
        engine = self._batch_engine(session_id, effect, what)
        if isinstance(engine, Error):
            return engine
        listed = set(question_ids)
        answered = 0
        by = f"batch {effect}-all {what} ({view})"
        for question, _request, decision in self._covered(engine, session_id):
            listed_now = question.question_id in listed
            if listed_now and self._answer(question.question_id, decision, by, "batch", by):
                answered += 1
        return BatchAnswered(session_id, what, answered)

    # ------------------------------------------------------------------ audit

    def _audit(
        self,
        question: RelayQuestion,
        request: PermissionRequest | None,
        decision: Selected | None,
        by: AnsweredBy,
        detail: str | None,
        reason: str | None,
    ) -> None:
        if request is not None:
            record = record_for(
                request,
                decision,
                by=by,
                workspace=self.engine.workspace,
                detail=detail,
                reason=reason,
            )
        else:  # a request typed only in part: what the relay knows of it
            chosen = decision.option_id if decision is not None else None
            kind = next((o.kind for o in question.options if o.option_id == chosen), None)
            outcome: Outcome = "cancelled"
            if kind is not None:
                outcome = "allowed" if kind.startswith("allow") else "denied"
            record = AuditRecord(
                time=datetime.now(UTC),
                session=question.session_id,
                tool_call=question.tool_call_id,
                outcome=outcome,
                by=by,
                title=question.title,
                kind=question.kind,
                option_id=decision.option_id if decision else None,
                detail=detail,
                reason=reason,
            )
        self._write(record)

    def _write(self, record: AuditRecord) -> None:
        if self.audit is not None:
            self.audit.append(record)  # (a failure is kept in audit.failed)
