"""A job's logs as attempts: each attempt's text follows its marker line
(``=== attempt N of JOB (replica R on node X) ===``). An attempt's text only grows while its node
lives; once the node is gone it is read from an archived copy that may be shorter. A follower
therefore keeps an offset per attempt, never one offset into the whole text."""

from __future__ import annotations

MARKER_PREFIX = "=== attempt "


def split_attempts(text: str) -> list[tuple[str, str]]:
    """(marker line, text) of each attempt in concatenated logs, oldest first."""
    parts: list[tuple[str, str]] = []
    for line in text.splitlines(keepends=True):
        if line.startswith(MARKER_PREFIX) and line.rstrip("\n").endswith("==="):
            parts.append((line.rstrip("\n"), ""))
        elif parts:
            marker, body = parts[-1]
            parts[-1] = (marker, body + line)
    return parts


def unsent(parts: list[tuple[str, str]], sent: dict[str, int]) -> str:
    """The text not yet sent, attempt by attempt (a new attempt's marker line first); ``sent``
    (characters sent per marker) is updated, so a shorter re-read sends nothing twice."""
    out = []
    for marker, text in parts:
        if marker not in sent:
            out.append(f"{marker}\n")
            sent[marker] = 0
        if len(text) > sent[marker]:
            out.append(text[sent[marker]:])
            sent[marker] = len(text)
    return "".join(out)
