# Sourced by scripts/*.sh: make .venv with kgit installed (editable) and its test tools.
# Torch is taken as it is when present; otherwise the CPU build (2.13.0) is installed,
# which needs no GPU and no multi-GB CUDA download.
VENV="${KGIT_VENV:-$PWD/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
# The Ray extra too: tests marked `ray` run a local cluster and must not skip.
if ! "$VENV/bin/python" -c "import kgit, pytest, hypothesis, ray" 2>/dev/null; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
        "$VENV/bin/python" -m pip install -q "torch==2.13.0"
    fi
    "$VENV/bin/python" -m pip install -q -e ".[test,ray]"
fi
