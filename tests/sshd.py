"""A throwaway OpenSSH server on 127.0.0.1, standing in for a remote GPU box.

Used by tests/test_ssh_evaluator.py and benchmarks/ssh_overhead.py. It runs as the
current user from a folder of its own: a host key, a client key allowed in its own
authorized_keys, its own sshd_config (keys only, no PAM, `StrictModes no`: the folder
sits under /tmp), and a client config whose `Host` entry (`name`, "mi300" as in the
docs' worked example) reaches it, so `ssh -F CONFIG mi300` is what `ssh mi300` is on a
real setup. Needs the OpenSSH server (`apt-get install openssh-server`; .ci/run installs it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


class Sshd:
    def __init__(self, folder: Path, name: str = "mi300"):
        self.folder, self.name = Path(folder), name
        self.proc: subprocess.Popen | None = None
        self.client_config = self.folder / "ssh_config"

    @property
    def ssh(self) -> str:
        """The ssh command line that reaches the box as `name` (KGIT_SSH of the worked example)."""
        return f"ssh -F {self.client_config}"

    def start(self) -> Sshd:
        binary = shutil.which("sshd") or "/usr/sbin/sshd"
        if not Path(binary).exists():
            raise RuntimeError("no sshd here: install the OpenSSH server (`apt-get install openssh-server`, as "
                               ".ci/run does) to run the ssh evaluator's tests and benchmark.")
        if os.geteuid() == 0:
            # Run as root, sshd insists on its privilege-separation folder (the package's
            # service unit would make it).
            Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        for key in ("host_key", "client_key"):
            if not (self.folder / key).exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.folder / key)],
                               check=True)
        shutil.copy(self.folder / "client_key.pub", self.folder / "authorized_keys")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        (self.folder / "sshd_config").write_text(
            f"ListenAddress 127.0.0.1\nPort {self.port}\nHostKey {self.folder / 'host_key'}\n"
            f"AuthorizedKeysFile {self.folder / 'authorized_keys'}\nPidFile {self.folder / 'sshd.pid'}\n"
            "StrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\nLogLevel ERROR\n")
        self.client_config.write_text(
            f"Host {self.name}\n  HostName 127.0.0.1\n  Port {self.port}\n  User {_user()}\n"
            f"  IdentityFile {self.folder / 'client_key'}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.folder / 'known_hosts'}\n  StrictHostKeyChecking accept-new\n"
            "  BatchMode yes\n")
        self.proc = subprocess.Popen([binary, "-D", "-f", str(self.folder / "sshd_config"),
                                      "-E", str(self.folder / "sshd.log")], stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited ({self.proc.returncode}): {self.log()}")
            done = subprocess.run([*self.ssh.split(), self.name, "true"], capture_output=True, text=True)
            if done.returncode == 0:
                return self
            time.sleep(0.2)
        raise RuntimeError(f"sshd on port {self.port} did not accept a login in 30 s: {done.stderr} {self.log()}")

    def log(self) -> str:
        path = self.folder / "sshd.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name
