"""A throwaway MIT Kerberos realm for the GSSAPI tests: a KDC database, principals and keytabs
in a temporary directory, and `krb5kdc` on a free loopback port, ended by its PID.

Files: `krb5.conf` (realm PYBROKER.TEST, the KDC on 127.0.0.1:<port> over UDP and TCP, no DNS
canonicalisation or reverse lookups, so `kafka/127.0.0.1` stays the service principal of a
connection to 127.0.0.1), `kdc.conf` (database, stash and log under the directory). Processes see
the realm through the environment: KRB5_CONFIG (library and tools), KRB5_KDC_PROFILE (KDC and
kadmin.local); `env()` returns both, the tests export them for the broker and the clients.

`missing()` names what is not installed (Debian packages krb5-kdc, krb5-admin-server,
krb5-user), so a test can skip with the reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REALM = "PYBROKER.TEST"
_TOOLS = {"krb5kdc": "krb5-kdc", "kdb5_util": "krb5-kdc", "kadmin.local": "krb5-admin-server", "kinit": "krb5-user"}
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path=os.pathsep.join(_SBIN))


def missing() -> list[str]:
    """Debian packages to install for a realm (empty when all tools are there)."""
    return sorted({pkg for tool, pkg in _TOOLS.items() if _which(tool) is None})


def _free_port() -> int:
    """A port free on both TCP and UDP (the KDC listens on both)."""
    for _ in range(50):
        with socket.socket() as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return int(port)
    raise RuntimeError("no free port for the KDC")


class MitKdc:
    def __init__(self, directory: Path, realm: str = REALM) -> None:
        self.dir = directory
        self.realm = realm
        self.port = _free_port()
        self.krb5_conf = directory / "krb5.conf"
        self.kdc_conf = directory / "kdc.conf"
        self.proc: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)
        self._write_conf()
        (directory / "kadm5.acl").write_text("")

    def _write_conf(self) -> None:
        realm, directory = self.realm, self.dir
        self.krb5_conf.write_text(
            "[libdefaults]\n"
            f" default_realm = {realm}\n"
            " dns_lookup_kdc = false\n dns_lookup_realm = false\n"
            " dns_canonicalize_hostname = false\n rdns = false\n"
            " udp_preference_limit = 1\n"  # TCP: no UDP retransmission timing on a busy machine
            " forwardable = false\n ticket_lifetime = 1h\n"
            f"[realms]\n {realm} = {{\n  kdc = 127.0.0.1:{self.port}\n }}\n"
            f"[domain_realm]\n 127.0.0.1 = {realm}\n localhost = {realm}\n")
        self.kdc_conf.write_text(
            f"[kdcdefaults]\n kdc_listen = 127.0.0.1:{self.port}\n kdc_tcp_listen = 127.0.0.1:{self.port}\n"
            f"[realms]\n {realm} = {{\n"
            f"  database_name = {directory / 'principal'}\n"
            f"  key_stash_file = {directory / 'stash'}\n"
            f"  acl_file = {directory / 'kadm5.acl'}\n"
            "  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n"
            " }\n"
            f"[logging]\n kdc = FILE:{directory / 'kdc.log'}\n")

    def env(self) -> dict[str, str]:
        return {"KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.kdc_conf)}

    def _run(self, *args: str, stdin: str | None = None) -> str:
        proc = subprocess.run(list(args), input=stdin, capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, **self.env()))
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}: {proc.stderr or proc.stdout}")
        return proc.stdout

    def start(self) -> MitKdc:
        self._run(str(_which("kdb5_util")), "create", "-s", "-r", self.realm, "-P", "master-secret", "-W")
        for attempt in range(3):  # another process may take the free port before krb5kdc binds it
            try:
                return self._start_kdc()
            except RuntimeError:
                if attempt == 2:
                    raise
                self.port = _free_port()
                self._write_conf()
        raise AssertionError("unreachable")

    def _start_kdc(self) -> MitKdc:
        log = open(self.dir / "krb5kdc.out", "wb")  # noqa: SIM115 - the KDC's lifetime
        self.proc = subprocess.Popen([str(_which("krb5kdc")), "-n", "-r", self.realm], stdout=log, stderr=log,
                                     env=dict(os.environ, **self.env()), start_new_session=True)
        deadline = time.monotonic() + 30
        while True:  # ready once it accepts TCP
            if self.proc.poll() is not None:
                raise RuntimeError(f"krb5kdc exited {self.proc.returncode}: "
                                   f"{(self.dir / 'krb5kdc.out').read_text(errors='replace')}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("krb5kdc did not start listening") from None
                time.sleep(0.05)

    def add_principal(self, name: str, keytab: Path | None = None, password: str | None = None) -> Path | None:
        """A principal with a random key written to `keytab`, or with `password`."""
        if password is not None:
            self._run(str(_which("kadmin.local")), "-q", f"addprinc -pw {password} {name}")
        else:
            self._run(str(_which("kadmin.local")), "-q", f"addprinc -randkey {name}")
        if keytab is not None:
            self._run(str(_which("kadmin.local")), "-q", f"ktadd -k {keytab} {name}")
        return keytab

    def kinit(self, principal: str, keytab: Path, ccache: Path) -> None:
        """Tickets for `principal` from its keytab into the credential cache file `ccache`."""
        self._run(str(_which("kinit")), "-k", "-t", str(keytab), "-c", f"FILE:{ccache}", principal)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
