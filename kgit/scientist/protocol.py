"""The scientist protocol: select, design and write, implemented by the LLM scientist and
by the offline strategist, so `kgit evolve`, its dry run and any library user drive both
through one path.

Every model request is built here in one order: the stable prefix first (role, task,
evaluation environment, then the knowledge documents; then, for the writers, the
iteration's base, reference and plans), the part that changes last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kgit.archive import buildfacts, notebook, trees
from kgit.scientist import context as context_mod
from kgit.scientist import design as design_mod
from kgit.scientist import knowledge as knowledge_mod
from kgit.scientist import offline, prompts
from kgit.scientist import select as select_mod
from kgit.scientist import write as write_mod
from kgit.scientist.answers import Plan, Selection
from kgit.scientist.context import Environment

if TYPE_CHECKING:
    from kgit.scientist.llm import Client

OFFLINE = "offline"


def is_offline(model: str) -> bool:
    """The one place that knows the offline model's name."""
    return model == OFFLINE


@dataclass
class Context:
    """What the stages may see, fixed for a run (the notebook is re-read each iteration)."""

    repo: object
    task_text: str  # the task with the shapes and the check of this environment
    environment: Environment
    knowledge: str
    editable: list
    pick: int
    attempts_per_plan: int
    archive_tokens: int
    targets: list = field(default_factory=list)  # the declared build targets (docs/targets.md)
    task: object = None  # the problem (its benchmark shapes and work formulas: the designer's rates)
    traits: set = field(default_factory=set)  # what chose the knowledge sections (kgit/scientist/knowledge.py)

    @property
    def root(self):
        return self.repo.root

    def system(self, knowledge: bool) -> dict:
        """The stable prefix: one system message, its parts cacheable one after another."""
        core = prompts.render("system", self.root, task=self.task_text, environment=self.environment.text())
        parts = [prompts.part(core, stable=True)]
        if knowledge:
            parts.append(prompts.part(f"# Background (knowledge documents)\n\n{self.knowledge}", stable=True))
        return prompts.message("system", *parts)


def build(repo, config, task, problem_dir, attempts, host: context_mod.Machine | None) -> Context:
    """The run's context; `host`: this host's GPUs as the loop discovered them (None for a remote evaluator)."""
    environment = context_mod.environment(config, attempts, host, task)
    text = prompts.task_text(task, environment.on_gpu, context_mod.check_text(task, problem_dir))
    declared = list(task.targets if config.targets is None else config.targets)
    traits = knowledge_mod.traits(task, problem_dir, environment, declared)
    return Context(repo, text, environment, prompts.knowledge(config.evolve.knowledge, repo.root, traits), list(task.files),
                   config.evolve.pick, config.evolve.attempts, config.evolve.archive_tokens, declared, task, traits)


@dataclass
class Designed:
    plans: list | None  # None: no usable answer; []: nothing left to try
    replies: list = field(default_factory=list)
    error: str | None = None
    lessons: list | None = None
    fewer_because: str = ""
    none_because: str = ""  # why `plans` is [] (the search is over), in words that say what to do


@dataclass
class Iteration:
    """What the writers of one iteration share."""

    selection: Selection
    plans: list
    base_files: dict
    reference_files: dict
    targets: str = ""  # the base's build facts on the target GPUs (buildfacts.base_facts)


def make_iteration(ctx: Context, attempts, selection: Selection, plans: list, base_files: dict,
              reference_files: dict) -> Iteration:
    """What the writers share, the base's build facts on the declared targets included."""
    return Iteration(selection, plans, base_files, reference_files,
                     buildfacts.base_facts(attempts, selection.base, ctx.targets))


class Scientist(Protocol):
    label: str  # the model (or "offline") named in progress lines and commits

    def select(self, ctx: Context, attempts, best) -> tuple[Selection, list, str]: ...

    def design(self, ctx: Context, attempts, selection: Selection) -> Designed: ...

    def write(self, ctx: Context, iteration: Iteration, plan: Plan, files: dict, error: str, attempt: int): ...

    def preview(self, ctx: Context, attempts, best) -> list[str]: ...


class _Selector:
    """Selection shared by both scientists: forced choices cost no call; an offline
    selector takes the best attempt by kgit's ranking rule."""

    client: Client | None = None

    def select(self, ctx, attempts, best):
        forced = select_mod.forced(attempts, best)
        if forced is not None:
            return forced, [], "forced: only the baseline exists, no model call"
        if self.client is None or is_offline(self.client.model("select")):
            return Selection(best.sha, None, "the best correct attempt by kgit's ranking rule (offline selector)"), [], ""
        return select_mod.ask(self.client, self.select_messages(ctx, attempts), attempts, best)

    def select_messages(self, ctx, attempts) -> list[dict]:
        text = select_mod.prompt(ctx.root, attempts, ctx.archive_tokens, notebook.lessons(ctx.repo))
        return [ctx.system(knowledge=False), prompts.message("user", prompts.part(text))]


