"""`cadence bench`: an open-loop load benchmark for streaming TTS servers (docs/bench.md).

Pure measurement code (numpy only, unit-tested): `arrivals` (seeded Poisson schedule), `onset`
(audible onset), `playout` (zero-buffer playout simulation), `percentiles` (nearest rank), `wer`.
Around them: `corpus` (Harvard sentences), `records` (the typed records passed between parts),
`http_target` / `ws_target` (one request each, timed on the client), `measure` (a request's
metrics), `driver` (one open-loop trial), `summary` (per-rate statistics, capacity, cost),
`recognizer` (faster-whisper WER), `server_proc` (a fresh `cadence serve` per trial), `sweep`
(rates x seeds), `output` / `report` / `plots` (results.json, report.md, PNGs), `options` +
`config` + `main` (the command), `rerender` (report and plots again from a results.json).
"""
