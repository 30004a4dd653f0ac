"""`cadence bench`: an open-loop load benchmark for streaming TTS servers (docs/bench.md).

Pure measurement code (numpy only, unit-tested): `arrivals` (seeded Poisson schedule), `onset`
(audible onset), `playout` (zero-buffer playout simulation), `percentiles` (nearest rank), `wer`.
Around them: `corpus` (Harvard sentences), `http_target` / `ws_target` (one request each, timed on
the client), `driver` (one open-loop trial), `summary` (per-trial statistics, capacity, cost),
`recognizer` (faster-whisper WER), `server_proc` (a fresh `cadence serve` per trial), `report` /
`plots` (outputs), `options` + `main` (the command).
"""
