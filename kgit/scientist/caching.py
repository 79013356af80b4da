"""Provider prompt caching: kgit's stable-prefix marks turned into what the provider needs.

The scientist builds messages whose stable parts (role, task, environment, knowledge;
then an iteration's base, reference and plans) come first and carry a mark. Anthropic
models cache a prefix only up to an explicit `cache_control` breakpoint, so there the
mark becomes one (at most four per request, the provider's limit); OpenAI and most
others cache identical prefixes by themselves, so there the parts are joined back into
one string per message and the prefix is byte-for-byte the same on every call.
"""

from __future__ import annotations

from kgit.scientist.prompts import STABLE

BREAKPOINTS = 4  # Anthropic accepts at most four cache_control blocks per request
_EXPLICIT = ("anthropic/", "claude", "bedrock/anthropic", "bedrock/us.anthropic", "vertex_ai/claude")


def explicit(model: str) -> bool:
    """Does this provider cache only up to marked breakpoints (Anthropic's cache_control)?"""
    name = (model or "").lower()
    return any(name.startswith(prefix) for prefix in _EXPLICIT)


def prepare(model: str, messages: list[dict]) -> list[dict]:
    """The messages as sent: marks become cache breakpoints for explicit-cache providers, else vanish."""
    if explicit(model):
        out, left = [], BREAKPOINTS
        for m in messages:
            content = m["content"]
            if isinstance(content, str):
                out.append(dict(m))
                continue
            parts = []
            for p in content:
                clean = {k: v for k, v in p.items() if k != STABLE}
                if p.get(STABLE) and left > 0:
                    clean["cache_control"] = {"type": "ephemeral"}
                    left -= 1
                parts.append(clean)
            out.append({**m, "content": parts})
        return out
    return [{**m, "content": m["content"] if isinstance(m["content"], str)
             else "\n\n".join(p["text"] for p in m["content"])} for m in messages]
