"""Dynamic password configs as ZooKeeper holds them: encrypted under ``password.encoder.secret``.

ZooKeeper-mode Kafka stores a dynamic broker config whose name ends with a password config's
(``ssl.keystore.password``, ``listener.name.x.sasl.jaas.config``, ...) encrypted, as one
``key:value,...`` line that carries everything needed to decrypt it but the secret: the key
factory (PBKDF2), the cipher (AES/CBC/PKCS5Padding by default, or AES/GCM/NoPadding), key length,
iterations, a 256-byte salt, the IV (and GCM tag length), the base64 ciphertext, and the
password's length as a check. KRaft keeps passwords in the clear in its records, so the copy
decrypts them and the dual-write encrypts them again, each time with a fresh salt and IV.
Without a secret, values pass unchanged (Kafka's no-op encoder).

The cipher comes from PyCA's ``cryptography`` (the standard library has no AES); it is imported
only when a secret is configured.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable
from typing import Protocol

from kraftsim.metadata.config_defs.broker import BROKER_CONFIGS, PASSWORD

# The dynamic broker configs of type PASSWORD: a name ending with one of them is encrypted.
PASSWORD_CONFIGS: frozenset[str] = frozenset(d.name for d in BROKER_CONFIGS.values()
                                             if d.type == PASSWORD and d.dynamic)

KEY_FACTORIES = {"PBKDF2WithHmacSHA512": "sha512", "PBKDF2WithHmacSHA1": "sha1",
                 "PBKDF2WithHmacSHA256": "sha256"}


class PasswordError(ValueError):
    """An encrypted password that cannot be decrypted: a wrong secret, or a damaged value."""


def is_password_config(name: str) -> bool:
    return any(name.endswith(p) for p in PASSWORD_CONFIGS)


class PasswordCodec(Protocol):
    def encode(self, password: str) -> str: ...

    def decode(self, encoded: str) -> str: ...


class NoOpCodec:
    """No ``password.encoder.secret``: passwords are stored as they are."""

    def encode(self, password: str) -> str:
        return password

    def decode(self, encoded: str) -> str:
        return encoded


def _java_length(s: str) -> int:
    """String.length(): UTF-16 code units."""
    return len(s.encode("utf-16-le")) // 2


class EncryptingCodec:
    """Kafka's EncryptingPasswordEncoder, with the settings of ``password.encoder.*``."""

    def __init__(self, secret: str, key_factory: str | None = None, cipher: str = "AES/CBC/PKCS5Padding",
                 key_length: int = 128, iterations: int = 4096) -> None:
        try:
            import cryptography  # noqa: F401
        except ImportError as e:
            raise PasswordError("password.encoder.secret is set: decrypting and encrypting ZooKeeper's passwords "
                                "needs the cryptography package (pip install 'kraftsim[zk]')") from e
        self.secret = secret
        self.key_factory = key_factory or "PBKDF2WithHmacSHA512"
        self.cipher = cipher
        self.key_length = key_length
        self.iterations = iterations
        if self.key_factory not in KEY_FACTORIES:
            raise PasswordError(f"unsupported password.encoder.keyfactory.algorithm {self.key_factory}")
        if cipher not in ("AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"):
            raise PasswordError(f"unsupported password.encoder.cipher.algorithm {cipher}")

    def _key(self, key_factory: str, salt: bytes, iterations: int, key_length: int) -> bytes:
        digest = KEY_FACTORIES.get(key_factory)
        if digest is None:
            raise PasswordError(f"unsupported key factory {key_factory}")
        # Java's PBKDF2 takes the secret's chars as UTF-8.
        return hashlib.pbkdf2_hmac(digest, self.secret.encode(), salt, iterations, key_length // 8)

    def encode(self, password: str) -> str:
        from cryptography.hazmat.primitives import padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        salt = os.urandom(256)
        key = self._key(self.key_factory, salt, self.iterations, self.key_length)
        plain = password.encode()
        fields = {"keyFactoryAlgorithm": self.key_factory, "cipherAlgorithm": self.cipher,
                  "keyLength": str(self.key_length), "salt": _b64(salt), "iterations": str(self.iterations)}
        if self.cipher.startswith("AES/GCM/"):
            iv = os.urandom(12)
            sealed = AESGCM(key).encrypt(iv, plain, None)
            params = {"authenticationTagLength": "128", "initializationVector": _b64(iv)}
        else:
            iv = os.urandom(16)
            padder = padding.PKCS7(128).padder()
            enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
            sealed = enc.update(padder.update(plain) + padder.finalize()) + enc.finalize()
            params = {"initializationVector": _b64(iv)}
        fields |= {"encryptedPassword": _b64(sealed), "passwordLength": str(_java_length(password)), **params}
        return ",".join(f"{k}:{v}" for k, v in fields.items())

    def decode(self, encoded: str) -> str:
        from cryptography.hazmat.primitives import padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            params = dict(part.split(":", 1) for part in encoded.split(","))
            cipher = params["cipherAlgorithm"]
            key = self._key(params.get("keyFactoryAlgorithm") or self.key_factory,
                            base64.b64decode(params["salt"]), int(params["iterations"]), int(params["keyLength"]))
            sealed = base64.b64decode(params["encryptedPassword"])
            iv = base64.b64decode(params["initializationVector"])
            if cipher.startswith("AES/GCM/"):
                plain = AESGCM(key).decrypt(iv, sealed, None)
            else:
                dec = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
                unpadder = padding.PKCS7(128).unpadder()
                plain = unpadder.update(dec.update(sealed) + dec.finalize()) + unpadder.finalize()
            password = plain.decode()
        except PasswordError:
            raise
        except Exception as e:  # noqa: BLE001 - any malformed field or a wrong secret: Kafka's one error
            raise PasswordError("Password could not be decoded") from e
        if _java_length(password) != int(params.get("passwordLength", -1)):
            raise PasswordError("Password could not be decoded, sanity check of length failed")
        return password


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def codec_from(secret: str | None, key_factory: str | None, cipher: str, key_length: int,
               iterations: int) -> PasswordCodec:
    """Kafka's controller's encoder: encrypting with a secret, else the no-op one."""
    if not secret:
        return NoOpCodec()
    return EncryptingCodec(secret, key_factory, cipher, key_length, iterations)


def decoded(props: dict[str, str], codec: PasswordCodec) -> dict[str, str]:
    """A config entity's properties with its passwords decrypted."""
    return {k: codec.decode(v) if is_password_config(k) else v for k, v in props.items()}


def encoded(props: dict[str, str], codec: PasswordCodec) -> dict[str, str]:
    return {k: codec.encode(v) if is_password_config(k) else v for k, v in props.items()}


def names(props: Iterable[str]) -> list[str]:
    """The password configs among ``props``."""
    return [k for k in props if is_password_config(k)]
