"""`cadence cluster`: `cadence serve` on N engine replicas (one per GPU) behind Ray Serve, on this machine
or on a Ray cluster it joins (docs/scale-out.md). Same API, same config file; Ray is imported only here."""

from __future__ import annotations

import sys
import time
from pathlib import Path


def add_cluster(sub) -> None:
    p = sub.add_parser("cluster", help="serve on N engine replicas behind Ray Serve (docs/scale-out.md)")
    p.add_argument("--model", required=True, help="checkpoint directory or Hugging Face repo id")
    p.add_argument("--revision", default=None, help="with a repo id: a branch, tag or commit")
    p.add_argument("--config", type=Path, default=None, metavar="FILE.toml", help="as for cadence serve")
    p.add_argument("--device", default="cpu", help="cpu or cuda (then one GPU per replica)")
    p.add_argument("--replicas", type=int, default=None, help="engine replicas (default: one per GPU; CPU 1)")
    p.add_argument("--cpus-per-replica", type=float, default=1.0, help="CPU cores Ray reserves for each")
    p.add_argument("--address", default=None,
                   help="join this Ray cluster (e.g. auto, or HEAD:6379) instead of starting one here")
    p.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="listen port (default 8000)")
    p.set_defaults(func=run)


def run(args) -> int:
    from .. import settings as settings_file
    from ..cli import check_device
    from ..hub import resolve_model
    from ..loading import load_model_dir

    settings = settings_file.load(args.config, {"server": {"host": args.host, "port": args.port}})
    model = resolve_model(args.model, args.revision)
    load_model_dir(model)
    replicas = args.replicas
    if replicas is not None and replicas < 1:
        raise ValueError("--replicas must be >= 1")
    if args.address is None:  # replicas run here: the device must exist here
        check_device(args.device)
        if replicas is None and args.device.startswith("cuda"):
            import torch

            replicas = torch.cuda.device_count()
    replicas = replicas or 1  # CPU, or a machine with no GPU: one replica
    if settings.server.port == 0:
        raise ValueError("cadence cluster needs a fixed --port (Serve's proxy listens on it on every node)")
    try:
        import ray
    except ImportError:
        raise ValueError("cadence cluster needs Ray Serve: pip install 'cadence[cluster]'") from None
    from .launch import deploy, proxy_env, shutdown

    proxy_env()
    ray.init(address=args.address, include_dashboard=False)
    try:
        deploy(str(model), args.device, replicas, settings, cpus_per_replica=args.cpus_per_replica)
        cfg = settings.server
        print(f"cadence cluster: {replicas} replicas listening on http://{cfg.host}:{cfg.port} (model {model}, "
              f"device {args.device}); Ctrl-C stops", file=sys.stderr)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        shutdown()
        ray.shutdown()
    print("cadence cluster: stopped", file=sys.stderr)
    return 0
