"""The one wrapper over litellm: every model call of kgit goes through `Client.ask`.

litellm is imported on first use (it takes seconds) with its bundled price table, so
it never fetches anything at import. A request sends only the settings the model takes
(kgit/scientist/params.py), with an answer limit from the model's table. Calls are
retried with backoff on the provider errors worth retrying; a rate limit whose provider
says when to come back (Retry-After and the reset headers, kgit/scientist/ratelimits.py)
is waited out up to `llm.max_wait_s`, on a progress line that counts down. A model
litellm has no price for is recorded with an unknown cost. API keys stay in the
environment, where litellm reads them: kgit never passes, stores or prints one.

The answer cache (`.git/kgit/cache/llm/`) is keyed by the request as sent (model,
api_base, messages, settings, and CACHE_FORMAT) and holds only answers that were used:
`ask` never stores one; the caller calls `keep(reply)` once the answer was parsed and
accepted, and `discard(reply)` when it was not, so an unusable answer is asked again
instead of replayed.

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
from kgit.errors import LLMError, LLMRateLimited, LLMUnavailable
from kgit.scientist import manual, params, ratelimits

MANUAL = "manual"
REFUSED_TRIES = 3  # a refused connection: the first call and two quick retries
CACHE_FORMAT = 2  # part of every cache key: answers stored under another format are never read
WAIT_LINE_S = 15.0  # a long wait on a rate limit says how long is left this often

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
    key: str | None = None  # the request's answer-cache key (Client.keep / discard)
    truncated: bool = False  # the answer stopped at the output limit (finish_reason "length")
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


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


_LEADING_NAME = re.compile(r"^\s*(?:litellm\.)?(\w+)\s*(?::|\s-)\s*")


def describe(error: BaseException) -> str:
    """One line naming the error once: litellm repeats the class in its messages
    (`litellm.RateLimitError: RateLimitError: OpenAIException - ...`)."""
    names = {cls.__name__ for cls in type(error).__mro__}
    text = redact(str(error))
    while (found := _LEADING_NAME.match(text)) and (found.group(1) in names or
                                                     found.group(1).endswith(("Exception", "Error"))):
        text = text[found.end():]
    head = type(error).__name__
    status = getattr(error, "status_code", None)
    # litellm gives a refused or dropped connection a made-up status 500 (and a response without
    # headers): only a response that came from a server says which status it had.
    if isinstance(status, int) and ratelimits.headers_of(error):
        head += f" (HTTP {status})"
    return _one_line(f"{head}: {text}" if text.strip() else head)


def rate_limited(error: BaseException) -> bool:
    return any(cls.__name__ == "RateLimitError" for cls in type(error).__mro__)


class Client:
    """Asks the model configured for a stage; one instance serves all threads of a run."""

    def __init__(self, llm_config, cache_dir: Path | None, completion=None, sleep=time.sleep, *,
                 manual_dir: Path | None = None, progress=None, stopping: threading.Event | None = None):
        self.config = llm_config
        self.cache_dir = Path(cache_dir) if cache_dir and llm_config.cache else None
        self._completion = completion  # tests and benchmarks inject litellm.completion's stand-in
        self._sleep = sleep
        self.stopping = stopping
        # Retries and the manual model's instructions go to stderr unless the caller takes them.
        self.progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self._settings: dict[str, params.Settings] = {}
        self._lock = threading.Lock()
        self.manual = None
        if manual_dir is not None:
            self.manual = manual.Channel(manual_dir, timeout_s=llm_config.manual_timeout_s, notify=self.progress,
                                         sleep=sleep, stopping=stopping)

    def model(self, stage: str) -> str:
        return self.config.model_for(stage)

    def request(self, stage: str, messages: list[dict]) -> dict:
        """The request as sent (and as the cache keys it): model, api_base, messages, settings."""
        from kgit.scientist import caching  # stable-prefix marks -> the provider's prompt caching

        model = self.model(stage)
        request = {"model": model, "api_base": self.config.api_base, "messages": caching.prepare(model, messages)}
        if model != MANUAL:
            request.update(self.settings(model).values)
        return request

    def settings(self, model: str) -> params.Settings:
        """What `model` is sent besides its messages; a setting it does not take is said once."""
        with self._lock:
            found = self._settings.get(model)
            if found is None:
                found = params.settings(litellm_module(), model, self.config.temperature, self.config.max_tokens)
                self._settings[model] = found
                if found.left_out:
                    self.progress(f"{model} takes no temperature (litellm's parameter table), so llm.temperature "
                                  f"({self.config.temperature:g}) is not sent to it and the provider's default "
                                  "applies (llm.temperature: null sends none to any model).")
        return found

    @staticmethod
    def key(request: dict) -> str:
        material = json.dumps({"cache_format": CACHE_FORMAT, **request}, sort_keys=True)
        return hashlib.sha256(material.encode()).hexdigest()

    def bound(self, stage: str, messages: list[dict]) -> float | None:
        """The most the call `ask(stage, messages)` can cost in USD: 0 when its answer is cached,
        None when no price is known (the manual model, a model litellm's table lacks)."""
        request = self.request(stage, messages)
        if self._cache_get(self.key(request)) is not None:
            return 0.0
        if request["model"] == MANUAL:
            return None
        return params.bound(litellm_module(), request)

    def ask(self, stage: str, messages: list[dict]) -> Reply:
        request = self.request(stage, messages)
        key = self.key(request)
        cached = self._cache_get(key)
        if cached is not None:
            # Served from disk: no money spent this time.
            return Reply(cached["text"], request["model"], cached.get("tokens"), 0.0, cached=True, key=key)
        reply = self._ask_manual(stage, request, key) if request["model"] == MANUAL else self._call(request)
        reply.key = key
        return reply

    def keep(self, reply: Reply):
        """The answer was used: a later identical request gets it from the cache."""
        if reply.key and not reply.cached:
            self._cache_put(reply.key, reply)

    def discard(self, reply: Reply):
        """The answer could not be used: it is never replayed (from the cache or, for the manual
        model, from its answer file)."""
        if not reply.key:
            return
        if self.cache_dir is not None:
            (self.cache_dir / f"{reply.key}.json").unlink(missing_ok=True)
        if reply.model == MANUAL and self.manual is not None:
            self.manual.retire(reply.key)

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
        # drop_params: a setting litellm's mapping let through but the provider's rules refuse is
        # left out rather than failing the call (params.py already left out what the mapping knows).
        kwargs.update(timeout=self.config.timeout_s, num_retries=0, drop_params=True)
        ignore_readonly_warnings()
        model = request["model"]
        tries, used, waited = self.config.retries + 1, 0, 0.0
        while True:
            try:
                response = completion(**kwargs)
                break
            except Exception as e:  # noqa: BLE001 - sorted by classify; anything else re-raised
                kind = classify(e)
                if kind is None:
                    raise
                message = describe(e)
                problem = setup_problem(e)
                if problem == "no key":
                    raise LLMError(f"the model {model} has no API key ({message}). Set the provider's key variable "
                                   "(OPENAI_API_KEY, ANTHROPIC_API_KEY, ...) where kgit runs; a local server that "
                                   "checks no key still needs the variable set, to any value.") from None
                if kind == "fatal":
                    raise LLMError(f"the model {model} refused the call ({message}); retrying would not help. "
                                   "Check the model string, --api-base and the provider's API key variable."
                                   ) from None
                if problem == "refused":
                    tries = min(tries, REFUSED_TRIES)
                limited = rate_limited(e)
                hint = ratelimits.hint(ratelimits.headers_of(e))
                if hint is not None:
                    # The provider said when to come back: wait that long, within llm.max_wait_s.
                    # A rate limit's wait uses up no retry (it is not a failure of the call).
                    seconds = max(hint.seconds, 1.0)
                    if waited + seconds > self.config.max_wait_s:
                        error = LLMRateLimited if limited else LLMUnavailable
                        raise error(f"the model {model} is {'rate limited' if limited else 'unavailable'} "
                                    f"({message}) and the provider asks to wait {hint.seconds:.0f} s "
                                    f"({hint.source}), more than llm.max_wait_s ({self.config.max_wait_s:g} s) "
                                    f"allows{f' after {waited:.0f} s of waiting' if waited else ''}.") from None
                    if not limited:
                        used += 1
                        if used >= tries:
                            raise self._unavailable(model, message, used, request, problem) from None
                    self._wait(model, message, seconds, f"the provider asks to wait {hint.seconds:.1f} s "
                                                        f"({hint.source})")
                    waited += seconds
                    continue
                used += 1
                if used >= tries:
                    if limited:
                        raise LLMRateLimited(f"the model {model} stayed rate limited through {used} tries "
                                             f"({message}); the provider said no time to wait for.") from None
                    raise self._unavailable(model, message, used, request, problem) from None
                delay = min(60.0, 2.0 ** (used - 1)) * (0.5 + random.random())
                self.progress(f"{model}: {_one_line(message, 160)}; retrying in {delay:.1f} s "
                              f"(try {used + 1} of {tries})")
                self._wait(model, message, delay, "")
        choice = response.choices[0]
        text = choice.message.content or ""
        usage = getattr(response, "usage", None)
        return Reply(text, model, getattr(usage, "total_tokens", None) if usage else None, self._cost(response),
                     truncated=getattr(choice, "finish_reason", None) == "length",
                     prompt_tokens=getattr(usage, "prompt_tokens", None) if usage else None,
                     completion_tokens=getattr(usage, "completion_tokens", None) if usage else None)

    def _unavailable(self, model: str, message: str, tries: int, request: dict, problem: str | None) -> LLMError:
        if problem == "refused":
            return LLMError(f"nothing accepts connections for the model {model} at "
                            f"{request.get('api_base') or 'its provider address'} ({message}); tried {tries} "
                            "time(s). Start the server, or fix --api-base / llm.api_base.")
        return LLMUnavailable(f"the model {model} did not answer ({message}): a provider error worth retrying, "
                              f"and it outlasted {tries} tries (llm.retries: {self.config.retries})")

    def _wait(self, model: str, message: str, seconds: float, why: str):
        """Sleep `seconds`, in steps that end at once when the run stops; a wait the provider asked
        for is shown, with the time left on long ones."""
        if why:
            self.progress(f"{model}: {_one_line(message, 160)}; {why}: waiting, {seconds:.0f} s left")
        left = seconds
        while left > 0:
            if self.stopping is not None and self.stopping.is_set():
                raise KeyboardInterrupt(f"the run stopped while waiting on {model}")
            step = min(WAIT_LINE_S, left)
            self._sleep(step)
            left -= step
            if why and left > 0:
                self.progress(f"{model}: waiting on the rate limit, {left:.0f} s left")

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
