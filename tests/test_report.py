"""kgit report: the HTML file rendered in headless Chromium (DOM and screenshot), the
markdown and JSON forms, and the report of a repository that has only its baseline."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import review_archive as ra
from matplotlib import image as mpimg

from kgit.archive.repo import Repo
from kgit.review import campaign as review
from kgit.review import html as report_html
from kgit_harness import problem as problem_mod

SECTIONS = ["summary", "progress", "lineage", "shapes", "references", "hypotheses"]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


def chromium(tmp_path, *args) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("the report tests need Chromium: `apt-get install -y chromium` (.ci/run installs it)")
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.iterdir()))}"
    profile.mkdir()
    # The timeout only stops a hung browser from stalling the suite; no test measures time.
    return subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def built(vector_add_template, tmp_path_factory):
    root = tmp_path_factory.mktemp("report") / "repo"
    shas = ra.copy_built(vector_add_template, root)
    # A vendor-library line on the H200 the fabricated campaign ran on; kgit reads task.yml from the work tree.
    task_yml = root / "problem" / "task.yml"
    task_yml.write_text(task_yml.read_text() + "references: {NVIDIA H200: {vendor library: 30.0}}\n")
    return root, shas


@pytest.fixture(scope="module")
def html_report(built, tmp_path_factory):
    root, _ = built
    repo = Repo(root)
    task = problem_mod.load_task(root / "problem")
    return report_html.write(repo, task, tmp_path_factory.mktemp("out") / "report.html")


def test_dom_has_every_section_with_its_content(html_report, tmp_path):
    done = chromium(tmp_path, "--dump-dom", html_report.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    for section in SECTIONS:
        assert f'<section id="{section}">' in dom, section
    # Three figures (progress, lineage, per-shape), all inline PNG.
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', dom)) == 3
    hypotheses = dom[dom.index('<section id="hypotheses">'):]
    for text in ("use BLOCK_SIZE 2048 for wider tiles", "vectorize loads with 4 elements per thread",
                 "persistent kernel with grid stride loop", "failed (timeout)", "not-faster", "openai/gpt-5"):
        assert text in hypotheses, text
    summary = dom[dom.index('<section id="summary">'):dom.index('<section id="progress">')]
    assert "1.60x" in summary and "50%" in summary and "$0.10" in summary
    refs = dom[dom.index('<section id="references">'):dom.index('<section id="hypotheses">')]
    assert "vendor library" in refs and "1.67x" in refs  # 50 us best over a 30 us reference
    assert "baseline → #1 → #2" in dom


def test_report_is_self_contained(html_report):
    text = html_report.read_text()
    sources = re.findall(r'(?:src|href)="([^"]*)"', text)
    assert sources and all(s.startswith("data:") for s in sources)
    assert "<script" not in text
    assert "default-src 'none'" in text


@pytest.mark.slow
def test_screenshot_shows_a_rendered_page(html_report, tmp_path):
    shot = tmp_path / "report.png"
    done = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,2600", html_report.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    pixels = mpimg.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2600, 1200)
    # A blank or failed page is one flat colour; the plots and tables give many distinct ones.
    assert pixels.std() > 0.05
    not_white = (pixels < 0.95).any(axis=-1).mean()
    assert 0.02 < not_white < 0.9
    assert len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 200
    # The status colours of the plots made it into the picture (green: improved).
    green = (pixels[..., 1] > 0.4) & (pixels[..., 0] < 0.3) & (pixels[..., 2] < 0.3)
    assert green.sum() > 500


def test_report_command_writes_outside_the_work_tree_by_default(built, run_kgit):
    root, _ = built
    before = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    result = run_kgit(root, "report")
    assert result.exit_code == 0, result.output
    assert (root / ".git" / "kgit" / "report.html").exists()
    after = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    assert after == before


def test_report_markdown_for_an_issue(built, run_kgit):
    root, shas = built
    result = run_kgit(root, "report", "--markdown")
    assert result.exit_code == 0, result.output
    out = result.output
    for heading in ("# kgit report: vector_add", "## Best path", "## Per-shape speedup", "## Reference lines",
                    "## Hypotheses"):
        assert heading in out
    assert "4 experiments, 6 attempts, 3 correct (50%)" in out
    assert "| size=65536 |" in out and "1.60x" in out
    assert "failed (timeout)" in out
    best_path = out[out.index("## Best path"):out.index("## Per-shape")]
    assert [shas[k][:10] in best_path for k in ("baseline", "e1.2", "e2.2", "e4.1")] == [True, True, True, False]
    # The baseline row shows its H200 figure (80 us), not the CPU interpreter's.
    row = next(line for line in best_path.splitlines() if shas["baseline"][:10] in line)
    assert float(row.split("|")[3]) == pytest.approx(80.0)


def test_report_json(built, run_kgit):
    root, shas = built
    doc = json.loads(run_kgit(root, "report", "--json").output)
    assert doc["best_sha"] == shas["e2.2"]
    assert doc["best_path"] == [shas["baseline"], shas["e1.2"], shas["e2.2"]]
    assert doc["references_us"] == {"vendor library": 30.0}
    assert [e["status"] for e in doc["experiments"]] == ["improved", "improved", "timeout", "not-faster"]


def test_report_of_a_fresh_repository(kernel_repo, tmp_path):
    repo = Repo(kernel_repo)
    task = problem_mod.load_task(kernel_repo / "problem")
    campaign = review.load(repo, task)
    assert campaign.experiments == {} and campaign.best.is_baseline
    html = report_html.render(campaign, "fresh")
    assert "No experiments yet." in html
    assert "Triton&#x27;s interpreter on the CPU" in html  # kernel_repo was measured without a GPU
    # The lineage tree only: without a speed figure there is no progress curve and no per-shape bars.
    assert html.count("data:image/png;base64,") == 1 and "What a GPU would add" in html


# -- real GPU (run on the device machine: pytest -m gpu tests/test_report.py) -------------------
@pytest.mark.gpu
def test_report_of_a_real_gpu_campaign(kernel_repo, run_kgit, tmp_path):
    """A short offline evolve measured on the GPU, then the report: the device's datasheet
    gives a speed-of-light line, and no honest kernel is below it. KGIT_REPORT_OUT=DIR
    keeps the report (HTML and markdown) for a person to look at."""
    result = run_kgit(kernel_repo, "evolve", "-n", "1")
    assert result.exit_code == 0, result.output
    repo = Repo(kernel_repo)
    task = problem_mod.load_task(kernel_repo / "problem")
    campaign = review.load(repo, task)
    assert campaign.best.timing == "events" and campaign.experiments
    sol = campaign.references.get("speed of light")
    assert sol is not None, f"no datasheet entry for {campaign.device}"
    assert campaign.best.geomean_us > 0.5 * sol  # the harness's own guard margin
    keep = Path(os.environ.get("KGIT_REPORT_OUT") or tmp_path)
    keep.mkdir(parents=True, exist_ok=True)
    html = report_html.write(repo, task, keep / "gpu-report.html")
    (keep / "gpu-report.md").write_text(review.markdown(campaign, task.name))
    # The GPU host may have no browser (or network to install one): the DOM and screenshot
    # checks run on the CPU tests above; here the file's content is checked directly.
    text = html.read_text()
    assert all(f'<section id="{s}">' in text for s in SECTIONS)
    assert "speed of light" in text and campaign.device in text


def test_report_open_without_a_display_prints_the_path_and_runs_nothing(built, run_kgit, monkeypatch):
    import sys
    import webbrowser

    root, _ = built
    if not sys.platform.startswith("linux"):
        pytest.skip("the no-display rule is Linux's")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    opened = []
    monkeypatch.setattr(webbrowser, "open", lambda *a, **k: opened.append(a) or True)
    result = run_kgit(root, "report", "--open")
    assert result.exit_code == 0, result.output
    path = str(root / ".git" / "kgit" / "report.html")
    assert f"wrote {path}" in result.output and "no browser to open it here" in result.output
    assert opened == []

    monkeypatch.setenv("DISPLAY", ":0")
    result = run_kgit(root, "report", "--open")
    assert result.exit_code == 0 and "no browser" not in result.output
    assert opened and opened[0][0].startswith("file://") and opened[0][0].endswith("report.html")
