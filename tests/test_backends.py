"""Evaluators: the per-device pool, the command backend, Ray on a local cluster, device handling."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import fast_config_text, git

from kgit import config as config_mod
from kgit.archive.repo import BASELINE_TAG, Repo
from kgit.errors import ConfigError, KgitError
from kgit.evaluation import backends, candidate, gpus
from kgit_harness import result as result_mod

NVIDIA_TWO = gpus.Host("nvidia", ("0", "1"))


def _config(**evaluator) -> config_mod.Config:
    return config_mod.parse(fast_config_text(evaluator=evaluator))


def _commit_reference_that_prints_visibility(root: Path) -> str:
    """A commit whose (trusted) reference module prints the GPU visibility the harness child got.

    Candidate kernels may not import os, but the reference may, so it reports what the
    pool pinned without weakening the policy check.
    """
    ref = root / "problem" / "reference.py"
    ref.write_text("import os as _os\nprint('visible=' + _os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'), "
                   "flush=True)\n" + ref.read_text(encoding="utf-8"), encoding="utf-8")
    git(root, "commit", "-q", "-am", "reference prints the child's CUDA_VISIBLE_DEVICES")
    return git(root, "rev-parse", "HEAD").strip()


# -- device selection -------------------------------------------------------------
def test_all_devices_gives_one_slot_per_gpu_and_a_cpu_slot_without_gpus():
    assert gpus.select(NVIDIA_TWO, "all") == ["0", "1"]
    assert gpus.select(gpus.Host(None, ()), "all") == [None]


def test_listed_devices_index_the_visible_ones():
    host = gpus.Host("nvidia", ("4", "6", "7"))
    assert gpus.select(host, [2, 0, 2]) == ["7", "4"]
    assert gpus.pin_env(host, "7") == {"CUDA_VISIBLE_DEVICES": "7"}
    assert gpus.pin_env(gpus.Host("amd", ("2",)), "2") == {"HIP_VISIBLE_DEVICES": "2", "CUDA_VISIBLE_DEVICES": "2"}
    assert gpus.pin_env(gpus.Host(None, ()), None) == {}


def test_listed_devices_that_do_not_exist_are_config_errors():
    with pytest.raises(ConfigError, match="only 2 GPU"):
        gpus.select(NVIDIA_TWO, [0, 2])
    with pytest.raises(ConfigError, match="shows none"):
        gpus.select(gpus.Host(None, ()), [0])


def test_kfd_topology_counts_gpu_nodes_only(tmp_path, monkeypatch):
    for node, simds in (("0", 0), ("1", 304), ("2", 304)):
        (tmp_path / node).mkdir()
        (tmp_path / node / "properties").write_text(f"cpu_cores_count 0\nsimd_count {simds}\narray_count 4\n")
    monkeypatch.setattr(gpus, "KFD_NODES", tmp_path)
    assert gpus._kfd_gpu_count() == 2


@pytest.mark.parametrize("env, expected", [
    ({"ROCR_VISIBLE_DEVICES": "2,3"}, {"HIP_VISIBLE_DEVICES": "2,3"}),
    ({"ROCR_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "1"}, {"HIP_VISIBLE_DEVICES": "3"}),
    ({"ROCR_VISIBLE_DEVICES": "5", "CUDA_VISIBLE_DEVICES": "0"},
     {"HIP_VISIBLE_DEVICES": "5", "CUDA_VISIBLE_DEVICES": "5"}),
    ({"HIP_VISIBLE_DEVICES": "1", "PATH": "/bin"}, {"HIP_VISIBLE_DEVICES": "1", "PATH": "/bin"}),
])
def test_ray_safe_env_selects_the_same_gpus_without_rocr(env, expected):
    assert gpus.ray_safe_env(env) == expected


def test_ray_safe_env_refuses_hip_indices_outside_the_rocr_mask():
    with pytest.raises(ConfigError, match="does not index"):
        gpus.ray_safe_env({"ROCR_VISIBLE_DEVICES": "2", "HIP_VISIBLE_DEVICES": "1"})


# -- the local pool -------------------------------------------------------------------
class RecordingPool(backends.LocalEvaluator):
    """The real pool and worktrees; the harness replaced by a function that records what it got."""

    def __init__(self, *args, work, **kwargs):
        super().__init__(*args, **kwargs)
        self.work = work

    def run(self, path, env):
        assert (path / "kernel.py").exists()
        self.work(env)
        return result_mod.new("ok", device="fake")


def test_concurrent_evaluations_run_on_different_devices(kernel_repo):
    repo = Repo(kernel_repo)
    both_running = threading.Barrier(2, timeout=60)
    pool = RecordingPool(repo, _config(devices="all"), host=NVIDIA_TWO, board=gpus.Board(),
                         work=lambda env: both_running.wait())
    assert pool.slots == 2
    sha = repo.rev(BASELINE_TAG)
    with ThreadPoolExecutor(2) as threads:
        docs = list(threads.map(pool, [sha, sha]))
    # The barrier only opens when both evaluations are inside the pool at once.
    assert sorted(d["worker"]["env"]["CUDA_VISIBLE_DEVICES"] for d in docs) == ["0", "1"]
    assert sorted(d["worker"]["device"] for d in docs) == ["0", "1"]


def test_pool_blocks_callers_until_a_device_is_free(kernel_repo):
    repo = Repo(kernel_repo)
    lock = threading.Lock()
    state = {"now": 0, "peak": 0, "seen": set()}

    def work(env):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
            state["seen"].add(env["CUDA_VISIBLE_DEVICES"])
        time.sleep(0.05)  # long enough for a second caller to overlap if the pool let it in
        with lock:
            state["now"] -= 1

    board = gpus.Board()
    pool = RecordingPool(repo, _config(devices=[1]), host=NVIDIA_TWO, board=board, work=work)
    sha = repo.rev(BASELINE_TAG)
    with ThreadPoolExecutor(4) as threads:
        docs = list(threads.map(pool, [sha] * 5))
    assert [d["status"] for d in docs] == ["ok"] * 5
    assert state["peak"] == 1 and state["seen"] == {"1"}
    assert board.busy() == set()
    assert repo.git("worktree", "list").count("\n") == 1  # every throwaway worktree is gone


def test_board_shares_a_device_between_evaluators_of_one_process():
    board = gpus.Board()
    first = board.acquire([("local", "0"), ("local", "1")])
    second = board.acquire([("local", "0"), ("local", "1")])
    assert {first, second} == {("local", "0"), ("local", "1")}
    got = []
    waiter = threading.Thread(target=lambda: got.append(board.acquire([("local", "1")])))
    waiter.start()
    waiter.join(timeout=0.2)
    assert waiter.is_alive() and not got  # GPU 1 is held, so the caller waits
    board.release(("local", "1"))
    waiter.join()
    assert got == [("local", "1")]


def test_the_harness_child_sees_only_its_pinned_gpu(kernel_repo):
    repo = Repo(kernel_repo)
    sha = _commit_reference_that_prints_visibility(kernel_repo)
    pool = backends.LocalEvaluator(repo, _config(devices=[1]), host=gpus.Host("nvidia", ("5", "3")),
                                   board=gpus.Board())
    doc = pool(sha)
    assert doc["status"] == "ok", doc.get("error")
    assert "visible=3" in doc["stdout"]
    assert doc["worker"]["env"] == {"CUDA_VISIBLE_DEVICES": "3"}


def test_evaluate_rev_goes_through_the_configured_backend(kernel_repo, tmp_path):
    from kgit import workflow

    script = _fake_remote(tmp_path, """answer "$1" '{"schema": "kgit.result/1", "status": "incorrect", "error": "remote says no"}'\n""")
    config = _config(backend="command", command=f"sh {script} {{candidate}}")
    judged = workflow.evaluate_rev(Repo(kernel_repo), config, BASELINE_TAG)
    assert judged.status == "incorrect" and judged.error == "remote says no"
    assert judged.worker["backend"] == "command"


# -- the candidate folder and the command backend --------------------------------------
def test_candidate_folder_holds_problem_kernel_and_manifest(kernel_repo, tmp_path):
    config = _config()
    folder = candidate.stage(kernel_repo, config, tmp_path / "cand", sha="abc")
    assert sorted(p.name for p in (folder / "problem").iterdir()) == ["reference.py", "task.yml"]
    assert (folder / "kernel" / "kernel.py").read_text() == (kernel_repo / "kernel.py").read_text()
    manifest = candidate.read_manifest(folder)
    assert manifest["files"] == ["kernel.py"] and manifest["sha"] == "abc"
    assert candidate.manifest_config(manifest).timing == config.timing
    packed = candidate.pack(folder)
    assert set(packed) == {"kgit-candidate.json", "problem/task.yml", "problem/reference.py", "kernel/kernel.py"}
    with pytest.raises(KgitError, match="outside"):
        candidate.unpack({"../escape.py": b"x"}, tmp_path / "other")
    assert not (tmp_path / "escape.py").exists()


# A shell function for fake remotes: `answer FOLDER JSON` prints the result JSON with the echo
# of the candidate in FOLDER, as an adapter that makes its own results must (docs/evaluators.md).
ANSWER = (f"answer() {{ {shlex.quote(sys.executable)} -c 'import json, sys; from kgit.evaluation import candidate; "
          "doc = json.loads(sys.argv[2]); doc[\"candidate\"] = candidate.answer(sys.argv[1], "
          "candidate.read_manifest(sys.argv[1])); print(json.dumps(doc))' \"$1\" \"$2\"; }\n")


def _fake_remote(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "remote.sh"
    script.write_text("set -e\n" + ANSWER + body)
    return script


def test_command_backend_evaluates_a_copied_folder_like_a_remote_box(kernel_repo, tmp_path, monkeypatch):
    """The template runs `kgit eval-candidate` on a copy of the folder, as `rsync` + `ssh` would."""
    monkeypatch.setenv("KGIT_TEST_API_KEY", "sekrit-value")
    monkeypatch.setenv("KGIT_TEST_SUBMIT_TOKEN", "token-value")
    remote = tmp_path / "box"
    runner = f"{shlex.quote(sys.executable)} -c 'import sys; from kgit.cli import cli; cli(sys.argv[1:])'"
    script = _fake_remote(tmp_path, f"""
