"""The one wrapper over litellm: every model call of kgit goes through `Client.ask`.

litellm is imported on first use (it takes seconds) with its bundled price table, so
it never fetches anything at import. Calls are retried with backoff on the provider
errors that are worth retrying, answers are cached on disk keyed by the full request,
and a model litellm has no price for is recorded with an unknown cost. API keys stay
in the environment, where litellm reads them: kgit never passes, stores or prints one.

Two broken setups fail at once instead of spending the retries: a missing API key, and an
address where nothing accepts connections (tried twice more, in case a local server is
still starting). Every retry says so on the progress line. The model `manual` is answered
through files by a person or an agent (kgit/scientist/manual.py), through this same
wrapper, so its answers are cached and its calls counted like any other.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import sys
import threading
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

from kgit import secrets
from kgit.errors import LLMError, LLMUnavailable
from kgit.scientist import manual

MANUAL = "manual"
REFUSED_TRIES = 3  # a refused connection: the first call and two quick retries

# litellm exception class names by what a retry can do about them. tests/test_llm.py
# fails when litellm grows a class that is in neither table, so a new error is a
# decision rather than a silent default.
RETRYABLE = {
    "APIConnectionError", "APIError", "APIResponseValidationError", "BadGatewayError",
    "CallerCredentialRateLimitError", "InternalServerError", "MidStreamFallbackError",
    "RateLimitError", "ServiceUnavailableError", "Timeout",
}
FATAL = {
    "AuthenticationError", "BadRequestError", "BlockedPiiEntityError", "BudgetExceededError",
    "CallerCredentialAuthenticationError", "ContentPolicyViolationError", "ContextWindowExceededError",
    "EndpointNotSupportedByModelError", "GuardrailRaisedException", "ImageFetchError",
    "InvalidRequestError", "JSONSchemaValidationError", "LiteLLMUnknownProvider",
    "MalformedRequestFieldError", "MockException", "ModelNotMappedError", "ModifyResponseException",
    "NotFoundError", "OpenAIError", "PaymentRequiredError", "PermissionDeniedError",
    "RejectedRequestError", "SensitiveDataRouteException", "UnprocessableEntityError",
    "UnsupportedEndpointError", "UnsupportedParamsError", "VectorStoreSearchError",
}
# How providers word a missing key (litellm wraps some of these as retryable 500s).
_NO_KEY = re.compile(r"(?i)missing (\w+ )?(credentials|api[ _-]?key)|api_key client option must be set|"
                     r"no api[ _-]?key (is )?(set|provided|found)")


@dataclass
class Reply:
    text: str
    model: str
    tokens: int | None
    cost: float | None  # USD; None when litellm has no price for the model
    cached: bool = False


def litellm_module():
    """litellm, imported on first use with its bundled price table and no telemetry."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    ignore_readonly_warnings()
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


def ignore_readonly_warnings():
    """Silence pydantic's warning about litellm's `ReadOnly` TypedDict items.

    pydantic warns once per type when it first builds its schema, and litellm builds
    them lazily inside its calls (a provider module imported on first completion), so
    a filter at import is not enough: this runs before every call too, since a
    caller's `warnings.catch_warnings` (pytest's, per test) drops filters on exit. The
    warning concerns litellm's own types; neither kgit nor its user can act on it.
    """
    warnings.filterwarnings("ignore", message=r".*using the `ReadOnly` qualifier", category=UserWarning,
                            module=r"pydantic\.")


def classify(error: BaseException) -> str | None:
    """"retry", "fatal", or None for an exception that is not litellm's."""
    for cls in type(error).__mro__:
        if not cls.__module__.startswith("litellm"):
            continue
        if cls.__name__ in RETRYABLE:
            return "retry"
        if cls.__name__ in FATAL:
            return "fatal"
    return None


def setup_problem(error: BaseException) -> str | None:
    """"no key" or "refused" when the error says the setup is broken rather than the provider busy."""
    seen, chain = set(), []
    e = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    if any(_NO_KEY.search(str(c)) for c in chain):
        return "no key"
    if any(isinstance(c, ConnectionRefusedError) or "connection refused" in str(c).lower() for c in chain):
        return "refused"
    return None


