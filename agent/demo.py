"""`cadence demo`: the agent server with offline defaults, and a Cadence engine when one is given.

Settings, later ones winning: AgentConfig's defaults (offline: bundled Whisper tiny.en, the
OFFLINE SCRIPTED LLM, no TTS engine, so the Piper fallback voice), a TOML file (`--config FILE`,
keys = AgentConfig field names, e.g. `llm_base_url = "http://..."`), environment variables
(`CADENCE_URL` for the Cadence WebSocket, `CADENCE_<FIELD>` for any other field, e.g.
`CADENCE_LLM_BASE_URL`), then the command's flags. `--model DIR` starts `cadence serve` on that
checkpoint as a child process on a free loopback port and points the agent at it.

Who may use the page server: the settings file's `[server]` table (ACCESS_SETTINGS, the same keys as
`cadence serve`'s) and CADENCE_API_KEYS (docs/security.md). With keys, the page is public but its API
is not: `cadence demo` prints a sign-in link carrying a short-lived browser token, never a key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import uvicorn

from .pipeline import AgentConfig, cadence_reachable

_FIELDS = {f.name: f for f in dataclasses.fields(AgentConfig)}
# The `[server]` settings that mean something for the page server (the rest are the engine server's).
ACCESS_SETTINGS = ("api_keys_file", "api_keys", "allow_unauthenticated", "allowed_origins", "allowed_hosts",
                   "trusted_proxies", "browser_token_ttl_s", "tls_certfile", "tls_keyfile")


def _coerce(name: str, value):
    """A config value to its field's type (strings from the environment, numbers from TOML)."""
    kind = str(_FIELDS[name].type)
    if value is None or (isinstance(value, str) and value == "" and "None" in kind):
        return None
    try:
        if kind.startswith("float"):
            return float(value)
        if kind.startswith("int"):
            return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def load_config(path: Path | None, environ: dict[str, str] | None = None, **flags) -> AgentConfig:
    """The demo's AgentConfig from defaults, file, environment and flags (None flags are unset).
    The demo has no TTS unless one is configured (AgentConfig's default points at a local engine)."""
    environ = os.environ if environ is None else environ
    values: dict = {"cadence_url": None}
    if path is not None:
        for key, value in _read_toml(path).items():
            if key == "server":  # the page server's access rules: load_access
                continue
            if key not in _FIELDS:
                raise ValueError(f"{path}: unknown setting {key!r} (known: {', '.join(sorted(_FIELDS))})")
            values[key] = _coerce(key, value)
    for name in _FIELDS:
        env = "CADENCE_URL" if name == "cadence_url" else f"CADENCE_{name.upper()}"
        if env in environ:
            values[name] = _coerce(name, environ[env])
    values.update({k: v for k, v in flags.items() if v is not None})
    return AgentConfig(**values).validate(require_tts=False)


def load_access(path: Path | None, environ: Mapping[str, str] | None = None, *, host: str, port: int):
    """The page server's access rules (a `ServerConfig`): the settings file's `[server]` table
    (ACCESS_SETTINGS only), the listen address, and keys from CADENCE_API_KEYS. Listening beyond
    loopback without keys is refused here, as `cadence serve` refuses it."""
    from tts_engine.server.config import ServerConfig
    from tts_engine.server.security import with_api_keys
    from tts_engine.settings import build

    table = _read_toml(path).get("server", {}) if path is not None else {}
    if not isinstance(table, dict):
        raise ValueError(f"{path}: server must be a table ([server])")
    if unknown := sorted(set(table) - set(ACCESS_SETTINGS)):
        raise ValueError(f"{path} [server]: {', '.join(map(repr, unknown))} is not a page server setting "
                         f"(known: {', '.join(ACCESS_SETTINGS)})")
    cfg = build(ServerConfig, {**table, "host": host, "port": port}, f"{path or 'settings'} [server]")
    return with_api_keys(cfg, os.environ if environ is None else environ)


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: {e}") from None