mkdir -p {remote}
cp -r "$1" {remote}/cand
env > {remote}/env.txt
{runner} eval-candidate {remote}/cand || true
""")
    config = _config(backend="command", command=f"sh {script} {{candidate}}", pass_env=["KGIT_TEST_SUBMIT_TOKEN"])
    repo = Repo(kernel_repo)
    doc = backends.get_evaluator(repo, config)(repo.rev(BASELINE_TAG))
    assert doc["status"] == "ok", doc.get("error")
    assert doc["geomean_us"] > 0
    assert doc["worker"]["backend"] == "command" and doc["worker"]["exit_code"] == 0
    env_seen = (remote / "env.txt").read_text()
    assert "sekrit-value" not in env_seen and "KGIT_TEST_API_KEY" not in env_seen
    assert "KGIT_TEST_SUBMIT_TOKEN=token-value" in env_seen


def test_command_backend_reads_the_result_file_and_substitutes_devices(kernel_repo, tmp_path):
    script = _fake_remote(tmp_path, """
test -f "$1/kernel/kernel.py" && test -f "$1/problem/reference.py"
echo "a banner line a remote shell printed"
answer "$1" "$(printf '{"schema": "kgit.result/1", "status": "ok", "geomean_us": 1.5, "device": "box gpu %s"}' "$3")" > "$2"
""")
    config = _config(backend="command", command=f"sh {script} {{candidate}} {{result}} {{device}}", devices=[0, 1])
    repo = Repo(kernel_repo)
    evaluator = backends.get_evaluator(repo, config)
    assert evaluator.slots == 2
    sha = repo.rev(BASELINE_TAG)
    with ThreadPoolExecutor(2) as threads:
        docs = list(threads.map(evaluator, [sha, sha]))
    assert all(d["status"] == "ok" and d["geomean_us"] == 1.5 for d in docs)
    assert {d["device"] for d in docs} <= {"box gpu 0", "box gpu 1"}
    assert "banner" in docs[0]["stdout"]


def test_command_backend_takes_the_last_json_line_of_stdout(kernel_repo, tmp_path):
    script = _fake_remote(tmp_path, """