def _one_line(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def redact(text: str) -> str:
    """The text without any secret from the environment or anything shaped like a key (kgit/secrets.py)."""
    return secrets.redact_text(text)


class Client:
    """Asks the model configured for a stage; one instance serves all threads of a run."""

    def __init__(self, llm_config, cache_dir: Path | None, completion=None, sleep=time.sleep, *,
                 manual_dir: Path | None = None, progress=None, stopping: threading.Event | None = None):
        self.config = llm_config
        self.cache_dir = Path(cache_dir) if cache_dir and llm_config.cache else None
        self._completion = completion  # tests and benchmarks inject litellm.completion's stand-in
        self._sleep = sleep
        # Retries and the manual model's instructions go to stderr unless the caller takes them.
        self.progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self.manual = None
        if manual_dir is not None:
            self.manual = manual.Channel(manual_dir, timeout_s=llm_config.manual_timeout_s, notify=self.progress,
                                         sleep=sleep, stopping=stopping)

    def model(self, stage: str) -> str:
        return self.config.model_for(stage)

    def request(self, stage: str, messages: list[dict]) -> dict:
        from kgit.scientist import caching  # stable-prefix marks -> the provider's prompt caching

        return {"model": self.model(stage), "api_base": self.config.api_base,
                "messages": caching.prepare(self.model(stage), messages), "temperature": self.config.temperature}

    def ask(self, stage: str, messages: list[dict]) -> Reply:
        request = self.request(stage, messages)
        key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
        cached = self._cache_get(key)
        if cached is not None:
            # Served from disk: no money spent this time.
            return Reply(cached["text"], request["model"], cached.get("tokens"), 0.0, cached=True)
        reply = self._ask_manual(stage, request, key) if request["model"] == MANUAL else self._call(request)
        self._cache_put(key, reply)
        return reply

    def _ask_manual(self, stage: str, request: dict, key: str) -> Reply:
        if self.manual is None:
            raise LLMError("the manual model answers through files in a kernel repository's .git/kgit/manual/; "
                           "use it from `kgit evolve --model manual`.")
        # No tokens are counted and no price exists: the call is recorded as unpriced.
        return Reply(self.manual.ask(stage, request["messages"], key), MANUAL, None, None)

    def _call(self, request: dict) -> Reply:
        litellm = litellm_module() if self._completion is None else None
        completion = self._completion or litellm.completion
        kwargs = {k: v for k, v in request.items() if v is not None}
        kwargs.update(timeout=self.config.timeout_s, num_retries=0)
        ignore_readonly_warnings()
        model = request["model"]
        tries = self.config.retries + 1
        for attempt in range(self.config.retries + 1):
            try:
                response = completion(**kwargs)
                break
            except Exception as e:  # noqa: BLE001 - sorted by classify; anything else re-raised
                kind = classify(e)
                if kind is None:
                    raise
                message = _one_line(redact(f"{type(e).__name__}: {e}"))
                problem = setup_problem(e)
                if problem == "no key":
                    raise LLMError(f"the model {model} has no API key ({message}). Set the provider's key variable "
                                   "(OPENAI_API_KEY, ANTHROPIC_API_KEY, ...) where kgit runs; a local server that "
                                   "checks no key still needs the variable set, to any value.") from None
                if problem == "refused":
                    tries = min(tries, REFUSED_TRIES)
                if kind == "fatal" or attempt + 1 >= tries:
                    if problem == "refused":
                        raise LLMError(f"nothing accepts connections for the model {model} at "
                                       f"{request.get('api_base') or 'its provider address'} ({message}); tried "
                                       f"{attempt + 1} time(s). Start the server, or fix --api-base / llm.api_base."
                                       ) from None
                    error = LLMError if kind == "fatal" else LLMUnavailable
                    raise error(f"the model {model} failed ({message}). Check the model string, --api-base and "
                                "the provider's API key variable; retryable errors were tried "
                                f"{attempt + 1} time(s) (llm.retries).") from None
                delay = min(60.0, 2.0 ** attempt) * (0.5 + random.random())
                self.progress(f"{model}: {_one_line(message, 160)}; retrying in {delay:.1f} s "
                              f"(try {attempt + 2} of {tries})")
                self._sleep(delay)
        text = response.choices[0].message.content or ""
        usage = getattr(response, "usage", None)
        tokens = getattr(usage, "total_tokens", None) if usage else None
        return Reply(text, request["model"], tokens, self._cost(response))

    def _cost(self, response) -> float | None:
        litellm = litellm_module()
        try:
            return float(litellm.completion_cost(completion_response=response))
        except Exception:  # noqa: BLE001 - no price (unmapped model, no provider prefix): the reply is kept
            return None

    def _cache_get(self, key: str) -> dict | None:
        if self.cache_dir is None:
            return None
        path = self.cache_dir / f"{key}.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None

    def _cache_put(self, key: str, reply: Reply):
        if self.cache_dir is None:
            return
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.cache_dir / f".{key}.{uuid.uuid4().hex}"
        tmp.write_text(json.dumps({"text": reply.text, "tokens": reply.tokens, "cost": reply.cost,
                                   "model": reply.model}), encoding="utf-8")
        os.replace(tmp, self.cache_dir / f"{key}.json")
