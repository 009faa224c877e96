"""The lab control plane's certificates and kubeconfigs: a CA that signs every serving and
client certificate, the kubeconfig that embeds them, and the writer of files with a given mode.
Used by lab/controlplane.py; ``cryptography`` (a dependency of ansible-core), typed.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


class Authority:
    """The lab's CA: signs every serving and client certificate of one control plane."""

    def __init__(self, folder: Path, stem: str = "ca") -> None:
        self.folder = folder
        self.key = new_key()
        now = dt.datetime.now(dt.UTC)
        self.name = _name(f"sparkrack-lab-{stem}")
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )  # fmt: skip
            .sign(self.key, hashes.SHA256())
        )
        self.cert_path = folder / f"{stem}.crt"
        self.key_path = folder / f"{stem}.key"
        write_file(self.cert_path, self.cert.public_bytes(serialization.Encoding.PEM))
        write_file(self.key_path, pem_key(self.key), 0o600)

    def issue(
        self,
        stem: str,
        cn: str,
        *,
        org: str | None = None,
        server: bool = False,
        client: bool = False,
        dns: Iterable[str] = (),
        ips: Iterable[str] = (),
    ) -> Issued:
        key = new_key()
        now = dt.datetime.now(dt.UTC)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, org))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        issued = Issued(self.folder / f"{stem}.crt", self.folder / f"{stem}.key")
        write_file(issued.cert, cert.public_bytes(serialization.Encoding.PEM))
        write_file(issued.key, pem_key(key), 0o600)
        return issued


def write_file(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(raw)
    os.chmod(path, mode)


def kubeconfig(server: str, ca: Path, client: Issued, name: str = "sparkrack-lab") -> str:
    """A kubeconfig with the CA and the client certificate embedded (one self-contained file)."""

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    data = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority-data": b64(ca)}}
        ],
        "users": [
            {
                "name": name,
                "user": {
                    "client-certificate-data": b64(client.cert),
                    "client-key-data": b64(client.key),
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    return json.dumps(data, indent=2) + "\n"
