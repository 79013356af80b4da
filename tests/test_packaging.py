"""A plain, non-editable install carries everything kgit reads at run time."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
import kgit
from pathlib import Path
assert Path(kgit.__file__).is_relative_to(sys.argv[1]), kgit.__file__
from kgit import config
from kgit_harness import problem
from kgit.scientist import prompts
shipped = problem.shipped()
assert set(shipped) >= {"vector_add", "softmax", "fp8_blockscale_gemm"}, shipped
for name, path in shipped.items():
    task = problem.load_task(path)
    assert (path / "reference.py").exists() and (path / task.files[0]).exists(), name
assert config.parse(config.default_text()) == config.Config()
docs = prompts.knowledge(config.Config().evolve.knowledge, Path(sys.argv[2]))
assert len(docs) > 1000, len(docs)
print("ok", len(shipped))
"""


def test_wheel_holds_problems_prompts_and_default_config(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(ROOT), "-w", str(tmp_path / "wheel")], check=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "wheel").glob("kgit-*.whl")
    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(target)
    assert "kgit/_shipped/.kgit.yaml" in names and "kgit/_shipped/prompts/write.md" in names
    assert "kgit_harness/problems/softmax/task.yml" in names
    # Every template and knowledge document of the checkout ships, whatever its name.
    for doc in (ROOT / "prompts").rglob("*.md"):
        assert f"kgit/_shipped/{doc.relative_to(ROOT).as_posix()}" in names, doc
    # Run from an empty folder with the source tree out of reach: only the wheel's files count.
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    out = subprocess.run([sys.executable, "-I", "-c", CHECK, str(target), str(empty)], cwd=empty,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok")
