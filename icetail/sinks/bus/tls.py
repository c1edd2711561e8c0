"""TLS for the bus sinks, the same three URL parameters for each: `ca=PATH` (PEM CA certificates
that signed the server's certificate; default: the system's trust store), `cert=PATH` and
`cert_key=PATH` (a client certificate and its key, for a server that asks for one; both or neither).
They are taken only by a TLS scheme (`tls://`, `rediss-stream://`, `rabbitmq-stream+tls://`), are
not part of a sink's identity (where the changes go), and a handshake that fails is one line
naming the parameter to fix. Parsing imports nothing and reads no file."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from icetail.kernel.errors import ConfigError, SinkSetupError, error_text

PARAMETERS = ("ca", "cert", "cert_key")  # key= is the sinks' key columns

Refusal = Callable[[str], ConfigError]


@dataclass(frozen=True)
class Tls:
    """The files of a TLS connection (None: the system's CAs; no client certificate)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def context(self) -> ssl.SSLContext:
        """A client context checking the server's certificate and name; ConfigError naming the parameter
        whose file cannot be used."""
        context = ssl.create_default_context()  # CERT_REQUIRED, check_hostname, TLS 1.2 or later
        if self.ca is not None:
            try:
                context.load_verify_locations(cafile=self.ca)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"ca={self.ca}: not a readable file of PEM certificates ({error_text(exc)}): "
                    "fix ca= in the sink URL"
                ) from None
        if self.cert is not None:
            try:
                context.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"cert={self.cert} cert_key={self.key}: not a readable PEM certificate and its key "
                    f"({error_text(exc)}): fix cert= and cert_key= in the sink URL"
                ) from None
        return context


def tls_options(given: Mapping[str, str], *, tls: bool, tls_scheme: str, bad: Refusal) -> Tls | None:
    """The TLS parameters of a URL (`given`: its parameters); None for a plain scheme, which takes none."""
    named = [name for name in PARAMETERS if name in given]
    if not tls:
        if named:
            raise bad(f"{named[0]}= is for TLS: use {tls_scheme}://")
        return None
    for name in named:
        if not given[name] or given[name] != given[name].strip():
            raise bad(f"{name}={given[name]!r} must name a file")
    if ("cert" in given) != ("cert_key" in given):
        raise bad("cert= and cert_key= go together (a client certificate and its private key; key= names key columns)")
    return Tls(given.get("ca"), given.get("cert"), given.get("cert_key"))


def handshake_refusal(server: str, exc: BaseException, plain: str | None = None) -> SinkSetupError | None:
    """A failed TLS handshake with `server` (`NATS server HOST:PORT`) as one line naming the fix, or None
    when `exc` (or what it wraps) is no TLS error. `plain`: the TLS scheme, when the URL's is the plain
    one (a NATS server that requires TLS upgrades a nats:// connection)."""
    failure = _ssl_error(exc)
    if failure is None:
        return None
    text = error_text(failure)
    if isinstance(failure, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
        if "hostname" in text.lower() or "IP address mismatch" in text:
            fix = "connect by a name (or address) the certificate is for"
        elif plain is not None:
            fix = f"use {plain}://... and give the CA that signed it as ca=/path/to/ca.pem in the sink URL"
        else:
            fix = "give the CA that signed it as ca=/path/to/ca.pem in the sink URL"
        return SinkSetupError(f"{server}: its TLS certificate is not trusted ({text}): {fix}")
    return SinkSetupError(
        f"{server}: the TLS handshake failed ({text}): check that the port speaks TLS, and cert= and cert_key= "
        "(a client certificate the server accepts) in the sink URL"
    )


def _ssl_error(exc: BaseException | None) -> BaseException | None:
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, ssl.SSLError) or "[SSL" in str(exc):  # redis-py words it into its ConnectionError
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None
