#!/bin/sh
# mi300-eval.sh DEVICE: evaluate the candidate kgit sends on stdin on GPU DEVICE of the
# MI300 box, over one ssh connection (docs/evaluators.md, "Worked example").
#
# kgit writes the candidate folder on this script's stdin as a tar archive and then holds
# stdin open while it waits. ssh carries both to `kgit eval-candidate -` on the box, which
# unpacks the archive into a folder of its own, evaluates it, removes it, and prints the
# result. When kgit stops waiting (evaluator.timeout_s) or dies, even by kill -9, stdin
# closes, ssh passes that on, and the evaluation on the box stops with its processes.
#
# Settings, from the environment (name them in evaluator.pass_env to change them):
#   KGIT_REMOTE       the box for ssh (default: mi300, a Host entry of ~/.ssh/config)
#   KGIT_REMOTE_KGIT  kgit on the box (default: ~/kgit-venv/bin/kgit)
#   KGIT_SSH          the ssh command (default: ssh)
set -eu
remote=${KGIT_REMOTE:-mi300}
kgit=${KGIT_REMOTE_KGIT:-'~/kgit-venv/bin/kgit'}
exec ${KGIT_SSH:-ssh} -T -o BatchMode=yes "$remote" \
  "${1:+HIP_VISIBLE_DEVICES=$1 }exec $kgit eval-candidate -"