echo 'Welcome to the submission service'
echo '{"note": "not a result"}'
answer "$1" '{"schema": "kgit.result/1", "status": "incorrect", "error": "mismatch at 3"}'
""")
    repo = Repo(kernel_repo)
    doc = backends.get_evaluator(repo, _config(backend="command", command=f"sh {script} {{candidate}}"))(BASELINE_TAG)
    assert doc["status"] == "incorrect" and doc["error"] == "mismatch at 3"


@pytest.mark.parametrize("body, match", [
    ("echo 'connection refused' >&2; exit 255", "exit code 255"),
    ("echo '{\"schema\": \"other/1\", \"status\": \"ok\"}'", "not a kgit.result/1 document"),
    ("echo '{\"schema\": \"kgit.result/1\", \"status\": \"fast\"}'", "unknown status"),
    ("echo '{\"schema\": \"kgit.result/1\", \"status\": \"ok\", \"shapes\": []}'", "needs a positive number in 'geomean_us'"),
])
def test_command_backend_failures_are_evaluator_errors_not_verdicts(kernel_repo, tmp_path, body, match):
    script = _fake_remote(tmp_path, body)
    repo = Repo(kernel_repo)
    with pytest.raises(backends.EvaluatorError, match=match):
        backends.get_evaluator(repo, _config(backend="command", command=f"sh {script}"))(BASELINE_TAG)


def test_command_backend_kills_a_command_past_the_timeout(kernel_repo, tmp_path):
    marker = tmp_path / "survived"
    script = _fake_remote(tmp_path, f"sleep 30; touch {marker}\n")
    repo = Repo(kernel_repo)
    config = _config(backend="command", command=f"sh {script}", timeout_s=0.5)
    doc = backends.get_evaluator(repo, config)(BASELINE_TAG)
    assert doc["status"] == "timeout"
    assert not marker.exists()


def test_a_result_must_echo_the_nonce_and_digest_of_the_candidate_sent(kernel_repo, tmp_path):
    config = _config()
    sent = candidate.read_manifest(candidate.stage(kernel_repo, config, tmp_path / "a", sha="a" * 40))
    other_folder = candidate.stage(kernel_repo, config, tmp_path / "b", sha="b" * 40)
    other = candidate.read_manifest(other_folder)
    assert sent["nonce"] != other["nonce"] and sent["digest"] == other["digest"]  # same files, two candidates
    ok = {"candidate": {"sha": sent["sha"], "nonce": sent["nonce"], "digest": sent["digest"]}}
    assert candidate.check_answer(ok, sent) is None
    swapped = {"candidate": candidate.answer(other_folder, other)}
    assert "answers another candidate: commit bbbbbbbbbb" in candidate.check_answer(swapped, sent)
    assert "does not say which candidate" in candidate.check_answer({}, sent)
    (other_folder / "kernel" / "kernel.py").write_text("# changed on the box\n")
    changed = {"candidate": {**candidate.answer(other_folder, other), "nonce": sent["nonce"]}}
    assert "not the files kgit sent" in candidate.check_answer(changed, sent)


def test_an_evaluator_failure_keeps_the_folder_to_run_by_hand_and_names_versions(kernel_repo, tmp_path):
    script = _fake_remote(tmp_path, """echo '{"schema": "kgit.result/2", "status": "ok"}'\n""")
    repo = Repo(kernel_repo)
    with pytest.raises(backends.EvaluatorError) as err:
        backends.get_evaluator(repo, _config(backend="command", command=f"sh {script}"))(BASELINE_TAG)
    message = str(err.value)
    assert message.count("not a kgit.result/1 document") == 1  # said once, not once per way of reading stdout
    assert "speaks kgit.result/2" in message and "same kgit version" in message
    kept = next((repo.state).glob("cmd-*/candidate"))
    assert f"tar -C {kept} -cf - . | sh {script}" in message
    again = subprocess.run(f"tar -C {kept} -cf - . | sh {script}", shell=True, capture_output=True, text=True)
    assert "kgit.result/2" in again.stdout


def test_the_command_gets_the_candidate_on_stdin_and_stdin_stays_open_until_it_ends(kernel_repo, tmp_path):
    """The archive, then no end of file while the command runs: what `kgit eval-candidate -` watches."""
    seen = tmp_path / "seen"
    script = _fake_remote(tmp_path, f"""
