"""The browser session runs a flow: a real SmallWebRTC session (aiortc, as the page does) against
the agent server with `flow` set; the flow's first node speaks as the pipeline starts, in the voice
the node sets, before the caller says anything."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.pipeline import AgentConfig
from agent.scripted_llm import DEFAULT_REPLY

FLOW = """\
initial_node: hello
nodes:
  hello:
    pre_actions:
      - type: voice
        voice: serena
    task_messages:
      - role: developer
        content: Greet the caller.
    functions:
      - name: done
        transition_only: true
        description: The caller is done.
        transition_to: bye
  bye:
    task_messages:
      - role: developer
        content: Say goodbye.
    post_actions:
      - type: end_conversation
"""


@pytest.mark.slow
def test_a_browser_session_starts_the_configured_flow(recorded_server, engine_requests, tmp_path, monkeypatch):
    from agent.server import create_app
    from tests.agent.test_server import _AppThread, _browser_like_session

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    flow = tmp_path / "hello.yaml"
    flow.write_text(FLOW)
    cfg = AgentConfig(cadence_url=recorded_server.ws_url, flow=str(flow))
    with _AppThread(create_app(cfg)) as app:
        asyncio.run(asyncio.wait_for(_browser_like_session(app.url), timeout=60))
        deadline = time.monotonic() + 10
        while not engine_requests and time.monotonic() < deadline:
            time.sleep(0.05)

    # The offline scripted LLM (no LLM configured) answers the node's task in the node's voice (the
    # config's is ryan); the session hangs up after a second, so the reply may be cut short.
    first = engine_requests[0]
    said = " ".join(first.text.split())
    assert first.speaker == "serena" and len(said) > 10 and DEFAULT_REPLY.startswith(said), (first.speaker, said)
