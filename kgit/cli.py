"""The command line: each command parses, calls one library function, prints."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import click

from kgit import __version__, importers, live, workflow
from kgit.errors import INTERRUPTED_MESSAGE, ExitCode, KgitError
from kgit.review import text as report


class KgitGroup(click.Group):
    """Turns a KgitError into its message and exit code, and Ctrl-C into exit code 130 with the one
    sentence every command says then (click's own "Aborted!" exits 1); other exceptions keep their
    traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KgitError as e:
            click.echo(f"kgit: {e}", err=True)
            ctx.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo(f"\nkgit: {INTERRUPTED_MESSAGE}.", err=True)
            ctx.exit(ExitCode.INTERRUPTED)


def _emit_json(data):
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def _progress(message: str):
    click.echo(message, err=True)


_verbose = click.option("--verbose", "-v", is_flag=True, help="Show a failed kernel's whole traceback, kgit's own "
                        "frames included (by default its place in the kernel comes first and kgit's frames are "
                        "left out).")


def _watching(as_json: bool = False) -> live.Progress:
    """Progress lines on stderr and, on a terminal (never with --json), the live line of the
    evaluations in flight: their stage, time so far and limit."""
    return live.Progress(sys.stderr, live=False if as_json else None)


@click.group(cls=KgitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kgit")
def cli():
    """kgit optimizes GPU kernels and keeps every experiment in git.

    \b
    Start:    kgit problems; kgit init mykernel --problem softmax; cd mykernel
    Run:      kgit evolve -n 3     (offline strategist; --model PROVIDER/MODEL for an LLM)
    Manual:   kgit try "HYPOTHESIS"; edit kernel.py; kgit record
    Review:   kgit log, kgit show REV, kgit best, git log --all --grep speedup
    Share:    kgit report --open, kgit diff A B, kgit lineage REV, kgit pr N
    \b
    Every command but init, problems and eval-candidate runs inside a kernel
    repository. A REV is a sha, a branch (kgit/3-...), a tag (kgit/baseline) or an
    experiment number N: experiment N's best correct attempt, or its last attempt
    if none is correct.
    """


@cli.command()
def problems():
    """List the problems shipped with kgit."""
    click.echo(report.problems_table())


@cli.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--problem", "-p", metavar="NAME", help="Shipped problem to start from (see `kgit problems`).")
@click.option("--force", is_flag=True, help="Overwrite the files init writes (problem/, the kernel, .kgit.yaml) if they exist, "
              "and commit a new baseline.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Use this .kgit.yaml instead of the commented default.")
@click.option("--json", "as_json", is_flag=True, help="Print the baseline result as JSON.")
@click.option("--from-gpumode", "gpumode", type=click.Path(path_type=Path),
              help="Import a GPU MODE problem folder (reference.py, task.yml, submission.py).")
@click.option("--from-kernelbench", "kernelbench", type=click.Path(path_type=Path),
              help="Import a KernelBench problem file (Model, get_inputs, get_init_inputs).")
@click.option("--protocol", metavar="NAME",
              help="Timing protocol of an imported problem (default: the one its GPU MODE eval.py follows, or "
                   "kernelbench-events for KernelBench): kgit-adaptive, gpumode-leaderboard-wall, "
                   "gpumode-leaderboard-events, gpumode-batch, kernelbench-events.")
def init(directory, problem, force, config_file, as_json, gpumode, kernelbench, protocol):
    """Make DIRECTORY (default: here) a kernel repository and commit its measured baseline.

    Copies the problem to problem/, the baseline kernel to kernel.py, writes .kgit.yaml,
    measures the baseline and commits it, tagged kgit/baseline. It refuses to overwrite
    any of those files that already exist unless --force. The problem is a shipped
    one (--problem), or imported: --from-gpumode takes a GPU MODE problem folder and its
    submission.py becomes kernel.py; --from-kernelbench takes a KernelBench file and
    kernel.py starts as ModelNew, a copy of Model (docs/problems.md).
    """
    sources = [s for s in (problem, gpumode, kernelbench) if s]
    if len(sources) != 1:
        raise click.UsageError("say which problem to start from, once: --problem NAME (see `kgit problems`), "
                               "--from-gpumode FOLDER or --from-kernelbench FILE.")
    text = config_file.read_text(encoding="utf-8") if config_file else None
    options = {"force": force, "config_text": text, "progress": _watching(as_json)}
    if protocol and not (gpumode or kernelbench):
        raise click.UsageError("--protocol chooses how an imported problem is timed; a shipped problem names its "
                               "own (set timing.protocol in .kgit.yaml to time it otherwise).")
    if gpumode:
        outcome = importers.init_from_gpumode(directory, gpumode, protocol, **options)
    elif kernelbench:
        outcome = importers.init_from_kernelbench(directory, kernelbench, protocol, **options)
    else:
        outcome = workflow.init(directory, problem, **options)
    if as_json:
        _emit_json({"sha": outcome.sha, "result": outcome.result.to_document()})
        return
    click.echo(report.result_summary(outcome.result))
    click.echo(f"\nbaseline committed as {outcome.sha[:10]} and tagged kgit/baseline.")
    where = "" if directory.resolve() == Path.cwd().resolve() else f"cd {directory}; "
    click.echo(f'next: {where}kgit evolve (-n N for N iterations), or by hand: kgit try "HYPOTHESIS", edit the '
               'kernel, kgit record')
    if outcome.untuned:
        click.echo(f"note: {outcome.untuned}")


@cli.command("try")
@click.argument("hypothesis")
@click.option("--base", metavar="REV", help="Revision to start from: a sha, branch or tag, or an experiment number "
              "(its best correct attempt) (default: the best attempt so far).")
def try_(hypothesis, base):
    """Start the next experiment on branch kgit/<N>-<slug> and check it out.

    HYPOTHESIS says what you expect to change and why; it names the branch and is kept
    in every attempt's commit. Then edit the kernel and run `kgit record`.
    """
    repo, _ = workflow.load()
    branch, base_sha = workflow.start(repo, hypothesis, base, progress=_progress)
    click.echo(f"on {branch} (base {base_sha[:10]}). Edit the kernel, then run `kgit record`.")


@cli.command()
@click.option("-m", "--message", "notes", default="", help="Notes to keep in the attempt's commit body.")
@click.option("--allow-unchanged", is_flag=True,
              help="Record even if the kernel equals this experiment's last attempt or base "
              "(to time a commit again without a new one, use `kgit remeasure REV`).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@_verbose
def record(notes, allow_unchanged, as_json, verbose):
    """Evaluate the work tree and commit it as the next attempt of this experiment.

    Failed attempts are committed too (exit code 3), so the archive remembers them.
    A work tree with no change since the last attempt (or the base) is refused.
    """
    repo, config = workflow.load()
    outcome = workflow.record(repo, config, notes, allow_unchanged=allow_unchanged, progress=_watching(as_json))
    if as_json:
        _emit_json({"sha": outcome.sha, "speedup": outcome.speedup, "config_changes": outcome.config_changes,
                    "result": outcome.result.to_document()})
    else:
        click.echo(report.recorded_text(outcome.result, outcome.base_times, verbose))
        click.echo(f"\nrecorded {outcome.sha[:10]}: {repo.subject(outcome.sha)}")
    if not outcome.result.ok:
        sys.exit(ExitCode.EVALUATION_FAILED)


@cli.command("eval")
@click.argument("rev", default="HEAD")
@click.option("--json", "as_json", is_flag=True, help="Print the harness's result document.")
@_verbose
def eval_(rev, as_json, verbose):
    """Evaluate REV (default HEAD) in a throwaway worktree; your work tree is not touched.

    REV is a sha, a branch or a tag; a number N means experiment N's best correct
    attempt, or its last attempt if none is correct.
    Nothing is committed; `kgit remeasure` keeps the result as a note.
    """
    repo, config = workflow.load()
    judged = workflow.evaluate_commit(repo, config, rev, progress=_watching(as_json))
    if as_json:
        _emit_json(judged.to_document())
    else:
        click.echo(report.result_summary(judged, verbose))
    if not judged.ok:
        sys.exit(ExitCode.EVALUATION_FAILED)


@cli.command()
@click.argument("rev", default="HEAD")
@click.option("--profiler", type=click.Choice(["auto", "ncu", "rocprofv3"]), default="auto", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the stored profile record.")
def profile(rev, profiler, as_json):
    """Hardware counters of REV on this host's GPU (Nsight Compute or rocprofv3), per benchmark
    shape, kept in the commit's note (docs/targets.md)."""
    from kgit.evaluation import profile as profile_mod

    repo, config = workflow.load()
    _progress(f"profiling {rev} on the benchmark shapes...")
    record = profile_mod.profile(repo, config, rev, profiler)
    if as_json:
        _emit_json(record)
    else:
        click.echo(profile_mod.profile_text(record))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array with an object per attempt (full "
              "shas); each object's `devices` holds the latest timing per device and the spread of repeated "
              "measurements.")
@click.option("--devices", "per_device", is_flag=True,
              help="One row per attempt and device: latest geomean, measurements, min, max, spread.")
@click.option("--wide", is_flag=True, help="Every column on every row (branch, device, verdict) and whole "
              "hypotheses, however wide.")
def log(as_json, per_device, wide):
    """The archive: every attempt of every experiment.

    "vs base" is the speedup over the attempt's base (what its experiment started
    from), "vs baseline" over kgit/baseline; above 1 is faster. Interpreter timings
    say nothing about speed, so they get no ratio (the columns are left out when no
    attempt has one); once attempts are re-measured on a GPU, two more columns give
    the ranking device's geomean and speedup. A column that is the same on every row
    is said once above the table, and hypotheses are cut to fit the terminal;
    --wide shows everything. The last line is what the model calls cost, those that
    led to no commit included.
    """
    repo, _ = workflow.load()
    if as_json:
        click.echo(repo.log_json())  # rendered in the archive's cache: 100,000 attempts in about a second
        return
    attempts = repo.read()
    if not attempts:
        click.echo("no attempts yet: the archive starts with `kgit init`.")
    elif per_device:
        click.echo(report.devices_table(attempts))
    else:
        from kgit.review import spending

        click.echo(report.log_table(attempts, width=shutil.get_terminal_size().columns, wide=wide))
        click.echo("\n" + spending.log_line(spending.load(repo, attempts)))


@cli.command()
@click.argument("revs", nargs=-1)
@click.option("--device-tag", help="Name this device in `kgit log --devices` (default: the name the "
              "harness reports, e.g. \"NVIDIA H200\"); e.g. mi300x-box2.")
@click.option("--repeat", default=1, show_default=True, help="Measure each revision this many times.")
@click.option("--all", "every", is_flag=True, help="Every correct attempt, instead of REVS.")
@click.option("--protocol", metavar="NAME", help="Time under this timing protocol instead of the configured one "
              "(e.g. gpumode-leaderboard-wall); figures of different protocols are never ranked together.")
@click.option("--json", "as_json", is_flag=True, help="Print the stored note records as JSON.")
def remeasure(revs, device_tag, repeat, every, protocol, as_json):
    """Evaluate attempts again and keep the results as git notes (refs/notes/kgit).

    REVS default to the baseline and the best attempt; each is a sha, a branch or a tag,
    or a number N: experiment N's best correct attempt, or its last attempt if none is
    correct. Commits are never rewritten;
    `kgit log --devices` shows the latest timing per device and the spread, and
    `kgit sync` shares the notes with a remote.
    """
    from kgit import remeasure as rm

    repo, config = workflow.load()
    done = rm.remeasure(repo, config, revs, device_tag=device_tag, repeat=repeat, every=every, protocol=protocol,
                        progress=None if as_json else _watching())
    if as_json:
        _emit_json([{"sha": d.sha, **d.record.to_note()} for d in done])
    else:
        click.echo(f"stored {len(done)} measurement(s) in refs/notes/kgit; push them with `kgit sync`.")


@cli.command()
@click.argument("remote", default="origin")
@click.option("--json", "as_json", is_flag=True, help="Print what was merged and pushed as JSON.")
def sync(remote, as_json):
    """Fetch REMOTE's measurement notes, merge them with yours, and push the union.

    `git clone` and `git push` leave notes behind; run this on every machine that
    measures (after pushing the kgit/* branches the notes belong to).
    """
    from kgit import remeasure as rm

    repo, _ = workflow.load()
    summary = rm.sync(repo, remote)
    if as_json:
        _emit_json(summary)
    else:
        click.echo(f"{remote}: {summary['merged']}; " + (f"pushed {summary['notes']} note(s)."
                   if summary["pushed"] else "nothing to push (no notes on either side)."))


@cli.command("config")
@click.argument("args", nargs=-1, metavar="[KEY [VALUE] ...]")
@click.option("--local", "local", is_flag=True, help="Set (KEY VALUE ...) or, with --unset, remove (KEY ...) "
              "settings of this clone alone, in .git/kgit/local.yaml.")
@click.option("--unset", is_flag=True, help="With --local: remove the KEYs given.")
@click.option("--json", "as_json", is_flag=True, help="Print the machine-local settings (and KEY's value) as JSON.")
def config_(args, local, unset, as_json):
    """Settings of this machine alone, over the committed .kgit.yaml.

    \b
    Where to evaluate is a property of the machine, not of the kernel's history:
      kgit config --local evaluator.command './mi300-eval.sh {device}' evaluator.backend command
      kgit config --local evaluator.devices '[0, 1, 2, 3]'
      kgit config --local --unset evaluator.backend evaluator.command
      kgit config evaluator.backend        (its value here, and where it comes from)
      kgit config                          (the machine-local settings)
    Values are read as YAML (900, [0, 1], null). Only evaluator.* keys can be local; they
    live in .git/kgit/local.yaml, which try, record, eval, evolve and remeasure read and no
    commit carries. Everything else is part of the experiment: edit .kgit.yaml, and `kgit
    record` commits the change with the next attempt (and says so).
    """
    from kgit import settings

    repo, _ = workflow.load(archive=False)  # this machine's settings may come before the archive
    shown = settings.configure(repo, args, local=local, unset=unset)
    if as_json:
        _emit_json(shown.to_json())
    else:
        click.echo(shown.text())


@cli.command("eval-candidate")
@click.argument("folder", type=click.Path(file_okay=False, allow_dash=True, path_type=Path))
def eval_candidate(folder):
    """Evaluate a candidate folder here and print the result JSON on stdout.

    What a remote evaluator runs: the `command` backend and Ray hand it a folder with
    kgit-candidate.json, problem/ and kernel/ (docs/evaluators.md). The result echoes the
    folder's nonce and the digest of the files evaluated, so the sender can tell it
    answers its own candidate. Exit code 3 when the kernel did not pass.

    \b
    FOLDER "-" reads the folder as a tar archive on stdin, as the command backend sends
    it, into a temporary folder of its own that goes when the evaluation ends:
      ssh box "kgit eval-candidate -"      (as an evaluator.command; docs/evaluators.md)
      tar -C FOLDER -cf - . | ssh box "kgit eval-candidate -"      (by hand)
    When the sender holds stdin open (kgit does) and it then closes, because kgit gave up
    or ended or the connection broke, the evaluation stops at once (exit code 1).
    """
    from kgit.evaluation import candidate
    from kgit.evaluation.evaluated import Evaluation

    if str(folder) == "-":
        doc = candidate.evaluate_stream(click.get_binary_stream("stdin"))
    else:
        doc = candidate.evaluate_folder(folder)
    judged = Evaluation.of(doc)
    click.echo(json.dumps(judged.to_document(), sort_keys=True))
    if not judged.ok:
        sys.exit(ExitCode.EVALUATION_FAILED)


@cli.command()
@click.argument("rev", default="HEAD")
@click.option("--json", "as_json", is_flag=True, help="Print the attempt, its message body, its base's "
              "per-shape times and the diff stat as JSON.")
@_verbose
def show(rev, as_json, verbose):
    """One attempt (default HEAD): hypothesis, notes, per-shape timings against its base, diff stat.

    REV is a sha, a branch or a tag; a number N means experiment N's best correct
    attempt, or its last attempt if none is correct.
    """
    repo, _ = workflow.load()
    attempt, body, base_times, diffstat = workflow.describe(repo, rev)
    if as_json:
        _emit_json({**attempt.to_json(), "body": body, "base_times_us": base_times, "diffstat": diffstat})
    else:
        click.echo(report.attempt_text(attempt, body, base_times, diffstat, verbose))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the attempt as JSON (as in `kgit log --json`).")
def best(as_json):
    """The best correct attempt so far, by the rule it prints (docs/evolve.md)."""
    from kgit.archive import figures

    repo, _ = workflow.load()
    attempts = repo.read()
    attempt = workflow.best(attempts)
    if attempt is None:
        raise KgitError("no correct attempt in the archive yet; run `kgit init` or `kgit record`.")
    if as_json:
        _emit_json({**attempt.to_json(), "rule": figures.ranking_rule(attempts)})
    else:
        click.echo("\n".join(report.best_lines(attempts, attempt)))


@cli.command()
@click.option("-n", "--iterations", type=click.IntRange(min=1),
              help="Iterations to run, each a select-design-write round (default: evolve.iterations).")
@click.option("--model", help='litellm model string for every stage, "offline", or "manual" (you answer through '
                              'files; docs/evolve.md) (default: llm.model).')
@click.option("--api-base", help="Base URL of an OpenAI-compatible or local server (default: llm.api_base).")
@click.option("--max-cost", type=click.FloatRange(min=0, min_open=True),
              help="Spend at most this much (USD) on priced model calls: each call is checked before it is made, "
                   "at its prompt plus llm.max_tokens of answer; plans already paid for wait for the next run.")
@click.option("--jobs", "-j", type=click.IntRange(min=1),
              help="Hypotheses in flight at once; evaluations queue per GPU (default: evolve.jobs).")
@click.option("--dry-run", is_flag=True, help="Print the prompts the next iteration would send, and call no model.")
@click.option("--json", "as_json", is_flag=True, help="Print the run's attempts as JSON at the end.")
def evolve(iterations, model, api_base, max_cost, jobs, dry_run, as_json):
    """Run the scientist: select a base, design plans, write and measure them.

    \b
    Every writer attempt becomes a commit on a branch kgit/<N>-<slug>; failures too.
    Runs out of the box with the offline strategist (tunable parameters, no model);
    with a model: kgit evolve --model anthropic/claude-sonnet-4-5 -n 3
    (the provider's key in its usual variable, e.g. ANTHROPIC_API_KEY).
    Defaults come from .kgit.yaml (the evolve: and llm: keys).
    Rerunning resumes: numbering continues, measured trees are not measured again,
    and plans a stopped run designed but did not finish are carried out first.
    Ctrl-C stops cleanly; commits made so far are kept. See docs/evolve.md.
    """
    from kgit import evolve as evolve_mod

    repo, config = workflow.load()
    config = evolve_mod.with_overrides(config, iterations=iterations, model=model, api_base=api_base, max_cost=max_cost, jobs=jobs)
    if dry_run:
        click.echo(evolve_mod.dry_run(repo, config))
        return
    try:
        summary = evolve_mod.evolve(repo, config, progress=_watching(as_json))
    except KgitError as e:
        # The run's summary is printed however the run ended; the error line follows it.
        if getattr(e, "summary", None) is not None:
            _evolve_summary(e.summary, as_json)
        raise
    _evolve_summary(summary, as_json)
    if summary.interrupted:
        sys.exit(ExitCode.INTERRUPTED)


def _evolve_summary(summary, as_json: bool):
    from kgit import evolve as evolve_mod

    if as_json:
        _emit_json(evolve_mod.summary_json(summary))
    else:
        click.echo(evolve_mod.summary_text(summary))


@cli.command("report")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the HTML file (default: .git/kgit/report.html, outside your work tree).")
@click.option("--open", "open_it", is_flag=True, help="Open the report in the default browser.")
@click.option("--markdown", is_flag=True, help="Print a markdown summary (for an issue or a PR comment) instead.")
@click.option("--json", "as_json", is_flag=True, help="Print the totals and one object per experiment.")
def report_(output, open_it, markdown, as_json):
    """The campaign at a glance: one self-contained HTML file.

    \b
    Progress curve (with the baseline, task.yml's `references` and the speed of light
    where the device is known), lineage tree coloured by status with the best path,
    per-shape speedup of the best attempt, the table of hypotheses, and totals.
    Images are embedded: the file opens offline and can be mailed or archived.
    """
    from kgit.review import campaign as review
    from kgit.review import html as report_html

    repo, task = review.here()
    if markdown or as_json:
        campaign = review.load(repo, task)
        if as_json:
            _emit_json(review.to_json(campaign))
        else:
            click.echo(review.markdown(campaign, task.name), nl=False)
        return
    path = report_html.write(repo, task, output or repo.state / "report.html")
    click.echo(f"wrote {path}")
    if open_it and not report_html.open_in_browser(path):
        click.echo("no browser to open it here (no display); copy the file to a machine with one, e.g. "
                   f"`scp HOST:{path} .`")


@cli.command()
@click.argument("experiment")
@click.option("--remote", default="origin", show_default=True, help="Git remote to push the review branch to.")
@click.option("--base-branch", help="Branch the pull request targets (default: the branch the baseline was "
              "committed on, or the remote's default branch when the remote lacks that one).")
@click.option("--json", "as_json", is_flag=True, help="Print the proposal (branch, title, body, command, "
              "whether it was opened) as JSON.")
def pr(experiment, remote, base_branch, as_json):
    """Propose EXPERIMENT's best attempt as a pull request.

    \b
    EXPERIMENT is a number (3) or a branch (kgit/3-...). The best attempt's tree becomes
    one commit on the experiment's base (plus one commit per earlier experiment the
    base branch lacks), pushed to kgit-review/<N>-<slug> on REMOTE. With gh installed
    and logged in the pull request is opened; otherwise the body and the exact
    `gh pr create` command are printed. Failed attempts stay in the archive and are
    summarised in the body. See docs/review.md.
    """
    import shlex

    from kgit.review import campaign as review
    from kgit.review import pr as pr_mod

    repo, task = review.here()
    proposal = pr_mod.propose(repo, task, experiment, remote=remote, base_branch=base_branch)
    if proposal.target_note and not as_json:
        _progress(proposal.target_note + ".")
    if as_json:
        _emit_json(proposal.to_json())
    elif proposal.opened:
        click.echo(f"pushed {proposal.branch} to {remote} and opened {proposal.url or 'the pull request'}")
    else:
        click.echo(proposal.body)
        click.echo(f"pushed {proposal.branch} ({proposal.sha[:10]}) to {remote}; {proposal.why_not_opened}. "
                   f"Open the pull request with:\n{shlex.join(proposal.command)}")


@cli.command()
@click.argument("rev_a")
@click.argument("rev_b")
@click.option("--json", "as_json", is_flag=True, help="Print both attempts, the per-shape rows, the speedup "
              "and the code diff as JSON.")
def diff(rev_a, rev_b, as_json):
    """Per-shape timings of attempts REV_A and REV_B on one device, and the code diff.

    Each REV is a sha, a branch or a tag; a number N means experiment N's best correct
    attempt, or its last attempt if none is correct.

    Both are compared on one device and harness: their commits' measurements or notes
    from `kgit remeasure`. Speedup above 1 means B is faster.
    """
    from kgit.review import campaign as review

    repo, _ = workflow.load()
    doc = review.compare(repo, rev_a, rev_b)
    if as_json:
        _emit_json(doc)
    else:
        click.echo(review.compare_text(doc))


@cli.command()
@click.argument("rev", default="HEAD")
@click.option("--json", "as_json", is_flag=True, help="Print the chain as a JSON array of attempts, "
              "baseline first.")
def lineage(rev, as_json):
    """The chain of experiments from the baseline to REV (default HEAD), one line each.

    REV is a sha, a branch or a tag; a number N means experiment N's best correct
    attempt, or its last attempt if none is correct.
    """
    from kgit.review import campaign as review

    repo, _ = workflow.load()
    chain = review.lineage_of(repo, rev)
    if as_json:
        _emit_json([a.to_json() for a in chain])
    else:
        click.echo(review.lineage_text(chain))


def main():
    cli(prog_name="kgit")
