"""Keys and certificates of a Flower deployment, made with `cryptography` (no hand-rolled primitive):

- a SuperNode's authentication key: ECDSA P-384 (Flower accepts NIST curves only), OpenSSH format; the public
  half is registered at the SuperLink (`flwr supernode register`), the private half never leaves the party;
- a test CA and a TLS certificate for the SuperLink (`vertisynth flower tls`), for trials and loopback tests:
  production uses the organisation's own PKI, and the parties hold only the CA certificate.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from vertisynth.core.errors import ConfigError


def _private(path: Path, data: bytes) -> Path:
    if path.exists():
        raise ConfigError(f"{str(path)!r} exists; refusing to overwrite a key")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def node_key(folder: Path, name: str) -> tuple[Path, Path]:
    """`<name>_node_key` (private, 0600) and `<name>_node_key.pub` (OpenSSH, to register at the SuperLink)."""
    key = ec.generate_private_key(ec.SECP384R1())
    private = _private(folder / f"{name}_node_key", key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()))
    public = folder / f"{name}_node_key.pub"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                     serialization.PublicFormat.OpenSSH) + b"\n")
    return private, public


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def trial_tls(folder: Path, hosts: list[str], days: int = 30) -> dict[str, Path]:
    """A CA (`ca.crt`, `ca.key`) and the SuperLink's certificate for `hosts` (`superlink.crt`, `superlink.key`)."""
    if not hosts:
        raise ConfigError("give the SuperLink's host names or IP addresses (--host), as the parties will dial it")
    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days))
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca = (x509.CertificateBuilder().subject_name(_name("vertisynth test CA")).issuer_name(_name("vertisynth test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(valid[0]).not_valid_after(valid[1])
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA384()))
    sans = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    key = ec.generate_private_key(ec.SECP384R1())
    cert = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(valid[0]).not_valid_after(valid[1])
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA384()))
    pem = serialization.Encoding.PEM
    pkcs8 = (pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    out = {"ca.crt": folder / "ca.crt", "ca.key": folder / "ca.key",
           "superlink.crt": folder / "superlink.crt", "superlink.key": folder / "superlink.key"}
    _private(out["ca.key"], ca_key.private_bytes(*pkcs8))
    _private(out["superlink.key"], key.private_bytes(*pkcs8))
    out["ca.crt"].write_bytes(ca.public_bytes(pem))
    out["superlink.crt"].write_bytes(cert.public_bytes(pem))
    return out
