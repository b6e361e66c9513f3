"""Certificates for `cluster up --tls` (PyPI `cryptography`): a cluster CA and one certificate per node naming
the node's id (DNS subjectAltName, what peers and clients check) and its address (IP subjectAltName).

    DATA_DIR/tls/ca.pem, ca.key       the cluster CA (its key stays here: `cluster add-node` signs with it)
    DATA_DIR/tls/<node>.pem, .key     a node's certificate and key (mode 0600)
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

TLS_DIR = "tls"
DAYS = 825  # the longest validity browsers accept for a server certificate


def _write(path: str, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_ca(directory: str, name: str = "quorumlog cluster CA") -> tuple[str, str]:
    """A new CA in `directory` (made if missing); returns (ca.pem, ca.key)."""
    os.makedirs(directory, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    ca_pem, ca_key = os.path.join(directory, "ca.pem"), os.path.join(directory, "ca.key")
    _write(ca_pem, cert.public_bytes(serialization.Encoding.PEM))
    _write(ca_key, _key_pem(key), private=True)
    return ca_pem, ca_key


def make_node_cert(directory: str, node_id: str, hosts: list[str], *, ca_pem: str | None = None,
                   ca_key: str | None = None, valid_days: float = DAYS, expired: bool = False) -> tuple[str, str]:
    """A certificate for node_id signed by the CA in `directory` (or the given one); returns (cert, key).
    `expired`: already past its validity (for tests of refusal)."""
    ca_pem = ca_pem or os.path.join(directory, "ca.pem")
    ca_key = ca_key or os.path.join(directory, "ca.key")
    with open(ca_pem, "rb") as f:
        ca = x509.load_pem_x509_certificate(f.read())
    with open(ca_key, "rb") as f:
        signer = serialization.load_pem_private_key(f.read(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(node_id), x509.DNSName("localhost")]
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    now = dt.datetime.now(dt.timezone.utc)
    start, end = (now - dt.timedelta(days=2), now - dt.timedelta(days=1)) if expired else \
        (now - dt.timedelta(minutes=5), now + dt.timedelta(days=valid_days))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_id)]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH,
                                                  x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(signer, hashes.SHA256()))
    os.makedirs(directory, exist_ok=True)
    cert_path, key_path = os.path.join(directory, f"{node_id}.pem"), os.path.join(directory, f"{node_id}.key")
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    _write(key_path, _key_pem(key), private=True)
    return cert_path, key_path


def node_tls_settings(directory: str, node_id: str) -> list[tuple[str, str]]:
    """The node's `--tls-*` settings for the certificate make_node_cert wrote."""
    return [("tls_cert", os.path.join(directory, f"{node_id}.pem")),
            ("tls_key", os.path.join(directory, f"{node_id}.key")), ("tls_ca", os.path.join(directory, "ca.pem"))]
