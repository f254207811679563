"""Validate whole JSON-RPC messages a client sends against ACP's JSON Schema (v1).

The schema is ``tests/fixtures/acp-schema/schema.json``. Each message is checked twice: as a whole,
against the schema's client-side envelope (``ClientRequest``, ``ClientResponse``,
``ClientNotification``), and its ``params`` / ``result`` against the specific type
of its method, looked up by the ``x-method`` annotations of the schema: a
``session/prompt`` request's params must be a ``PromptRequest``, the answer to a
``session/request_permission`` a ``RequestPermissionResponse``, and so on. Extension
methods (names starting with ``_``) are checked as ``ExtRequest`` / ``ExtNotification``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from typing import Any

import jsonschema

from tests.support import paths

SCHEMA_PATH = paths.FIXTURES / "acp-schema" / "schema.json"


@cache
def schema_defs() -> dict[str, Any]:
    defs: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["$defs"]
    return defs


@cache
def _validator(def_name: str) -> jsonschema.protocols.Validator:
    defs = schema_defs()
    assert def_name in defs, def_name
    schema = {"$ref": f"#/$defs/{def_name}", "$defs": defs}
    cls = jsonschema.validators.validator_for(
        {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    )
    cls.check_schema(schema)
    validator: jsonschema.protocols.Validator = cls(schema)
    return validator


def assert_valid(def_name: str, instance: Any) -> None:
    """Validate ``instance`` against ``$defs/<def_name>`` of the ACP schema."""
    _validator(def_name).validate(instance)


def is_valid(def_name: str, instance: Any) -> bool:
    return bool(_validator(def_name).is_valid(instance))


@cache
def defs_by_method() -> dict[tuple[str, str], str]:
    """(x-method, "Request" | "Response" | "Notification") -> the ``$defs`` name."""
    defs: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["$defs"]
    table: dict[tuple[str, str], str] = {}
    for name, schema in defs.items():
        method = schema.get("x-method")
        if method is None:
            continue
        for kind in ("Request", "Response", "Notification"):
            if name.endswith(kind):
                assert (method, kind) not in table, (method, kind)
                table[(method, kind)] = name
    return table


def _def_for(method: str, kind: str) -> str:
    if method.startswith("_") and kind in {"Request", "Notification"}:
        return f"Ext{kind}"  # ACP extension methods: any params
    name = defs_by_method().get((method, kind))
    assert name is not None, f"the ACP schema has no {kind} type for {method!r}"
    return name


def validate_client_message(
    message: dict[str, Any], inbound_request_methods: dict[Any, str]
) -> str:
    """Validate one message a client sent; return the ``$defs`` name its payload matched.

    ``inbound_request_methods`` maps the ids of the requests the client received to
    their methods, so a response is checked as the answer to exactly that method.
    Error responses are checked as ``Error`` and reported as ``"Error"``. Raises
    ``AssertionError`` (naming the message) for anything invalid.
    """
    try:
        return _validate(message, inbound_request_methods)
    except Exception as exc:
        raise AssertionError(f"invalid ACP message {message!r}: {exc}") from exc


def _validate(message: dict[str, Any], inbound_request_methods: dict[Any, str]) -> str:
    assert message.get("jsonrpc") == "2.0", message
    if "method" in message:
        method = message["method"]
        if "id" in message:
            assert_valid("ClientRequest", message)
            name = _def_for(method, "Request")
        else:
            assert_valid("ClientNotification", message)
            name = _def_for(method, "Notification")
        assert_valid(name, message["params"])
        return name
    assert_valid("ClientResponse", message)
    if "error" in message:
        assert "result" not in message, message
        assert_valid("Error", message["error"])
        return "Error"
    assert message["id"] in inbound_request_methods, f"answer to an unknown id: {message}"
    name = _def_for(inbound_request_methods[message["id"]], "Response")
    assert_valid(name, message["result"])
    return name


def validate_client_stream(
    sent: Iterable[dict[str, Any]], received: Iterable[dict[str, Any]]
) -> list[tuple[str, str]]:
    """Validate every message of ``sent`` (a client's output, in order).

    ``received`` is everything the client read (to know what each response answers).
    Returns ``(method or "response", $defs name)`` per sent message.
    """
    methods = {m["id"]: m["method"] for m in received if "method" in m and "id" in m}
    checked: list[tuple[str, str]] = []
    for message in sent:
        name = validate_client_message(message, methods)
        checked.append((message.get("method", "response"), name))
    return checked
