"""Secrets: which environment variables evaluated code may see, and masking key-shaped text.

One module for every place that keeps credentials away from evaluated code, commits,
logs and prompts:

- `ENV_ALLOW` and `SECRET_NAME`: the environment of evaluated code is built from the
  allowlist, and a name that looks like a credential is dropped even when listed;
- `redact_text`: values of the user's secret-named variables, and text shaped like a
  credential (private key blocks, provider tokens, JSON Web Tokens, passwords in URLs,
  credential-named assignments of .env and config files, long random-looking runs),
  replaced by `[redacted]`; kgit/archive applies it to every commit message, note and
  branch description it writes, whatever wrote the text;
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

# The shapes masked, each documented in docs/sandbox.md ("Redaction").
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
    r"\bya29\.[0-9A-Za-z_-]{20,}",                # Google OAuth access tokens
    r"\bhf_[A-Za-z0-9]{30,}",                     # Hugging Face
    r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",    # Stripe
    r"\bnpm_[A-Za-z0-9]{36}\b",                   # npm
    r"\bpypi-[A-Za-z0-9_-]{50,}",                 # PyPI
    r"\bgsk_[A-Za-z0-9]{40,}",                    # Groq
    r"\bxai-[A-Za-z0-9]{40,}",                    # xAI
    r"\br8_[A-Za-z0-9]{30,}",                     # Replicate
    r"\bdapi[0-9a-f]{32}\b",                      # Databricks
    r"\bdop_v1_[0-9a-f]{64}\b",                   # DigitalOcean
    r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",  # SendGrid
    r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JSON Web Tokens
]))
_BEARER = re.compile(r"(?i)(\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{8,}")
# scheme://user:password@host: the password.
_URL_PASSWORD = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(?=@)")
# An environment or .env line, a constant: NAME=value, NAME: value, export NAME="value",
# where NAME is spelt in capitals and names a credential. The whole value, whatever its shape;
# not a call or an attribute (`PAD_TOKEN = tokenizer.pad_token_id(x)`): the lookahead takes
# the whole run at once, so a shorter piece of it is never tried instead.
_SECRET_ASSIGNMENT = re.compile(
    r"\b((?:[A-Z][A-Z0-9_]*?)?(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|PWD|CREDENTIALS?|AUTH|SESSION|COOKIE|PRIVATE)"
    r"[A-Z0-9_]*[\"']?\s*[:=]\s*[\"']?)(?=([^\s\"',;()]{%d,}))\2(?![\w(])" % MIN_SECRET_LEN)
# A credential key of a config file with a quoted value ("password": "...", api_key: '...').
_QUOTED_SECRET = re.compile(
    r"(?i)([\"']?\b(?:api[_-]?key|access[_-]?key|secret[_-]?key|client[_-]?secret|secret|token|auth[_-]?token|"
    r"access[_-]?token|refresh[_-]?token|password|passwd|pwd|credentials?|private[_-]?key)[\"']?\s*[:=]\s*[\"'])"
    r"([^\"'\s]{%d,})(?=[\"'])" % MIN_SECRET_LEN)
# key = value, key: "value", --api-key value ... where the value looks random: at least 20
# characters of hex or base64 alphabet holding both letters and digits.
_KEYWORD_VALUE = re.compile(
    r"(?i)((?:api[_-]?key|access[_-]?key|secret|token|password|passwd|credential|auth|private[_-]?key)"
    r"[\w-]*[\"']?\s*(?:[:=]|\s)\s*[\"']?)([A-Za-z0-9+/_.=-]{20,})")
# .netrc: machine HOST login USER password VALUE.
_NETRC = re.compile(r"(\blogin\s+\S+\s+password\s+)(\S+)")
# Any other random-looking run: 32 or more characters of the base64 alphabet mixing upper
# case, lower case and digits, where letters seldom run four of one case (words do:
# "Kernel", "BLOCK") and few separators split it. Most generated keys are caught (about
# 19 in 20 of 32 random characters, more of longer ones, 9 in 10 url-safe ones); names
# of kernels, tests and C++ symbols are not.
_LONG_RUN = re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+_=-]{32,}(?![A-Za-z0-9+/_=-])")
_WORDLIKE = re.compile(r"[a-z]{4,}|[A-Z]{4,}")
WORDLIKE_SHARE = 0.4


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


def _random_run(match) -> str:
    """A long run masked when it looks generated (see _LONG_RUN). Kept: mangled C++ names
    (_Z...) and names made of parts (library kernels such as nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT:
    more separators than a url-safe key's one in 32)."""
    run = match.group(0)
    mixed = any(c.islower() for c in run) and any(c.isupper() for c in run) and any(c.isdigit() for c in run)
    if run.startswith("_Z") or not mixed or run.count("_") + run.count("-") >= max(4, len(run) // 12):
        return run
    wordlike = sum(len(m) for m in _WORDLIKE.findall(run)) / len(run)
    return MASK if wordlike < WORDLIKE_SHARE else run


def redact_text(text: str, environ=None) -> str:
    """The text with known secret values and secret-shaped strings replaced by [redacted]."""
    if not text:
        return text
    for value in secret_values(environ):
        text = text.replace(value, MASK)
    text = _PRIVATE_KEY.sub(MASK, text)
    text = _TOKENS.sub(MASK, text)
    text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK, text)
    text = _SECRET_ASSIGNMENT.sub(lambda m: m.group(1) + MASK, text)
    text = _QUOTED_SECRET.sub(lambda m: m.group(1) + MASK, text)
    text = _NETRC.sub(lambda m: m.group(1) + MASK, text)
    text = _KEYWORD_VALUE.sub(lambda m: m.group(1) + MASK if _looks_random(m.group(2)) else m.group(0), text)
    return _LONG_RUN.sub(_random_run, text)


def redact_data(value, environ=None):
    """`redact_text` over every string of a JSON-like value (dict keys kept as they are)."""
    if isinstance(value, str):
        return redact_text(value, environ)
    if isinstance(value, dict):
        return {k: redact_data(v, environ) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(v, environ) for v in value]
    return value


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