@contextlib.contextmanager
def engine_process(model: Path, *, device: str = "cpu", timeout_s: float = 120.0):
    """`cadence serve --model DIR --port 0` as a child; yields its WebSocket URL once ready."""
    from tts_engine.server.security import API_KEYS_ENV

    cmd = [sys.executable, "-m", "tts_engine.cli", "serve", "--model", str(model), "--port", "0",
           "--device", device, "--log-level", "warning"]
    # The demo's keys guard its page server; the child listens on loopback for the agent alone, whose
    # engine client sends no key: given CADENCE_API_KEYS, it would refuse the agent.
    env = {k: v for k, v in os.environ.items() if k != API_KEYS_ENV}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    try:
        base = None
        deadline = time.monotonic() + timeout_s
        while base is None:
            line = proc.stderr.readline()
            if not line:
                raise ValueError(f"the engine (cadence serve --model {model}) exited with status {proc.wait()}")
            sys.stderr.write(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                base = m.group(1)
            if time.monotonic() > deadline:
                raise ValueError(f"the engine did not start within {timeout_s:.0f} s")
        _drain(proc)
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{base}/ready", timeout=2) as r:
                if r.status == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ValueError("the engine did not become ready")
            time.sleep(0.1)
        yield "ws" + base.removeprefix("http") + "/v1/stream"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _drain(proc: subprocess.Popen) -> None:
    """Keep passing the child's stderr on, so that it never blocks on a full pipe."""
    import threading

    def pump():
        for line in proc.stderr:
            sys.stderr.write(line)

    threading.Thread(target=pump, daemon=True).start()


class _Server(uvicorn.Server):
    """uvicorn's server, stopping gracefully on SIGINT/SIGTERM without re-raising the signal after
    shutdown (which would cancel the lifespan mid-wait and print a traceback)."""

    @contextlib.contextmanager
    def capture_signals(self):
        def stop(sig, _frame):
            self.handle_exit(sig, None)

        previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def _uvicorn_config(app, access) -> uvicorn.Config:
    from tts_engine.server.protocol import timed_protocol

    # The engine server's protocol: a request must arrive whole within 10 s of its first byte
    # (tts_engine/server/protocol.py), so slow or idle clients cannot hold sockets for ever.
    # X-Forwarded-For / -Proto only from the listed proxies (an https page behind a TLS proxy has
    # an https Origin, which the Origin check compares with the scheme it believes).
    return uvicorn.Config(
        app, lifespan="on", log_level="warning", timeout_graceful_shutdown=3, timeout_keep_alive=30,
        http=timed_protocol(10.0, 30.0), server_header=False, ssl_certfile=access.tls_certfile,
        ssl_keyfile=access.tls_keyfile, proxy_headers=bool(access.trusted_proxies),
        forwarded_allow_ips=list(access.trusted_proxies) or None)


def _worker(cfg: AgentConfig, access, secret: bytes, number: int) -> None:
    """One more process on the page's port (`--workers`, spawned by run_demo): its own models and sessions. It
    listens once its models are loaded, so no browser lands on it while it loads."""
    from tts_engine.server.run import bind
    from tts_engine.server.security import AccessPolicy

    from .server import create_app, preload

    sock = bind(access, reuse_port=True, listen=False)
    preload(cfg)
    app = create_app(cfg, access=dataclasses.replace(AccessPolicy.for_page_server(access), secret=secret),
                     worker=number)
    with contextlib.suppress(KeyboardInterrupt):
        _Server(_uvicorn_config(app, access)).run(sockets=[sock])


def start_workers(target, calls: list[tuple], name: str) -> list:
    """`target(*args)` in a process of its own for each args tuple (`cadence demo` / `cadence phone --workers`):
    spawned, not forked, so each is a fresh interpreter with no inherited threads."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    procs = [spawn.Process(target=target, args=args, daemon=True, name=f"{name}-{i}")
             for i, args in enumerate(calls, 1)]
    for p in procs:
        p.start()
    return procs


def stop_workers(procs: list) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.join(10)


def run_demo(cfg: AgentConfig, access, *, model: Path | None, device: str, workers: int = 1) -> int:
    """access: the page server's `ServerConfig` (listen address and access rules: load_access). workers: processes
    serving the page on its port (SO_REUSEPORT: the kernel shares the connections out). A session stays with the
    process its offer reached: the page sends its whole offer in one request, and the media go to that process's
    own ports. Browser tokens are signed with one secret, so any process takes a token another made."""
    import secrets

    from tts_engine.server.run import bind
    from tts_engine.server.security import AccessPolicy

    from .server import create_app

    if model is not None and not model.is_dir():
        raise FileNotFoundError(f"model directory {model} does not exist")
    began = time.monotonic()
    policy = dataclasses.replace(AccessPolicy.for_page_server(access), secret=secrets.token_bytes(32))
    sock = bind(access, reuse_port=workers > 1)
    with contextlib.ExitStack() as stack:
        stack.callback(sock.close)
        if model is not None:
            cfg = dataclasses.replace(cfg, cadence_url=stack.enter_context(engine_process(model, device=device)))
        at_port = dataclasses.replace(access, port=sock.getsockname()[1])  # --port 0: the port this one got
        calls = [(cfg, at_port, policy.secret, i) for i in range(1, workers)]
        stack.callback(stop_workers, start_workers(_worker, calls, "demo-worker"))
        bound_host, bound_port = sock.getsockname()[:2]
        scheme = "https" if access.tls_certfile else "http"
        url = f"{scheme}://{'localhost' if bound_host in ('0.0.0.0', '::') else bound_host}:{bound_port}/"
        failed = False

        def on_ready(readiness):
            nonlocal failed
            if readiness.error is not None:
                failed = True
                print(f"cadence demo: loading the models failed: {readiness.error}; stopping", file=sys.stderr,
                      flush=True)
                server.should_exit = True
                return
            print(f"cadence demo: ready at {url} (models loaded in {readiness.load_s:.1f} s, "
                  f"{time.monotonic() - began:.1f} s after start)", file=sys.stderr, flush=True)
            if policy.needs_key:
                print(f"cadence demo: sign in at {sign_in_link(policy, url)} (valid {policy.token_ttl_s:.0f} s; "
                      f"a fresh token: POST {url}api/token with Authorization: Bearer <key>, then open "
                      f"{url}#access_token=<token>)", file=sys.stderr, flush=True)

        app = create_app(cfg, on_ready=on_ready, access=policy)
        if not cfg.has_engine:
            what = ("speaking with the Piper fallback voice on the CPU" if cfg.has_tts
                    else "the agent answers in text only (fallback_tts = 'none')")
            print(f"cadence demo: no TTS engine configured (pass --model DIR or set CADENCE_URL): {what}",
                  file=sys.stderr)
        elif cfg.cadence_url and not cadence_reachable(cfg.cadence_url):
            print(f"cadence demo: the Cadence engine at {cfg.cadence_url} does not answer (yet): each browser "
                  "connection checks again" + (", else speaks with the Piper fallback voice"
                                               if cfg.fallback_tts == "piper" else ""), file=sys.stderr)
        if cfg.llm_base_url is None:
            print("cadence demo: LLM is the OFFLINE SCRIPTED LLM (not a language model); "
                  "set CADENCE_LLM_BASE_URL for a real one", file=sys.stderr)
        server = _Server(_uvicorn_config(app, access))
        # The page answers at once and shows the loading state; "ready" follows when the models are in.
        keys = f"; API keys: {len(policy.api_keys)}, the page's API needs a token" if policy.needs_key else ""
        procs = f"; {workers} processes" if workers > 1 else ""
        print(f"cadence demo: open {url} (Ctrl-C to stop{keys}{procs}); loading the models...", file=sys.stderr,
              flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises Ctrl-C after its graceful shutdown
            server.run(sockets=[sock])
    print("cadence demo: stopped", file=sys.stderr)
    return 1 if failed else 0


def sign_in_link(policy, url: str) -> str:
    """The page's URL with a short-lived browser token (made for the first key) in its fragment: a
    browser sends a fragment to no server and in no Referer, and the page takes it out of the address
    bar. No key reaches the browser."""
    from tts_engine.server.security import TOKEN_QUERY, Credentials, key_id

    return f"{url}#{TOKEN_QUERY}={Credentials(policy).token(key_id(policy.api_keys[0]))}"
