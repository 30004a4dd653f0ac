"""A stand-in for a hosted LLM, named as such: no instruction-tuned chat model and OpenAI-compatible
server ship on the registries here (docs/flows.md). It is an OpenAI-compatible chat-completions
server on a real socket whose "model" is a test script; it streams as OpenAI does (text deltas,
then tool-call deltas, then the finish reason), built from the `openai` package's own chunk types,
so pipecat's OpenAILLMService runs its real request, stream-parsing and tool-call path, and sends
the tools' results back in its next request."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import (
    Choice,
    ChoiceDelta,
    ChoiceDeltaToolCall,
    ChoiceDeltaToolCallFunction,
)

from agent.scripted_llm import Reply, Script, Turn, split_tokens


def _sse(delta: ChoiceDelta, finish_reason: str | None = None) -> str:
    chunk = ChatCompletionChunk(id="standin", object="chat.completion.chunk", created=int(time.time()),
                                model="standin", choices=[Choice(index=0, delta=delta, finish_reason=finish_reason)])
    return f"data: {chunk.model_dump_json(exclude_none=True)}\n\n"


class OpenAIStandIn:
    """`with OpenAIStandIn(script) as llm_server:` serves at `llm_server.base_url`; `requests` keeps
    every request body it got."""

    def __init__(self, script: Script):
        self.requests: list[dict] = []
        self._script = script
        self._ids = itertools.count(1)
        app = FastAPI()
        app.post("/v1/chat/completions")(self._complete)
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    async def _complete(self, request: Request) -> StreamingResponse:
        body = await request.json()
        self.requests.append(body)
        tools = tuple(t["function"]["name"] for t in body.get("tools") or [])
        reply = self._script(Turn(messages=body["messages"], tools=tools, system_instruction=None))
        reply = Reply(text=reply) if isinstance(reply, str) else reply

        def stream():
            for token in split_tokens(reply.text):
                yield _sse(ChoiceDelta(content=token))
            for i, call in enumerate(reply.tool_calls):
                function = ChoiceDeltaToolCallFunction(name=call.name, arguments=json.dumps(dict(call.arguments)))
                yield _sse(ChoiceDelta(tool_calls=[ChoiceDeltaToolCall(index=i, id=f"call_{next(self._ids)}",
                                                                      type="function", function=function)]))
            yield _sse(ChoiceDelta(), "tool_calls" if reply.tool_calls else "stop")
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    def __enter__(self) -> OpenAIStandIn:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the stand-in LLM server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
