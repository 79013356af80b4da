# Sourced by scripts/*.sh: make .venv with kgit installed (editable) and its test tools.
# Torch is taken as it is when present; otherwise the CPU build (2.13.0) is installed,
# which needs no GPU and no multi-GB CUDA download. Each step says what it does first:
# a first install takes minutes, and silence looks like a hang.
VENV="${KGIT_VENV:-$PWD/.venv}"
_step() { echo "==> $*" >&2; }
if [ ! -x "$VENV/bin/python" ]; then
    _step "making the virtual environment $VENV"
    python3 -m venv "$VENV"
fi
# The Ray extra too: tests marked `ray` run a local cluster and must not skip; and the
# checkers scripts/test.sh runs first (ruff, mypy).
if ! "$VENV/bin/python" -c "import kgit, pytest, hypothesis, xdist, ray, mypy" 2>/dev/null \
        || ! [ -x "$VENV/bin/ruff" ]; then
    # The venv's own pip is new enough (editable installs need 21.3; Python 3.11 ships 23.2):
    # upgrading it anyway cost every fresh CI clone a download and a reinstall.
    if ! "$VENV/bin/python" -c "import sys, pip; sys.exit(int(pip.__version__.split('.')[0]) < 22)"; then
        _step "upgrading pip (this one predates editable installs from pyproject.toml)"
        "$VENV/bin/python" -m pip install -q --upgrade pip
    fi
    if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
        _step "installing torch 2.13.0 (the longest step: a large download)"
        "$VENV/bin/python" -m pip install --progress-bar on --no-compile "torch==2.13.0"
    fi
    _step "installing kgit (editable) with triton, litellm, ray, pytest, ruff, mypy and the rest"
    "$VENV/bin/python" -m pip install --progress-bar on --no-compile -e ".[test,ray]"
    # pip compiles the ~17,000 installed .py files one at a time; compileall does it on every
    # core. The .pyc files matter: the harness runs `python -I -B`, which never writes them,
    # so a module nobody compiled is compiled again in every evaluation. A file that does not
    # compile (a template, another Python's syntax) is skipped, as pip skips it.
    _step "compiling the installed modules"
    "$VENV/bin/python" -m compileall -qq -j 0 "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
    _step "installed: $VENV/bin/kgit (run \`source $VENV/bin/activate\` to call it as \`kgit\`)"
fi
