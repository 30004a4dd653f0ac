"""Incremental tokenization of text that arrives in pieces (e.g. streamed from an LLM).

`StreamingTokenizer.push(piece)` returns the ids that can no longer change, whatever text comes
next; `finish()` returns the rest. For every split of a string into pieces,
`sum(push(p) for p in pieces) + finish() == TextTokenizer.encode(string)`.

The tokenizer pipeline is a chain of segmentations, and a prefix is committed only up to a
position that is a boundary of every stage for any continuation:
1. added tokens (leftmost-longest on raw text): hold back from the earliest suffix that is a
   proper prefix of an added token (`"<|im_"` may still become `<|im_end|>`);
2. NFC: cut only where composition and canonical reordering cannot reach across (before a
   starter that never composes backward, or after one that never composes at all);
3. the Qwen2 split regex: every pre-token of a string except the last one stays the same when text
   is appended, except pre-tokens inside a trailing whitespace run (`\\s*[\\r\\n]+` and
   `\\s+(?!\\S)` backtrack over the whole run: `"  \\n  "` + `"\\n"` re-splits the run);
4. BPE runs on each pre-token alone, so a stable pre-token has stable ids.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from tts_engine.text import TextTokenizer


class StreamingTokenizer:
    """Commits the ids of the stable prefix of text pushed so far; one instance per utterance."""

    def __init__(self, tokenizer: TextTokenizer):
        specials = [] if tokenizer.split_special_tokens else list(tokenizer.added_tokens)
        for spec in specials:
            if spec.normalized or spec.lstrip or spec.rstrip or spec.single_word:
                raise ValueError(
                    f"streaming supports only plain added tokens (normalized/lstrip/rstrip/single_word "
                    f"all false); {spec.content!r} is not"
                )
        self._tokenizer = tokenizer
        self._special_ids = {spec.content: spec.id for spec in specials}
        contents = sorted(self._special_ids, key=len, reverse=True)
        # Longest alternative first: re's leftmost-first then equals leftmost-longest.
        self._special_re = re.compile("|".join(map(re.escape, contents))) if contents else None
        self._partials = {c[:k] for c in contents for k in range(1, len(c))}
        self._max_partial = max((len(p) for p in self._partials), default=0)
        self._pending = ""
        _composition_pairs()  # build the NFC tables now, not on the first push of a request

    @property
    def pending_text(self) -> str:
        """Text received but not yet committed."""
        return self._pending

    def push(self, text: str) -> list[int]:
        """Append `text`; return the ids that became final."""
        if not isinstance(text, str):
            raise TypeError(f"push expects str, got {type(text).__name__}")
        s = self._pending + text
        hold = self._special_hold(s)
        ids: list[int] = []
        start = 0  # start of the current run of ordinary text
        if self._special_re is not None:
            for m in self._special_re.finditer(s, 0, len(s)):
                if m.end() > hold:
                    if m.start() < hold:
                        hold = m.start()  # a complete match straddling the hold point waits too
                    break
                ids += self._tokenizer.encode(s[start : m.start()])
                ids.append(self._special_ids[m.group()])
                start = m.end()
        run = s[start:hold]
        cut = _stable_prefix_len(run, self._tokenizer)
        ids += self._tokenizer.encode(run[:cut])
        self._pending = s[start + cut :]
        return ids

    def finish(self) -> list[int]:
        """End of input: return the ids of everything still pending and reset."""
        ids = self._tokenizer.encode(self._pending)
        self._pending = ""
        return ids

    def _special_hold(self, s: str) -> int:
        """Earliest index whose suffix could still grow into an added token (len(s) if none)."""
        for i in range(max(0, len(s) - self._max_partial), len(s)):
            if s[i:] in self._partials:
                return i
        return len(s)


def _stable_prefix_len(run: str, tokenizer: TextTokenizer) -> int:
    """Length of the longest prefix of `run` (ordinary text that may continue) whose ids are final."""
    if not run:
        return 0
    # Largest NFC-safe boundary; text after it may still be recomposed by what comes next.
    end = len(run)
    if not _safe_after(run[-1]):
        end -= 1
        while end > 0 and not _safe_boundary(run, end):
            end -= 1
    if end == 0:
        return 0
    head = run[:end]
    if unicodedata.is_normalized("NFC", head):
        normalized, raw_at = head, None  # offsets coincide
    else:
        normalized, raw_at = _normalize_by_blocks(head)
    spans = tokenizer.pre_token_spans(normalized)
    # The last pre-token and anything in the trailing whitespace run may still change.
    limit = min(spans[-1][0], len(normalized.rstrip()))
    for start, _ in reversed(spans):
        if start > limit or start == 0:
            continue
        if raw_at is None:
            if _safe_boundary(run, start):
                return start
        elif start in raw_at:
            return raw_at[start]
    return 0


def _normalize_by_blocks(text: str) -> tuple[str, dict[int, int]]:
    """NFC of `text` and a map normalized offset -> raw offset at every NFC-safe boundary."""
    cuts = [i for i in range(1, len(text)) if _safe_boundary(text, i)]
    out: list[str] = []
    raw_at = {0: 0}
    length = 0
    for a, b in zip([0, *cuts], [*cuts, len(text)]):
        block = unicodedata.normalize("NFC", text[a:b])
        out.append(block)
        length += len(block)
        raw_at[length] = b
    return "".join(out), raw_at


def _safe_boundary(text: str, i: int) -> bool:
    """NFC(text[:i] + rest) == NFC(text[:i]) + NFC(rest) for the known text[i:] and anything after."""
    return _safe_before(text[i]) or _safe_after(text[i - 1])


@functools.cache
def _safe_before(c: str) -> bool:
    """`c` starts with a starter that never composes with what precedes it."""
    if c < "\x80":
        return True
    _, second_of_pair = _composition_pairs()
    head = unicodedata.normalize("NFD", c)[0]
    return (
        unicodedata.combining(c) == 0
        and unicodedata.combining(head) == 0
        and c not in second_of_pair
        and head not in second_of_pair
    )


@functools.cache
def _safe_after(c: str) -> bool:
    """`c` is an undecomposable starter that composes with neither neighbour."""
    first_of_pair, second_of_pair = _composition_pairs()
    return (
        unicodedata.combining(c) == 0
        and unicodedata.normalize("NFD", c) == c
        and c not in first_of_pair
        and c not in second_of_pair
    )


@functools.cache
def _composition_pairs() -> tuple[frozenset[str], frozenset[str]]:
    """Characters that can be the first / second element of a canonical composition (superset)."""
    first: set[str] = set()
    second: set[str] = set()
    for cp in range(0x30000):  # no canonical decompositions above the CJK compatibility block
        d = unicodedata.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = d.split()
        if len(parts) == 2:
            first.add(chr(int(parts[0], 16)))
            second.add(chr(int(parts[1], 16)))
    # Hangul composes algorithmically: L + V -> LV, LV + T -> LVT.
    first.update(map(chr, range(0x1100, 0x1160)))
    first.update(map(chr, range(0xAC00, 0xD7A4)))
    second.update(map(chr, range(0x1160, 0x1200)))
    return frozenset(first), frozenset(second)
