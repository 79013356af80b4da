"""Shared helpers of the tiny GPU MODE-style problems (a stand-in for their problems/*/utils.py)."""

import torch


def pick_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def make_checker(reference, rtol, atol):
    def check(data, output):
        expected = reference(tuple(t.clone() for t in data))
        if output.shape != expected.shape:
            return False, f"shape {tuple(output.shape)}, expected {tuple(expected.shape)}"
        bad = ~torch.isclose(output, expected, rtol=rtol, atol=atol)
        if bool(bad.any()):
            return False, f"{int(bad.sum())} mismatched elements"
        return True, ""

    return check
