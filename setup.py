"""Only one build step needs code: the wheel carries the top-level `prompts/` and
`.kgit.yaml` inside the kgit package (kgit/shipped.py finds them there)."""

import shutil
import warnings
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


# An editable install (scripts/venv.sh) ends with setuptools' "Editable installation"
# notice, a banner of asterisks that only says not to delete the checkout; it is
# information, not a problem, and it buries the line that says the install worked.
warnings.filterwarnings("ignore", message="Editable installation")
setup(cmdclass={"build_py": BuildWithShippedFiles})
