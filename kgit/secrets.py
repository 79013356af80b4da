"""Secrets: which environment variables evaluated code may see, and masking key-shaped text.

One module for every place that keeps credentials away from evaluated code, commits,
logs and prompts:

- `ENV_ALLOW` and `SECRET_NAME`: the environment of evaluated code is built from the
  allowlist, and a name that looks like a credential is dropped even when listed;
- `redact_text`: values of the user's secret-named variables, and text shaped like a
  key (private key blocks, provider tokens, a long random value next to a key word),
  replaced by `[redacted]`;
- `redact_result`: the same over a result document's free text (error excerpt,
  captured output), the parts that end up in commit messages and prompts.

Redaction is by shape, so it can miss a secret with no recognisable shape and can mask
a harmless string that looks like one; the allowlist is what keeps secrets out of the
candidate's reach in the first place.
"""

from __future__ import annotations

import os
import re

# Variables the evaluated code may see. Nothing else crosses over: no API keys,
# tokens, cloud or git credentials, whatever their names.
ENV_ALLOW = frozenset({
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
    "ROCM_PATH", "HIP_PATH", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "TRITON_PTXAS_PATH", "TRITON_HIP_LLD_PATH", "VIRTUAL_ENV",
})
# A variable whose name matches holds a credential as far as kgit is concerned.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|SESSION|COOKIE|PRIVATE", re.I)

MASK = "[redacted]"
# Values shorter than this are not masked literally: "1" or "true" would mask half the text.
MIN_SECRET_LEN = 8

_PRIVATE_KEY = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY( BLOCK)?-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\Z)", re.S)
_TOKENS = re.compile("|".join([
    r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}",   # OpenAI, Anthropic
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",              # GitHub tokens
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bglpat-[A-Za-z0-9_-]{20,}",                # GitLab
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",             # AWS access key ids
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}",           # Slack
    r"\bAIza[0-9A-Za-z_-]{35}",                   # Google API keys
    r"\bhf_[A-Za-z0-9]{30,}",                     # Hugging Face
]))
_BEARER = re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}")
# key = value, key: "value", --api-key value ... where the value looks random: at least 20
# characters of hex or base64 alphabet holding both letters and digits.
_KEYWORD_VALUE = re.compile(
    r"(?i)((?:api[_-]?key|access[_-]?key|secret|token|password|passwd|credential|auth|private[_-]?key)"
    r"[\w-]*[\"']?\s*(?:[:=]|\s)\s*[\"']?)([A-Za-z0-9+/_.=-]{20,})")


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def allowed_env(environ=None) -> dict:
    """The allowlisted, non-secret-named part of an environment (os.environ by default)."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k in ENV_ALLOW and not is_secret_name(k)}


def secret_values(environ=None) -> list[str]:
    """Values of the secret-named variables, longest first (so a value containing another is masked whole)."""
    environ = os.environ if environ is None else environ
    values = {v for k, v in environ.items() if is_secret_name(k) and len(v) >= MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def _looks_random(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def redact_text(text: str, environ=None) -> str:
    """The text with known secret values and key-shaped strings replaced by [redacted]."""
    if not text:
        return text
    for value in secret_values(environ):
        text = text.replace(value, MASK)
    text = _PRIVATE_KEY.sub(MASK, text)
    text = _TOKENS.sub(MASK, text)
    text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
    return _KEYWORD_VALUE.sub(lambda m: m.group(1) + MASK if _looks_random(m.group(2)) else m.group(0), text)


# The free-text parts of a result document: what a commit message or a prompt quotes.
_TEXT_FIELDS = ("error", "stdout", "stderr")


def redact_result(doc: dict, environ=None) -> dict:
    """Mask secrets in a result document's error excerpt, captured output and test messages (in place)."""
    for name in _TEXT_FIELDS:
        if isinstance(doc.get(name), str):
            doc[name] = redact_text(doc[name], environ)
    for test in doc.get("tests") or []:
        if isinstance(test, dict) and isinstance(test.get("message"), str):
            test["message"] = redact_text(test["message"], environ)
    for shape in doc.get("shapes") or []:
        if isinstance(shape, dict) and isinstance(shape.get("error"), str):
            shape["error"] = redact_text(shape["error"], environ)
    return doc
