"""Prompt order and provider caching: what does not change within a run comes first, and
reaches the provider as a byte-identical prefix (a local OpenAI-compatible server records
the requests), or, for Anthropic models, behind `cache_control` breakpoints.
"""

from __future__ import annotations

import os

import endpoint
import fake_llm
import pytest
from conftest import fast_config_text
from test_llm import evolve_through

from kgit.config import LLMConfig
from kgit.scientist import caching, llm, prompts

SLOW_BLOCK = "BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096"


def common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


@pytest.mark.slow
def test_stable_parts_come_first_and_repeat_byte_for_byte(kernel_repo, run_kgit, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(
        evolve={"pick": 2, "attempts": 1, "iterations": 2, "knowledge": ["triton"]}))
    server = endpoint.Endpoint([endpoint.answer(text) for text in (
        fake_llm.design(["Plan one", "Plan two"], chosen=[0, 1], lessons=["lesson one"]),
        fake_llm.search_replace("kernel.py", SLOW_BLOCK, SLOW_BLOCK.replace("BLOCK_SIZE = 1024", "BLOCK_SIZE = 2048")),
        fake_llm.search_replace("kernel.py", SLOW_BLOCK, SLOW_BLOCK.replace("BLOCK_SIZE = 1024", "BLOCK_SIZE = 512")),
        "select: answered below\n```json\n{\"base\": null}\n```",  # unusable, re-asked
        "no json at all",  # unusable again: the best attempt is the base
        fake_llm.design(["Plan three"], chosen=[0]),
        fake_llm.search_replace("kernel.py", "BLOCK_SIZE = 999", "BLOCK_SIZE = 4096"),
    )])
    result = evolve_through(server, kernel_repo, run_kgit)
    assert result.exit_code == 0, result.output
    bodies = [r["body"]["messages"] for r in server.log]
    assert len(bodies) == 7
    # OpenAI caches identical prefixes by itself: plain strings, no cache_control sent.
    assert all(isinstance(m["content"], str) for msgs in bodies for m in msgs)
    assert "cache_control" not in repr(bodies)
    design1, write1, write2, select1, select2, design2, write3 = bodies
    # One system message first: the same bytes for select and every writer; the designer's
    # continues it with the knowledge documents.
    assert all(msgs[0]["role"] == "system" for msgs in bodies)
    assert select1[0] == select2[0] == write1[0] == write2[0] == write3[0]
    assert design1[0] == design2[0] and design1[0]["content"].startswith(write1[0]["content"])
    assert "# Background" in design1[0]["content"] and "# Background" not in write1[0]["content"]
    # The two writers of one iteration share system + base + reference + both plans, then differ.
    text1, text2 = (msgs[0]["content"] + msgs[1]["content"] for msgs in (write1, write2))
    shared = common_prefix(text1, text2)
    assert "Plan one" in text1[:shared] and "Plan two" in text1[:shared] and SLOW_BLOCK in text1[:shared]
    assert "writer of plan 0" in text1[shared - 20:] and "writer of plan 1" in text2[shared - 20:]
    # The base code is sent once per write request, not again after the plan.
    assert text1.count("def custom_kernel") == 1
    # The selector's re-ask repeats its first request as the prefix.
    assert select2[:2] == select1[:2] and len(select2) == 4
    # The notebook written by the first design is shown to the next select and design.
    assert "lesson one" in select1[-1]["content"] and "lesson one" in design2[-1]["content"]


def test_anthropic_models_get_cache_breakpoints_on_the_stable_parts():
    messages = [prompts.message("system", prompts.part("role and task", stable=True),
                                prompts.part("knowledge", stable=True)),
                prompts.message("user", prompts.part("iteration", stable=True), prompts.part("plan 1"))]
    sent = []

    def completion(**kwargs):
        sent.append(kwargs)
        raise RuntimeError("stop here")  # not litellm's: re-raised, after the request was built

    client = llm.Client(LLMConfig(model="anthropic/claude-sonnet-4-5", cache=False), None, completion=completion)
    try:
        client.ask("write", messages)
    except RuntimeError:
        pass
    system, user = sent[0]["messages"]
    assert [p.get("cache_control") for p in system["content"]] == [{"type": "ephemeral"}] * 2
    assert [p.get("cache_control") for p in user["content"]] == [{"type": "ephemeral"}, None]
    assert prompts.STABLE not in repr(sent[0])
    # Never more than the provider's four breakpoints.
    many = [prompts.message("user", *[prompts.part(str(i), stable=True) for i in range(6)])]
    marked = caching.prepare("anthropic/claude-sonnet-4-5", many)
    assert sum("cache_control" in p for p in marked[0]["content"]) == caching.BREAKPOINTS
    # Others get one string per message, the parts joined.
    assert caching.prepare("openai/gpt-5", messages)[1]["content"] == "iteration\n\nplan 1"
