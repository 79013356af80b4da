"""Only one build step needs code: the wheel carries the top-level `prompts/` and
`.kgit.yaml` inside the kgit package (kgit/shipped.py finds them there)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithShippedFiles(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "kgit" / "_shipped"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(HERE / "prompts", target / "prompts")
        shutil.copy2(HERE / ".kgit.yaml", target / ".kgit.yaml")


setup(cmdclass={"build_py": BuildWithShippedFiles})
