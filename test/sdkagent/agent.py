"""The fixture's agent (examples/demo-agent/fixture.json) served by the real
Supervaizer SDK 1.8.0 server, for the end-to-end tests in test/sdk_*_test.go.

Only the SDK's public API is used: Server, Agent, build_v2_agent_registration,
@server.v2_action / @server.v2_surface and a DataResource. The SDK reads its
own environment (SUPERVAIZER_API_KEY, SUPERVAIZER_SERVER_ID,
SUPERVAIZER_WORKSPACE_AUTH_*, SUPERVAIZER_LOCAL_MODE); this program reads:

  SDKAGENT_PORT   the loopback port uvicorn listens on
  SDKAGENT_LOG    a file where one JSON line is appended per HTTP request
                  received (before the SDK sees it) and per handler run
  SDKAGENT_STUDIO_AGENT_ID  the agent's Studio id (Agent.server_agent_id,
                  which Studio's registration handshake sets in production)

Agent.slug is slugify(name), so an SDK agent cannot have the fixture's slug
"agent_interviewer" (underscore): it is "agent-interviewer" here.

job.start with input {"hold": true} blocks until the process is killed (the
tests' "killed mid-call" case). job.start and the other actions with input
{"snapshot": s} answer a job_state naming job s-job, case s-case and step
s-step (the references tests: snapshot_result); with input {"created": c} they
answer the effects case.created (case c-case of job c-job) and step.updated
(step c-step), the ids nested as the SDK's effects carry them
(created_result). An action's effects carry the workspace id of
its request, so the SSE stream holds effects for every workspace.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import uvicorn

from supervaizer import Account, Agent, DataResource, Server
from supervaizer.contracts import build_v2_agent_registration

FIXTURE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..", "..", "examples", "demo-agent", "fixture.json",
)
NAME = "Agent Interviewer"
SLUG = "agent-interviewer"
VERSION = "1.0"
LOG_PATH = os.environ["SDKAGENT_LOG"]
_log_lock = threading.Lock()


def record(entry: dict[str, Any]) -> None:
    """Appends one JSON line to SDKAGENT_LOG, flushed before returning."""
    line = (json.dumps(entry, sort_keys=True) + "\n").encode("utf-8")
    with _log_lock:
        fd = os.open(LOG_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


class RecordRequests:
    """ASGI middleware: one "http" line per request, before the SDK runs."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            record({
                "kind": "http",
                "method": scope["method"],
                "path": scope["path"],
                "query": scope["query_string"].decode("latin-1"),
                "token": "x-supervaize-workspace-authorization" in headers,
                "mission_id": headers.get("x-supervaize-mission-id"),
                "verified_slug": "x-supervaize-verified-workspace-slug" in headers,
            })
        await self.app(scope, receive, send)


def registration() -> Any:
    with open(FIXTURE, encoding="utf-8") as f:
        reg = json.load(f)["registration"]
    caps = reg["capabilities"]
    return build_v2_agent_registration(
        agent_slug=SLUG,
        agent_id=SLUG,
        display_name=reg["agent"]["display_name"],
        a2ui_catalog_version=reg["versions"]["a2ui_catalog_version"],
        a2ui_version=reg["versions"]["a2ui_version"],
        a2a_version=reg["versions"]["a2a_version"],
        agent_card_url=f"/.well-known/agents/v{VERSION}/{SLUG}_agent.json",
        surfaces=caps["surfaces"] + ["workspace_binding.create"],
        actions=caps["actions"] + ["resource.contacts.get", "resource.contacts.delete",
                                   "workspace_binding.options", "workspace_binding.create"],
        case_lanes=caps["case_lanes"],
        artifact_types=caps["artifact_types"],
        job_policy=reg["job_policy"],
        resources=reg["resources"],
        datasets=reg.get("datasets", []),
    )


CONTACTS: dict[str, dict[str, Any]] = {"c1": {"id": "c1", "email": "a@example.com"}}


def _ctx(context: Any) -> dict[str, Any]:
    mission = getattr(context, "mission", None)
    return {
        "workspace_id": context.workspace_id,
        "mission_id": context.mission_id,
        "mission_metadata": mission.metadata if mission is not None else None,
    }


def contacts_list(context: Any = None) -> list[dict[str, Any]]:
    record({"kind": "data", "op": "list", **_ctx(context)})
    return [dict(v, context=_ctx(context)) for v in CONTACTS.values()]


def contacts_get(item_id: str, context: Any = None) -> dict[str, Any] | None:
    record({"kind": "data", "op": "get", "item_id": item_id, **_ctx(context)})
    item = CONTACTS.get(item_id)
    return None if item is None else dict(item, context=_ctx(context))


def contacts_create(data: dict[str, Any], context: Any = None) -> dict[str, Any]:
    record({"kind": "data", "op": "create", **_ctx(context)})
    item = dict(data, id=data.get("id") or f"c{len(CONTACTS) + 1}")
    CONTACTS[item["id"]] = item
    return item


def contacts_update(item_id: str, data: dict[str, Any], context: Any = None) -> dict[str, Any] | None:
    record({"kind": "data", "op": "update", "item_id": item_id, **_ctx(context)})
    if item_id not in CONTACTS:
        return None
    CONTACTS[item_id] = dict(CONTACTS[item_id], **data, id=item_id)
    return CONTACTS[item_id]


