"""Real TLS servers for the bus sinks' TLS tests: a CA made at test time (the `cryptography`
package), a server certificate for 127.0.0.1 and a client certificate it signed, and a
`nats-server` (JetStream on, a store of its own) or a `redis-server` (`--port 0 --tls-port`)
listening with them on a free port and asking for the client's certificate. `skip_reason` says
why a server cannot be started here (its binary missing); a server that exits at start (a build
without TLS) raises ServerNotStarted, which the tests turn into a skip saying why."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.serve import free_port


@dataclass(frozen=True)
class Pki:
    """PEM files: the CA, the server's certificate and key, a client's certificate and key."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(folder: Path, name: str = "icetail-test") -> Pki:
    """A CA of its own and the certificates it signed, written under `folder`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def key_file(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
        pem = serialization.Encoding.PEM
        path.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        return path

    def cert_file(cert: x509.Certificate, path: Path) -> Path:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    Key = ec.EllipticCurvePrivateKey

    def signed(
        subject: str, key: Key, issuer: x509.Name | None, signer: Key, extensions: list[tuple[x509.ExtensionType, bool]]
    ) -> x509.Certificate:
        who = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(who)
            .issuer_name(issuer or who)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical)
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = signed(f"{name} CA", ca_key, None, ca_key, [(x509.BasicConstraints(ca=True, path_length=None), True)])
    leaf = x509.BasicConstraints(ca=False, path_length=None)
    server_key = ec.generate_private_key(ec.SECP256R1())
    names = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    serving = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    server = signed("127.0.0.1", server_key, ca.subject, ca_key, [(leaf, True), (names, False), (serving, False)])
    client_key = ec.generate_private_key(ec.SECP256R1())
    calling = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    client = signed("icetail", client_key, ca.subject, ca_key, [(leaf, True), (calling, False)])
    return Pki(
        cert_file(ca, folder / "ca.pem"),
        cert_file(server, folder / "server.pem"),
        key_file(server_key, folder / "server.key"),
        cert_file(client, folder / "client.pem"),
        key_file(client_key, folder / "client.key"),
    )


def skip_reason(binary: str) -> str | None:
    """Why a TLS `binary` server cannot be started here, or None."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return "the cryptography package is not installed (it makes the test's CA)"
    path = shutil.which(binary)
    if path is None:
        return f"{binary} is not installed (apt-get install {binary.split('-')[0]}-server or put it on PATH)"
    return None


class ServerNotStarted(RuntimeError):
    """The server exited or did not listen: its command and the end of its log."""


class Server:
    """A server process started with TLS on 127.0.0.1:`port`, stopped by `stop` (its log kept for a failure)."""

    def __init__(self, cmd: list[str], port: int, log: Path) -> None:
        self.port = port
        self.log = log
        self._out = log.open("wb")
        self.process = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30  # a start-up on a loaded machine, not a timed assertion
        while True:
            if self.process.poll() is not None:
                raise ServerNotStarted(f"{cmd[0]} exited {self.process.returncode}: {log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise ServerNotStarted(f"{cmd[0]} did not listen on {port}: {log.read_text()[-2000:]}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._out.close()


def nats_tls_server(pki: Pki, folder: Path) -> Server:
    """nats-server with JetStream (its store under `folder`) and TLS only, client certificates required."""
    port = free_port()
    config = folder / "nats.conf"
    config.write_text(
        f'listen: "127.0.0.1:{port}"\n'
        f'jetstream {{ store_dir: "{folder / "js"}" }}\n'
        f'tls {{ cert_file: "{pki.server_cert}"\n key_file: "{pki.server_key}"\n'
        f' ca_file: "{pki.ca}"\n verify: true }}\n'
    )
    return Server([str(shutil.which("nats-server")), "-c", str(config)], port, folder / "nats.log")


def redis_tls_server(pki: Pki, folder: Path) -> Server:
    """redis-server on a TLS port only (`--port 0`), client certificates required, nothing saved."""
    port = free_port()
    cmd = [
        str(shutil.which("redis-server")), "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
        "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
        "--tls-ca-cert-file", str(pki.ca), "--tls-auth-clients", "yes",
        "--save", "", "--appendonly", "no", "--dir", str(folder),
    ]  # fmt: skip
    return Server(cmd, port, folder / "redis.log")
