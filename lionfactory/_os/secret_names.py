"""The names no tool reads, writes, lists or searches, unless a factory is told otherwise.

A record floor module: data only, so the README's list and the workspace seam
read the same constants.
"""

from __future__ import annotations

__all__ = ["BACKUP_SUFFIXES", "DEFAULT_PROTECTED_NAMES"]

# Private-key families: the bare name, any suffix that is not exactly ".pub"
# (backups such as "~", ".bak", ".old", and the "-sk"/"_sk" hardware-key
# variants), spelled as fnmatch patterns because fnmatch has no negation.
_KEY_FAMILIES = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_xmss")


def _key_family(name: str) -> tuple[str, ...]:
    return (
        name,
        f"{name}[!.]*",
        f"{name}.[!p]*",
        f"{name}.p[!u]*",
        f"{name}.pu[!b]*",
        f"{name}.pub?*",
    )


# Generic names that hold secrets; they are also protected with a backup
# suffix, since editors and people leave "~", ".bak" and ".old" copies.
_SECRET_NAMES = (
    # environment files
    ".env",
    ".env.*",
    "*.env",
    ".envrc",
    # login and package-registry credentials (the "_" spellings are Windows')
    ".netrc",
    "_netrc",
    ".pgpass",
    "pgpass.conf",
    ".htpasswd",
    ".git-credentials",
    ".npmrc",
    ".yarnrc.yml",
    ".pypirc",
    ".vault-token",
    ".my.cnf",
    ".s3cfg",
    ".boto",
    # keys and key stores by extension, and names of bare private keys
    "*.pem",
    "*.key",
    "*.p8",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.ppk",
    "identity",
    "deploy_key",
    # cloud CLI credential files (Google Cloud, Azure) and service keys
    "credentials.json",
    "client_secret*.json",
    "application_default_credentials.json",
    "credentials.db",
    "access_tokens.db",
    "accessTokens.json",
    "msal_token_cache.*",
    "service_principal_entries.json",
    "kubeconfig",
    # whole directories of credentials: AWS CLI, Azure CLI, SSH, GnuPG, kubectl
    ".aws",
    ".azure",
    ".ssh",
    ".gnupg",
    ".kube",
)

BACKUP_SUFFIXES = ("~", ".bak", ".old", ".orig", ".backup", ".save", ".swp", ".tmp", ".copy")
"""Suffixes under which a protected name stays protected (``.netrc~``, ``server.key.bak``)."""

DEFAULT_PROTECTED_NAMES: frozenset[str] = frozenset(
    {
        *(pattern for family in _KEY_FAMILIES for pattern in _key_family(family)),
        *_SECRET_NAMES,
        *(name + suffix for name in _SECRET_NAMES for suffix in BACKUP_SUFFIXES),
    }
)
"""Names (fnmatch patterns, matched case-insensitively) no tool reads, writes, lists or searches.

The README lists them by family. A file whose first bytes are a PEM or
OpenSSH private-key header is refused whatever its name (`refuse_private_key`).
"""
