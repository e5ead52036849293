"""Test certificates: a CA and one server certificate signed by it, as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any


def ca_and_server(folder: Path, names: list[str], addresses: list[str], *, hours: float = 3) -> dict[str, Path]:
    """``ca.pem``, ``cert.pem`` and ``key.pem`` in ``folder``: a CA, and a server certificate it signed
    for the DNS ``names`` and IP ``addresses``, valid for ``hours``; the key file mode 0600."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject: str, key: Any, issuer_key: Any, issuer: Any, *, ca: bool) -> Any:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=hours))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            sans = [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("otel-verl test CA", ca_key, ca_key, None, ca=True)
    server = cert("otel-verl test server", key, ca_key, ca.subject, ca=False)
    paths = {name: folder / f"{name}.pem" for name in ("ca", "cert", "key")}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    paths["key"].chmod(0o600)
    return paths
