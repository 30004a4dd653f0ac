"""Voice-to-voice benchmark: spoken questions into the agent over WebRTC, the bot's first audio
heard back, timed per turn and per stage.

    turns.py    the questions, spoken by espeak-ng
    browser.py  headless Chromium on the agent's own page (browser_turns.mjs drives it)
    client.py   an aiortc client that does what the page does (for machines without a browser)
    report.py   per-turn records -> percentiles per stage (JSON) and a PNG plot
    stt_compare.py  the recogniser comparison behind agent/stt.py's choice

`python -m bench.voice --help`; `run_voice_bench(...)` is the same as a function.
"""