mkdir {seen}
exec 3<&0  # an asynchronous list's stdin would be /dev/null
{{ tar -xf - -C {seen} && cat > {seen}/after; }} <&3 >/dev/null 2>&1 &
sleep 1
test ! -s {seen}/after && kill -0 $! && echo still-open > {seen}/state
answer "$1" '{{"schema": "kgit.result/1", "status": "incorrect", "error": "x"}}'
""")
    repo = Repo(kernel_repo)
    doc = backends.get_evaluator(repo, _config(backend="command", command=f"sh {script} {{candidate}}"))(BASELINE_TAG)
    assert doc["status"] == "incorrect"
    assert (seen / "kernel" / "kernel.py").read_text() == (kernel_repo / "kernel.py").read_text()
    assert (seen / candidate.HOLD).exists() and (seen / "state").read_text() == "still-open\n"


@pytest.mark.slow
def test_eval_candidate_reads_a_hand_made_archive_and_stops_when_a_held_input_closes(kernel_repo, tmp_path):
    folder = candidate.stage(kernel_repo, _config(), tmp_path / "cand", sha="c" * 40)
    kgit = [sys.executable, "-m", "kgit", "eval-candidate", "-"]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    by_hand = subprocess.run(f"tar -C {folder} -cf - . | {shlex.join(kgit)}", shell=True, capture_output=True,
                             env=env, text=True)
    doc = json.loads(by_hand.stdout)
    assert doc["status"] == "ok" and doc["candidate"] == candidate.answer(folder, candidate.read_manifest(folder))
    assert doc["worker"]["host"]
    # kgit's archive says it holds the input open: its end, right away here, stops the evaluation.
    held = subprocess.run(kgit, input=candidate.send_bytes(folder), capture_output=True, env=env)
    assert held.returncode == 1 and b"input closed" in held.stderr and not held.stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("kgit-")] == []


def test_command_placeholders_are_shell_quoted():
    line = backends.render("run {candidate} --out {result} {device}", candidate=Path("/tmp/a b"),
                           result="x;rm -rf y", device="")
    assert line == "run '/tmp/a b' --out 'x;rm -rf y' ''"


def test_eval_candidate_cli_prints_only_the_result_json(kernel_repo, tmp_path, run_kgit):
    folder = candidate.stage(kernel_repo, _config(), tmp_path / "cand")
    (folder / "kernel" / "kernel.py").write_text("import os\n\ndef custom_kernel(data):\n    return data[2]\n")
    result = run_kgit(tmp_path, "eval-candidate", str(folder))
    assert result.exit_code == 3
    doc = json.loads(result.stdout)
    assert doc["status"] == "rejected" and doc["schema"] == "kgit.result/1"


# -- Ray on a local cluster with fake GPUs ------------------------------------------------
@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A one-node cluster claiming two GPUs: Ray assigns them (and sets CUDA_VISIBLE_DEVICES) as on real ones.

    No skip when Ray is missing: the `ray` marker selects these tests, and CI installs the extra.
    """
    import ray

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(tmp_path_factory.mktemp("ray-home")))  # Ray keeps a token under ~/.ray
        ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
        yield ray
        ray.shutdown()