def contacts_delete(item_id: str, context: Any = None) -> bool:
    record({"kind": "data", "op": "delete", "item_id": item_id, **_ctx(context)})
    return CONTACTS.pop(item_id, None) is not None


def contacts_import(records: list[dict[str, Any]], context: Any = None) -> dict[str, Any]:
    record({"kind": "data", "op": "import", "count": len(records), **_ctx(context)})
    return {"imported": len(records)}


def build_server() -> Server:
    contacts = DataResource(
        name="contacts",
        display_name="Contacts",
        importable=True,
        on_list=contacts_list,
        on_get=contacts_get,
        on_create=contacts_create,
        on_update=contacts_update,
        on_delete=contacts_delete,
        on_import=contacts_import,
    )
    agent = Agent(
        name=NAME,
        version=VERSION,
        description="The fixture's agent on the real SDK server (sidecar tests)",
        data_resources=[contacts],
        supervaizer_v2_registration=registration(),
        server_agent_id=os.environ.get("SDKAGENT_STUDIO_AGENT_ID") or None,
    )
    # A Studio account mounts the SDK's /api routes (DataResource, legacy
    # v1) outside local mode; it is never contacted: Server.launch (which
    # registers with Studio) is not called, uvicorn runs server.app.
    account = None
    if os.environ.get("SUPERVAIZER_LOCAL_MODE", "").lower() != "true":
        account = Account(workspace_id="sdkagent-test", api_key="unused",
                          api_url="http://127.0.0.1:9")
    server = Server(
        agents=[agent],
        supervisor_account=account,
        admin_interface=False,
        host="127.0.0.1",
        port=int(os.environ["SDKAGENT_PORT"]),
    )
    register_handlers(server)
    server.app.add_middleware(RecordRequests)
    return server


def _action_record(request: Any) -> dict[str, Any]:
    verified = request.workspace_authorization
    return {
        "kind": "action",
        "action": request.action,
        "request_id": request.request_id,
        "idempotency_key": request.idempotency_key,
        "workspace_id": request.workspace.id,
        "verified_grant": None if verified is None else verified.grant_id,
    }


def snapshot_result(request: Any) -> dict[str, Any]:
    """An action result with a job_state naming job <s>-job, case <s>-case
    and step <s>-step, and an effect naming <s>-job, for input
    {"snapshot": s}; input {"pad": n} adds n bytes to the case's metadata
    (not to the effect event)."""
    snap = request.input["snapshot"]
    return {
        "status": "ok",
        "effects": [{"type": "job.started", "job_id": snap + "-job"}],
        "job_state": {
            "job": {"id": snap + "-job", "agent_slug": SLUG, "mission_id": request.mission_id,
                    "status": "running", "source": {"type": "fresh_start"}},
            "cases": [{"id": snap + "-case", "metadata": {"pad": "x" * int(request.input.get("pad", 0))},
                       "steps": [{"id": snap + "-step", "activity": "operation", "status": "awaiting"}]}],
        },
    }


def created_result(request: Any) -> dict[str, Any]:
    """An action result whose effects name case <c>-case (of job <c>-job)
    and step <c>-step nested, as the fixture's case.created and step.updated
    effects do, for input {"created": c}."""
    c = request.input["created"]
    return {
        "status": "ok",
        "effects": [
            {"type": "case.created", "case": {"id": c + "-case", "job_id": c + "-job", "status": "running"}},
            {"type": "step.updated", "step": {"id": c + "-step", "status": "awaiting"}},
        ],
    }


def register_handlers(server: Server) -> None:
    @server.v2_action("job.start", agent_slug=SLUG)
    def job_start(request: Any) -> dict[str, Any]:
        record(_action_record(request))
        if request.input.get("hold"):
            while True:  # until the test kills the process
                time.sleep(1)
        if request.input.get("snapshot"):
            return snapshot_result(request)
        if request.input.get("created"):
            return created_result(request)
        return {
            "status": "ok",
            "effects": [{"type": "job.started", "job_id": request.job_id,
                         "message": request.workspace.id}],
        }

    def simple(action: str) -> None:
        def handler(request: Any) -> dict[str, Any]:
            record(_action_record(request))
            if request.input.get("snapshot"):
                return snapshot_result(request)
            return {"status": "ok", "effects": [{"type": action, "message": request.workspace.id}]}

        server.register_v2_action(action, handler, agent_slug=SLUG)

    for action in ("job.sync", "job.start.preview", "job.stop", "step.awaiting.submit",
                   "workspace_binding.options", "workspace_binding.create"):
        simple(action)

    def surface(name: str) -> None:
        def handler(request: Any) -> dict[str, Any]:
            record({"kind": "surface", "surface": request.surface,
                    "workspace_id": request.workspace.id})
            return {"surface": request.surface, "document": {"title": name}}

        server.register_v2_surface(name, handler, agent_slug=SLUG)

    for name in ("job.start", "workspace_binding.create"):
        surface(name)


if __name__ == "__main__":
    srv = build_server()
    record({"kind": "ready"})
    uvicorn.run(srv.app, host="127.0.0.1", port=int(os.environ["SDKAGENT_PORT"]),
                log_level="warning", access_log=False)
