"""Scale-out: one engine replica per GPU on Ray Serve, routed by the engine's own admission model.

  headroom.py  what a replica tells the router: would its admission take one more stream, and how many
  router.py    Serve's request router for the replicas: the most headroom first, not round robin
  replica.py   the Serve deployment: one StreamingEngine and the unchanged server app per process
  metrics.py   /metrics for the cluster: every replica's series, labelled, and their sums
  launch.py    `cadence cluster`: a local (or joined) Ray cluster, the deployments, a blocking run
docs/scale-out.md says why Ray Serve and shows the multi-machine set-up. Ray is imported only here and
only when a cluster runs (the `cluster` extra).
"""
