"""When a provider says to try again: Retry-After and the rate-limit reset headers.

A provider that refuses a call for its rate limit usually says when the limit resets:
`retry-after-ms` or `Retry-After` (seconds or an HTTP date), OpenAI's
`x-ratelimit-reset-requests` / `-tokens` (durations such as `6m0s` or `20ms`) beside
`x-ratelimit-remaining-*`, Anthropic's `anthropic-ratelimit-*-reset` (RFC 3339 times).
litellm hands those headers over on its exceptions (some prefixed `llm_provider-`).
"""

from __future__ import annotations

import datetime as dt
import email.utils
import re
import time
from dataclasses import dataclass

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


@dataclass(frozen=True)
class Hint:
    seconds: float
    source: str  # the header that said so, for the waiting line


def headers_of(error: BaseException) -> dict[str, str]:
    """The response headers an exception of litellm carries, lower-cased ({} when none)."""
    found = getattr(error, "litellm_response_headers", None)
    if not found:
        response = getattr(error, "response", None)
        found = getattr(response, "headers", None)
    try:
        items = dict(found or {}).items()
    except (TypeError, ValueError):
        return {}
    out = {}
    for key, value in items:
        key = str(key).lower()
        out[key.removeprefix("llm_provider-")] = str(value)
    return out


def hint(headers: dict[str, str], now: float | None = None) -> Hint | None:
    """How long the provider asks to wait, or None when its headers do not say."""
    now = time.time() if now is None else now
    if "retry-after-ms" in headers:
        seconds = _number(headers["retry-after-ms"])
        if seconds is not None:
            return Hint(seconds / 1000.0, "retry-after-ms")
    if "retry-after" in headers:
        value = headers["retry-after"].strip()
        seconds = _number(value)
        if seconds is None:
            parsed = email.utils.parsedate_tz(value)
            seconds = None if parsed is None else email.utils.mktime_tz(parsed) - now
        if seconds is not None:
            return Hint(max(0.0, seconds), "Retry-After")
    resets = []
    for key, value in headers.items():
        limit = _reset_limit(key)
        if limit is None:
            continue
        remaining = _number(headers.get(limit[1], ""))
        if remaining is not None and remaining > 0:
            continue  # not the limit that was hit
        seconds = _duration(value) if key.startswith("x-ratelimit") else _until(value, now)
        if seconds is not None:
            resets.append((seconds, key))
    if resets:
        seconds, key = max(resets)
        return Hint(max(0.0, seconds), key)
    return None


def _reset_limit(key: str) -> tuple[str, str] | None:
    """(the reset header, its remaining-count header) for a provider's reset header."""
    if key.startswith("x-ratelimit-reset-"):
        return key, "x-ratelimit-remaining-" + key[len("x-ratelimit-reset-"):]
    if key.startswith("anthropic-ratelimit-") and key.endswith("-reset"):
        return key, key[: -len("-reset")] + "-remaining"
    return None


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value and value >= 0 else None  # not NaN, not negative


def _duration(text: str) -> float | None:
    """OpenAI's reset durations: `1s`, `6m0s`, `20ms`, `1h2m3.5s`; a bare number is seconds."""
    text = text.strip()
    plain = _number(text)
    if plain is not None:
        return plain
    parts = _DURATION.findall(text)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def _until(text: str, now: float) -> float | None:
    """Seconds from `now` to an RFC 3339 time (Anthropic's reset headers)."""
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.timestamp() - now
