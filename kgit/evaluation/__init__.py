"""Evaluation: running the harness on a candidate (local GPUs, Ray, a remote command),
the sandbox around it, candidate staging and GPU discovery."""
