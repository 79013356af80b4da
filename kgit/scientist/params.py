"""What a request sends besides its messages, and the most it can cost, by litellm's tables.

- `temperature` goes only to a model that takes it: litellm maps each provider's
  parameters and refuses, for example, any temperature but 1 for OpenAI's reasoning models
  (o3-mini, gpt-5-mini). kgit asks litellm's mapping first, leaves out what it would
  refuse, and says so once. `llm.temperature: null` sends none.
- `max_tokens` is the model's output limit from litellm's table (at most
  DEFAULT_MAX_TOKENS), or `llm.max_tokens`; litellm turns it into what the provider
  calls it (`max_completion_tokens`, `num_predict`). A model the table lacks gets only an
  explicit `llm.max_tokens`: a local server may hold less context than any default.
- The bound: the prompt's tokens (litellm's counter for the model) and `max_tokens`
  answer tokens at the model's prices: no call can cost more, so `--max-cost` checks it
  before the call is made. None where litellm has no price.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_TOKENS = 16384


@dataclass(frozen=True)
class Settings:
    values: dict  # sent with the request: temperature, max_tokens
    left_out: tuple = ()  # settings asked for that the model does not take


def from_litellm(error: BaseException) -> bool:
    """An exception of litellm's own (a model it cannot map, a parameter it refuses)."""
    return any(cls.__module__.startswith("litellm") for cls in type(error).__mro__)


def output_limit(litellm, model: str) -> int | None:
    """The model's answer limit in tokens by litellm's table, or None when the table lacks it."""
    try:
        info = litellm.get_model_info(model)
    except Exception as e:  # noqa: BLE001 - litellm's "not mapped" errors; anything else is re-raised
        if from_litellm(e) or type(e) is Exception:
            return None
        raise
    limit = info.get("max_output_tokens") or info.get("max_tokens")
    return int(limit) if limit else None


def settings(litellm, model: str, temperature: float | None, max_tokens: int | None) -> Settings:
    """The sampling settings to send to `model`."""
    wanted = {}
    if temperature is not None:
        wanted["temperature"] = temperature
    limit = output_limit(litellm, model)
    if limit:
        wanted["max_tokens"] = min(max_tokens or DEFAULT_MAX_TOKENS, limit)
    elif max_tokens:
        wanted["max_tokens"] = max_tokens
    if "temperature" not in wanted:
        return Settings(wanted)
    try:
        name, provider, _, _ = litellm.get_llm_provider(model)
        accepted = litellm.utils.get_optional_params(model=name, custom_llm_provider=provider, drop_params=True,
                                                     **wanted)
    except Exception as e:  # noqa: BLE001 - litellm cannot map the model: the call itself will say so
        if not from_litellm(e):
            raise
        return Settings(wanted)
    if "temperature" in accepted:
        return Settings(wanted)
    return Settings({k: v for k, v in wanted.items() if k != "temperature"}, ("temperature",))


def bound(litellm, request: dict) -> float | None:
    """The most `request` can cost in USD: its prompt, and `max_tokens` of answer (None: no price known)."""
    model = request["model"]
    completion = request.get("max_tokens") or output_limit(litellm, model)
    if not completion:
        return None
    try:
        prompt = litellm.token_counter(model=model, messages=request["messages"])
        cost_in, cost_out = litellm.cost_per_token(model=model, prompt_tokens=prompt, completion_tokens=completion)
    except Exception as e:  # noqa: BLE001 - no price in litellm's table
        if not from_litellm(e) and type(e) is not Exception:
            raise
        return None
    return float(cost_in) + float(cost_out)