@pytest.mark.ray
@pytest.mark.slow
def test_ray_runs_one_task_per_gpu_and_returns_results_to_the_driver(ray_cluster, kernel_repo):
    repo = Repo(kernel_repo)
    sha = _commit_reference_that_prints_visibility(kernel_repo)
    evaluator = backends.get_evaluator(repo, _config(backend="ray"))
    assert evaluator.slots == 2
    with ThreadPoolExecutor(2) as threads:
        docs = list(threads.map(evaluator, [sha, sha]))
    assert [d["status"] for d in docs] == ["ok", "ok"], [d.get("error") for d in docs]
    pins = [d["worker"]["env"]["CUDA_VISIBLE_DEVICES"] for d in docs]
    assert sorted(pins) == ["0", "1"]  # two tasks at once hold the two fake GPUs
    for pin, doc in zip(pins, docs):
        assert f"visible={pin}" in doc["stdout"]  # and the harness child inherited the task's GPU


@pytest.mark.ray
def test_import_ray_moves_rocr_visibility_to_hip(ray_cluster, monkeypatch):
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert backends.import_ray() is ray_cluster
    assert "ROCR_VISIBLE_DEVICES" not in os.environ
    assert os.environ["HIP_VISIBLE_DEVICES"] == "0,1"


# -- real GPUs (run on the device machine: pytest -m gpu tests/test_backends.py) ----------------
@pytest.mark.gpu
def test_each_visible_gpu_gets_a_pinned_slot_and_measures_with_events(kernel_repo):
    host = gpus.discover()
    assert host.vendor in ("nvidia", "amd") and host.ids, "no GPU found by discovery"
    repo = Repo(kernel_repo)
    evaluator = backends.get_evaluator(repo, _config(devices="all"))
    assert evaluator.slots == len(host.ids)
    width = min(2, evaluator.slots)
    sha = _commit_reference_that_prints_visibility(kernel_repo)
    with ThreadPoolExecutor(width) as threads:
        docs = list(threads.map(evaluator, [sha] * width))
    assert all(d["status"] == "ok" and d["timing"] == "events" for d in docs), [d.get("error") for d in docs]
    assert len({d["worker"]["device"] for d in docs}) == width
    if host.vendor == "nvidia":
        for doc in docs:
            assert f"visible={doc['worker']['device']}" in doc["stdout"]


def test_a_gpu_is_held_across_kgit_processes(tmp_path):
    # Two Boards stand for two kgit processes: the lock file still keeps them apart.
    running, overlaps = [], []

    def evaluate(board):
        key = board.acquire([("local", "0", 0)])
        try:
            with gpus.host_slot(key):
                running.append(1)
                overlaps.append(len(running))
                time.sleep(0.2)
                running.pop()
        finally:
            board.release(key)

    workers = [threading.Thread(target=evaluate, args=(gpus.Board(),)) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert overlaps == [1, 1, 1]


def test_per_gpu_sets_the_slots_and_defaults_to_one(kernel_repo):
    host = gpus.Host("nvidia", ("0", "1"))
    assert backends.LocalEvaluator(Repo(kernel_repo), _config(), host=host).slots == 2
    config = _config()
    config.evaluator.per_gpu = 2
    assert backends.LocalEvaluator(Repo(kernel_repo), config, host=host).slots == 4
    with pytest.raises(KgitError, match="per_gpu"):
        config_mod.parse("evaluator:\n  per_gpu: 0\n", "test")