class LLMScientist(_Selector):
    def __init__(self, client):
        self.client = client
        self.label = client.model("write")

    def design_messages(self, ctx, attempts, selection) -> list[dict]:
        base_files = trees.commit_files(ctx.repo, selection.base, ctx.editable)
        reference_files = (trees.commit_files(ctx.repo, selection.reference, ctx.editable)
                           if selection.reference else {})
        text = design_mod.prompt(ctx.root, selection, base_files, reference_files, attempts, ctx.pick,
                                 notebook.lessons(ctx.repo), ctx.targets, ctx.task)
        return [ctx.system(knowledge=True), prompts.message("user", prompts.part(text))]

    def design(self, ctx, attempts, selection) -> Designed:
        result, replies, error = design_mod.ask(self.client, self.design_messages(ctx, attempts, selection), ctx.pick)
        if result is None:
            return Designed(None, replies, error)
        return Designed([result.plans[i] for i in result.chosen], replies, None, result.lessons, result.fewer_because)

    def write_messages(self, ctx, iteration, plan, files, error, attempt) -> list[dict]:
        number = next((i for i, p in enumerate(iteration.plans) if p is plan), 0)
        shared = write_mod.iteration_text(ctx.root, iteration.selection, iteration.plans, iteration.base_files,
                                          iteration.reference_files, iteration.targets)
        if attempt == 1:
            ask = write_mod.first_prompt(ctx.root, plan, number, files, ctx.editable)
        else:
            ask = write_mod.fix_prompt(ctx.root, plan, number, files, error, attempt, ctx.attempts_per_plan,
                                       ctx.editable)
        # The writer gets no knowledge documents: 18 writer calls x ~26 KB would be most of a
        # run's input on a provider without prompt caching (benchmarks/prompt_cost.py).
        return [ctx.system(knowledge=False), prompts.message("user", prompts.part(shared, stable=True),
                                                              prompts.part(ask))]

    def write(self, ctx, iteration, plan, files, error, attempt):
        messages = self.write_messages(ctx, iteration, plan, files, error, attempt)
        return write_mod.implement(self.client, messages, files, ctx.editable)

    def preview(self, ctx, attempts, best) -> list[str]:
        out = []
        forced = select_mod.forced(attempts, best)
        if forced is not None:
            out.append(f"# select (no model call)\nbase: {best.sha[:10]} ({forced.reason})")
        elif is_offline(self.client.model("select")):
            out.append(f"# select (offline)\nbase: {best.sha[:10]} (the best correct attempt by kgit's ranking rule)")
        else:
            out.append(f"# select prompt ({self.client.model('select')})\n\n" + _flat(self.select_messages(ctx, attempts)))
        selection = forced or Selection(best.sha, None, "the best attempt (the selector's answer is not known in a dry run)")
        out.append(f"# design prompt ({self.client.model('design')})\n\n" + _flat(self.design_messages(ctx, attempts, selection)))
        placeholder = Plan("<the plan the designer picks>", "<its description>", "<its rubric>")
        files = trees.commit_files(ctx.repo, selection.base, ctx.editable)
        iteration = make_iteration(ctx, attempts, selection, [placeholder], files, {})
        out.append(f"# write prompt ({self.client.model('write')})\n\n"
                   + _flat(self.write_messages(ctx, iteration, placeholder, files, "", 1)))
        return out


class OfflineScientist(_Selector):
    """The offline strategist: neighbours of the best attempts over the marked tunables."""

    def __init__(self, client=None):
        self.client = client
        self.label = client.model("write") if client is not None else OFFLINE

    def design(self, ctx, attempts, selection) -> Designed:
        strategist = offline.Strategist(ctx.repo, ctx.editable)
        plans = strategist.plans(attempts, selection.base, ctx.pick)
        return Designed(plans, none_because="" if plans else strategist.why_no_plans(selection.base))

    def write(self, ctx, iteration, plan, files, error, attempt):
        if self.client is not None and not is_offline(self.client.model("write")):
            return LLMScientist(self.client).write(ctx, iteration, plan, files, error, attempt)
        return offline.write(files, plan), None, None

    def preview(self, ctx, attempts, best) -> list[str]:
        selection, _, _ = _Selector.select(OfflineScientist(), ctx, attempts, best)
        designed = self.design(ctx, attempts, selection)
        listing = "\n".join(f"- {p.title} (base {p.base[:10]}): {p.description}" for p in designed.plans)
        return [f"# select (offline)\nbase: {best.sha[:10]} (the best correct attempt by kgit's ranking rule)",
                f"# design (offline)\n{listing or designed.none_because}"]


def make(client) -> Scientist:
    """The scientist the configured models call for."""
    design, write = client.model("design"), client.model("write")
    if is_offline(write) and not is_offline(design):
        from kgit.errors import KgitError

        raise KgitError(f"llm.write_model is offline but the designer is {design}: the offline writer only "
                        "implements the offline designer's plans. Set both to a model, or both to offline.")
    return OfflineScientist(client) if is_offline(design) else LLMScientist(client)


def _flat(messages: list[dict]) -> str:
    return "\n\n".join(f"[{m['role']}]\n{prompts.flatten(m['content'])}" for m in messages)
