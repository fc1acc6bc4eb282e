"""Ed25519 signatures on published versions: only the holder of the origin's private key can publish weights.

The origin signs each version's manifest (the JSON that names the step, its checkpoint digest, its base's digest and
the size and blake3 of every shard) with its private key; clients hold the matching public key and check the
signature before they fetch a body shard or apply anything. Since every byte a client applies is tied to the manifest
by blake3 (shards by their digests, rebuilt tensors and files by theirs), one signature per version covers the whole
payload, whoever served it: the origin, a SHARDCAST relay or an attacker in between.

The signed message is a fixed domain-separation prefix followed by the manifest JSON, so a signature made by this key
for anything else can never pass as a manifest signature. Keys are PEM files (PKCS#8 private, SubjectPublicKeyInfo
public), as `openssl genpkey -algorithm ed25519` writes them, or `composer-prime relay keygen`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict

from composer_prime.atomic import write_atomic

SIGNATURE_BYTES = 64
_DOMAIN = b"composer-prime relay manifest\x00"


class SignatureError(ValueError):
    """A manifest that is unsigned or whose signature does not verify against the trusted public key."""


def check_owner_only(path: Path, field: str) -> None:
    """Refuse a secret (a private key, a token) that group or others may read or write, as ssh does: ValueError
    naming `field`, the file, its mode and the fix. A missing file is left to the caller's own error."""
    try:
        mode = stat.S_IMODE(Path(path).stat().st_mode)
    except OSError:
        return
    if mode & 0o077:
        raise ValueError(
            f"{field} = '{path}' has mode {mode:04o}: group or others can read it, and it is a secret. Make it "
            f"readable by its owner only: chmod 600 '{path}'"
        )


def load_signing_key(path: Path, field: str) -> Ed25519PrivateKey:
    """The origin's private key; ValueError naming `field`, the path and the fix when it is not one, or when others
    can read it."""
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except OSError as err:
        raise ValueError(f"{field} = '{path}' cannot be read ({err.strerror}); {_KEYGEN_HINT}") from None
    except (ValueError, TypeError) as err:
        raise ValueError(f"{field} = '{path}' is not an unencrypted PEM private key ({err}); {_KEYGEN_HINT}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{field} = '{path}' holds a {type(key).__name__}, not an Ed25519 key; {_KEYGEN_HINT}")
    check_owner_only(path, field)
    return key


def load_verify_key(path: Path, field: str) -> Ed25519PublicKey:
    """The origin's public key, as a client trusts it; ValueError naming `field`, the path and the fix."""
    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except OSError as err:
        raise ValueError(f"{field} = '{path}' cannot be read ({err.strerror}); {_KEYGEN_HINT}") from None
    except (ValueError, TypeError) as err:
        raise ValueError(f"{field} = '{path}' is not a PEM public key ({err}); {_KEYGEN_HINT}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{field} = '{path}' holds a {type(key).__name__}, not an Ed25519 key; {_KEYGEN_HINT}")
    return key


_KEYGEN_HINT = "make a key pair with `composer-prime relay keygen --private-key-file F --public-key-file G`"


def sign(key: Ed25519PrivateKey, body: bytes) -> bytes:
    return key.sign(_DOMAIN + body)


def verify(key: Ed25519PublicKey, body: bytes, signature: bytes) -> None:
    """Raises SignatureError unless `signature` is the trusted key's signature of `body`."""
    try:
        key.verify(signature, _DOMAIN + body)
    except InvalidSignature:
        raise SignatureError(
            "manifest signature does not verify against verify_key_file: it was not published by the origin this "
            "client trusts (a forged or rewritten version, or the origin's key changed)"
        ) from None


class KeygenConfig(BaseModel):
    """`composer-prime relay keygen`: where the new key pair goes."""

    model_config = ConfigDict(extra="forbid")

    private_key_file: Path
    """The origin's `signing_key_file` (PEM, written readable by its owner only); never replaced if it exists."""
    public_key_file: Path
    """Every client's `verify_key_file` (PEM); never replaced if it exists."""


def write_key_pair(private_path: Path, public_path: Path) -> None:
    """A fresh key pair; the private key file is readable by its owner only. Existing files are never replaced."""
    for path in (private_path, public_path):
        if path.exists():
            raise FileExistsError(f"{path} exists; keygen never replaces a key (delete it first if you mean to)")
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    umask = os.umask(0o077)  # the private key's temp file is created owner-only before any byte is written
    try:
        write_atomic(private_path, private)
    finally:
        os.umask(umask)
    write_atomic(public_path, public)
